"""How many messages the ``nsq`` source lets nsqd send it un-FIN'd (its window), and how that is cut over
connections. Pure: ``holding_consumer`` applies it.

The window is ``max_in_flight`` messages, and no more than ``max_bytes_in_flight`` of bodies at the size messages
have lately had (a running mean), so that the large default window of small messages does not become gigabytes of
large ones. Until the first message shows their size, they are taken to be as large as nsqd allows by default
(``--max-msg-size``, 1 MiB). A change smaller than a tenth is not made: each costs RDY commands.

nsqd caps each connection's RDY at its ``--max-rdy-count`` (2500 by default), so a large window needs several
connections to each nsqd: ``connection_sets`` says how many.
"""

from __future__ import annotations

from nsqclient.consumer import DEFAULT_MAX_RDY_COUNT

ASSUMED_SIZE = 1024 * 1024  # nsqd's default --max-msg-size
SMOOTHING = 0.01  # the weight of one message in the running mean of body sizes


class WindowSizer:
    def __init__(self, max_in_flight: int, max_bytes_in_flight: int) -> None:
        self.max_in_flight, self.max_bytes = max_in_flight, max_bytes_in_flight
        self.mean_size = float(ASSUMED_SIZE)
        self._measured = False
        self.window = self._fitted()

    def observe(self, size: int) -> int | None:
        """A message of ``size`` bytes arrived: the new window if it should change, else None."""
        if self._measured:
            self.mean_size += SMOOTHING * (size - self.mean_size)
        else:  # the first message replaces the assumption
            self.mean_size, self._measured = float(size), True
        fitted = self._fitted()
        if abs(fitted - self.window) * 10 <= self.window:
            return None
        self.window = fitted
        return fitted

    def _fitted(self) -> int:
        return max(1, min(self.max_in_flight, int(self.max_bytes / max(self.mean_size, 1.0))))


def connection_sets(max_in_flight: int, per_connection: int = DEFAULT_MAX_RDY_COUNT) -> int:
    """How many connections to each nsqd a window of ``max_in_flight`` needs at most."""
    return max(1, -(-max_in_flight // per_connection))


def shares(window: int, count: int) -> list[int]:
    """``window`` cut into ``count`` shares as even as they go (0 for some when it is smaller than ``count``)."""
    share, extra = divmod(window, count)
    return [share + (1 if index < extra else 0) for index in range(count)]
