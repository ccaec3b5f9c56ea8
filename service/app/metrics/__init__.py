"""Prometheus metrics of the API process."""
