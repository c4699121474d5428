"""A client for NSQ, for asyncio and for synchronous code (any nsqd, NSQ's own included).

``Producer`` publishes (one publish at a time, or a ``Pipeline`` of them), ``Consumer`` subscribes; both connect
as a ``Config`` says. ``BlockingProducer`` publishes from synchronous code, through a ``Producer`` on a thread of
its own. Everything they raise is an ``NSQError`` (see ``errors`` for the tree).

The names below are loaded on first use, so that ``nsqclient.protocol`` (sans-I/O: frames, names, compression)
imports without asyncio, sockets or ssl.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__
    from .blocking import BlockingProducer as BlockingProducer, ProducerClosed as ProducerClosed
    from .config import Config as Config, user_agent as user_agent
    from .consumer import Consumer as Consumer
    from .errors import (
        CommandTimeout as CommandTimeout,
        ConnectError as ConnectError,
        ConnectionClosed as ConnectionClosed,
        NSQError as NSQError,
        NSQProtocolError as NSQProtocolError,
        TransportError as TransportError,
    )
    from .message import Message as Message
    from .pipeline import Pipeline as Pipeline, Publish as Publish
    from .producer import Producer as Producer

__all__ = ["BlockingProducer", "CommandTimeout", "Config", "ConnectError", "ConnectionClosed", "Consumer", "Message",
           "NSQError", "NSQProtocolError", "Pipeline", "Producer", "ProducerClosed", "Publish", "TransportError",
           "user_agent"]
_MODULE_OF = {
    "BlockingProducer": "blocking", "ProducerClosed": "blocking", "Config": "config", "user_agent": "config",
    "Consumer": "consumer", "CommandTimeout": "errors", "ConnectError": "errors", "ConnectionClosed": "errors",
    "NSQError": "errors", "NSQProtocolError": "errors", "TransportError": "errors", "Message": "message",
    "Pipeline": "pipeline", "Publish": "pipeline", "Producer": "producer",
}

if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name is an error there, not Any
    def __getattr__(name: str) -> Any:
        module = _MODULE_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value  # found directly from now on
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
