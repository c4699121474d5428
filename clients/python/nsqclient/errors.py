"""Errors of the client library: what an nsqd answered, or why there was no answer.

    NSQError                    every error the library raises (no other leaves Producer or Consumer)
    ├── NSQProtocolError        nsqd answered with an error frame; ``code`` is NSQ's (E_BAD_TOPIC...)
    └── TransportError          no answer: the connection could not be opened, or was lost, or went silent
        ├── ConnectError        connecting, the TLS handshake or IDENTIFY/AUTH did not complete (refused,
        │                       unreachable, timed out, closed by nsqd)
        ├── ConnectionClosed    the connection ended before the command was answered
        └── CommandTimeout      no answer within the command's timeout; the connection is then closed

After a TransportError a command that was under way may or may not have taken effect: publishing it again gives
at-least-once delivery. The socket-level error (OSError, TimeoutError, ssl.SSLError) is the ``__cause__``.
"""

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


class TransportError(NSQError):
    """No answer from nsqd; a command that was under way may or may not have taken effect."""


class ConnectError(TransportError):
    """The connection could not be opened and identified."""


class ConnectionClosed(TransportError):
    """The connection ended before the command was answered; the command may or may not have taken effect."""


class CommandTimeout(TransportError):
    """nsqd did not answer in time; the connection was closed, failing the commands after it too."""


def describe(error: BaseException) -> str:
    """An error for a log line: its message, or its type when it has none (a timeout's is empty)."""
    return str(error) or type(error).__name__
