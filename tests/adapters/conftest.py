"""The real-server fixtures the adapter tests use are registered once in ``tests/conftest.py``."""
