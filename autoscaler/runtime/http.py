"""The controller's own HTTP endpoints: ``/metrics``, ``/healthz``, ``/readyz``.

Why a tiny stdlib server and not a web framework: three read-only endpoints do not earn a
dependency; ``prometheus_client`` renders the metrics and ``ThreadingHTTPServer`` serves them on
a daemon thread, so a slow scrape never delays a tick.

Health semantics (what a kubelet acts on):
- ``/healthz`` fails when the loop has not finished a tick for ``stall_after`` seconds (the loop is
  stuck: restarting the pod helps). A Prometheus outage does *not* fail it: restarting would not
  bring Prometheus back, and the controller is designed to hold replicas through it.
- ``/readyz`` succeeds once the config is loaded and the first tick has run (leader or standby).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class HealthState:
    """Shared between the loop (writer) and the HTTP thread (reader)."""

    def __init__(self, now: Callable[[], float], stall_after: float) -> None:
        self._now = now
        self._stall_after = stall_after
        self._lock = threading.Lock()
        self._last_tick_end: float | None = None
        self._started = now()
        self._ready = False

    def tick_finished(self) -> None:
        with self._lock:
            self._last_tick_end = self._now()
            self._ready = True

    def healthy(self) -> tuple[bool, str]:
        with self._lock:
            since = self._last_tick_end if self._last_tick_end is not None else self._started
        age = self._now() - since
        if age > self._stall_after:
            return False, f"no tick finished for {age:.0f}s (limit {self._stall_after:.0f}s)"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        with self._lock:
            return (True, "ok") if self._ready else (False, "first tick not finished")


def serve(registry: CollectorRegistry, health: HealthState, host: str, port: int) -> ThreadingHTTPServer:
    """Start the endpoints on a daemon thread; returns the server (``.server_address``, ``.shutdown()``)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                ok, why = health.healthy() if path == "/healthz" else health.ready()
                self._send(200 if ok else 503, (why + "\n").encode(), "text/plain; charset=utf-8")
            else:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # quiet: scrapes every 15 s
            return

    server = ThreadingHTTPServer((host, port), Handler)
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    return server
