"""The asyncio client library for NSQ (works with any nsqd, not only this project's).

``Producer`` publishes (one publish at a time, or a ``Pipeline`` of them), ``Consumer`` subscribes; both connect
as a ``Config`` says. ``BlockingProducer`` publishes from synchronous code, through a ``Producer`` on a thread of
its own. Everything they raise is an ``NSQError`` (see ``errors`` for the tree).
"""

from .blocking import BlockingProducer, ProducerClosed
from .config import Config, user_agent
from .consumer import Consumer
from .errors import (
    CommandTimeout,
    ConnectError,
    ConnectionClosed,
    NSQError,
    NSQProtocolError,
    TransportError,
)
from .message import Message
from .pipeline import Pipeline, Publish
from .producer import Producer

__all__ = ["BlockingProducer", "CommandTimeout", "Config", "ConnectError", "ConnectionClosed", "Consumer", "Message",
           "NSQError", "NSQProtocolError", "Pipeline", "Producer", "ProducerClosed", "Publish", "TransportError",
           "user_agent"]
