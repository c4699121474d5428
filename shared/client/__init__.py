"""The asyncio client library for NSQ (works with any nsqd, not only this project's)."""

from .consumer import Consumer
from .errors import ConnectionClosed, NSQError, NSQProtocolError
from .message import Message
from .producer import Producer

__all__ = ["ConnectionClosed", "Consumer", "Message", "NSQError", "NSQProtocolError", "Producer"]
