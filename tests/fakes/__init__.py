"""Local stand-ins for remote services, for tests and benchmarks."""
