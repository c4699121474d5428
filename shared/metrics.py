"""/metrics for one service instance: its own Prometheus registry (never the global one, so two instances can
share a process), holding one collector that reads the instance's state at scrape time.

prometheus_client, and the collector itself, come at the first scrape: prometheus_client pulls in http.server and
email (about 1.5 MB), which an instance that is never scraped need not carry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class PrometheusEndpoint:
    def __init__(self, collector: Callable[[], Any]) -> None:
        """``collector()`` makes the collector: an object with prometheus_client's ``collect()`` (yielding metric
        families)."""
        self._collector = collector
        self._registry: CollectorRegistry | None = None

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest

        if self._registry is None:
            self._registry = CollectorRegistry()
            self._registry.register(self._collector())
            ProcessCollector(registry=self._registry)
        return generate_latest(self._registry), CONTENT_TYPE_LATEST
