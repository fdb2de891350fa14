"""Real-server fixtures for the adapter tests (defined in tests/servers.py, shared with later suites)."""

from tests.servers import alertmanager_server, prometheus_server, prometheus_tls_server

__all__ = ["alertmanager_server", "prometheus_server", "prometheus_tls_server"]
