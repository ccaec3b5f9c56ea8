"""API key management and the tenant's callback signing secret (admin scope)."""
