"""Poller: a judge in the persona of a poem's author scores readers' interpretations; agreement with authors."""
