"""Helpers shared by several test folders: the local model server for opt-in tests, a private redis-server."""
