"""nsqd's health: the last disk write error, cleared by the next write that succeeds (NSQ's SetHealth).

Unhealthy shows as ``/ping`` answering ``500 NOK - <error>`` and as ``health`` in ``/stats``.
"""

from __future__ import annotations

import logging

log = logging.getLogger("nsqd")


class Health:
    def __init__(self) -> None:
        self.error: str | None = None

    @property
    def status(self) -> str:
        return "OK" if self.error is None else self.error

    def write_failed(self, what: str, error: OSError) -> None:
        if self.error is None:
            log.error("%s - %s", what, error)
        self.error = f"{what} - {error}"

    def write_succeeded(self) -> None:
        if self.error is not None:
            log.info("health restored after: %s", self.error)
            self.error = None
