"""Personas of poets: the authors the Poller judge plays, versioned."""
