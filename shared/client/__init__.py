"""The asyncio client library for NSQ (works with any nsqd, not only this project's)."""

from .errors import ConnectionClosed, NSQError, NSQProtocolError
from .producer import Producer

__all__ = ["ConnectionClosed", "NSQError", "NSQProtocolError", "Producer"]
