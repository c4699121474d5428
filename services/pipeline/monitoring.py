"""A job's HTTP endpoint (``--http-address``): ``/ping`` answers ``OK`` while the streaming query runs (a container's
health check), ``/metrics`` gives its progress (``progress.JobProgress``) to Prometheus. Served from a thread of the
driver: the job's main thread is waiting on the query."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest

from nsqclient.addresses import split_host_port

if TYPE_CHECKING:
    from .progress import JobProgress


def serve(address: str, progress: JobProgress) -> ThreadingHTTPServer:
    """Starts serving ``/ping`` and ``/metrics`` on ``address`` (``host:port``); ``shutdown()`` stops it."""
    registry = CollectorRegistry()
    registry.register(progress)
    query = progress.query

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/ping":
                healthy = query.isActive
                self._reply(200 if healthy else 500, b"OK" if healthy else b"NOK - query stopped", "text/plain")
            elif self.path == "/metrics":
                self._reply(200, generate_latest(registry), "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._reply(404, b"NOT_FOUND", "text/plain")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a health check every few seconds is not worth a log line

    host, port = split_host_port(address)
    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="nsq-pipeline-http", daemon=True).start()
    return server
