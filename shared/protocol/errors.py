"""NSQ protocol errors: a code such as ``E_INVALID`` plus a human description.

A client error is answered with an error frame and the connection stays open; a fatal one is answered and
the connection is closed. Only ``E_FIN_FAILED``, ``E_REQ_FAILED`` and ``E_TOUCH_FAILED`` are non-fatal.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """An error answered to the client as ``<code> <description>`` in an error frame."""

    def __init__(self, code: str, description: str) -> None:
        super().__init__(f"{code} {description}")
        self.code = code
        self.description = description

    @property
    def frame_text(self) -> bytes:
        return f"{self.code} {self.description}".encode()


class FatalClientError(ProtocolError):
    """Answered, then the connection is closed."""


class ClientError(ProtocolError):
    """Answered; the connection stays open."""


class BadProtocolError(FatalClientError):
    """A connection that does not start with the protocol's magic: answered with the bare code, as NSQ does."""

    def __init__(self, magic: bytes) -> None:
        super().__init__("E_BAD_PROTOCOL", f"bad protocol magic {magic.decode('latin-1')!r}")

    @property
    def frame_text(self) -> bytes:
        return self.code.encode()
