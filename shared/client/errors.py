"""Errors of the client library: what an nsqd answered, or why there was no answer."""

from __future__ import annotations


class NSQError(Exception):
    """Base of every error the client library raises."""


class NSQProtocolError(NSQError):
    """nsqd answered a command with an error frame: ``code`` is NSQ's (``E_BAD_TOPIC``, ``E_PUB_FAILED``...)."""

    def __init__(self, code: str, description: str) -> None:
        super().__init__(f"{code} {description}".strip())
        self.code = code
        self.description = description

    @classmethod
    def from_frame(cls, data: bytes) -> NSQProtocolError:
        code, _, description = data.decode("utf-8", "replace").partition(" ")
        return cls(code, description)


class ConnectionClosed(NSQError):
    """The connection ended before the command was answered; the command may or may not have taken effect."""
