"""A message as a consumer's handler gets it, with the responses nsqd expects for it.

Each message gets exactly one response, FIN or REQ, on the connection it came from; TOUCH may come any number of
times before it. After the response, the message's methods do nothing, so a handler may finish a message and the
consumer's automatic response after the handler returns cannot send a second one.
"""

from __future__ import annotations

from typing import Protocol


class Responder(Protocol):
    """The connection a message came on (see ``consumer``)."""

    def finish(self, message: Message) -> None: ...

    def requeue(self, message: Message, delay: float | None, backoff: bool) -> None: ...

    def touch(self, message: Message) -> None: ...


class Message:
    __slots__ = ("id", "body", "timestamp", "attempts", "nsqd_address", "auto_response", "_responder",
                 "_responded")

    def __init__(self, id: bytes, body: bytes, timestamp: int, attempts: int, nsqd_address: str,
                 responder: Responder) -> None:
        self.id = id
        self.body = body
        self.timestamp = timestamp  # when nsqd took it, nanoseconds since the epoch
        self.attempts = attempts  # 1 on the first delivery
        self.nsqd_address = nsqd_address
        # FIN when the handler returns, REQ when it raises (unless the handler responded itself)
        self.auto_response = True
        self._responder = responder
        self._responded = False

    def __repr__(self) -> str:
        return f"<Message {self.id.decode()} attempts={self.attempts} from {self.nsqd_address}>"

    @property
    def responded(self) -> bool:
        return self._responded

    def disable_auto_response(self) -> None:
        """The handler takes over: the message stays in flight until ``finish()`` or ``requeue()`` (or nsqd's
        timeout) however the handler ends, as a batching consumer needs."""
        self.auto_response = False

    def finish(self) -> None:
        """Done with it: nsqd forgets the message."""
        if not self._responded:
            self._responded = True
            self._responder.finish(self)

    def requeue(self, delay: float | None = None, backoff: bool = True) -> None:
        """Give it back for another attempt after ``delay`` seconds (the consumer's policy when None);
        ``backoff`` counts it as a failure for the consumer's backoff."""
        if not self._responded:
            self._responded = True
            self._responder.requeue(self, delay, backoff)

    def touch(self) -> None:
        """Resets nsqd's timeout for this message (up to nsqd's --max-msg-timeout in all)."""
        if not self._responded:
            self._responder.touch(self)
