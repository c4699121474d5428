"""A connection's publishes answered in the order they came, though each may wait for something else (its copies
on the mirrors, its topic's start): the publishes after one that waits go into their topics meanwhile, so a producer
that sends several before reading gets one round trip to the mirrors for all of them.

An answer is bytes (written once every earlier one is), None (nothing to write), an error answered in turn, or an
awaitable of either. A refusal that is not a ``ClientError`` closes the connection once it is written, and the
answers after it are cancelled: those publishes were taken, so a retry makes duplicates, never a loss.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Awaitable, Protocol, cast

from shared.protocol.errors import ClientError, ProtocolError

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("nsqd")


class Answering(Protocol):
    """The connection the answers are written to."""

    client: Client

    def answer_error(self, error: ProtocolError) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool: ...


class PublishAnswers:
    """Held by its connection, and holding it until ``cancel`` (when the connection is lost): a lost connection is
    then freed at once, not left in a cycle for the garbage collector."""

    def __init__(self, connection: Answering) -> None:
        self._connection: Answering | None = connection
        self._loop = asyncio.get_running_loop()
        self._answers: deque[asyncio.Future[bytes | None]] = deque()  # oldest first
        self._all_answered: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._answers)

    def add(self, reply: object) -> None:
        """``reply`` (bytes, None, an error or an awaitable of bytes or None) is written once every earlier one is."""
        if isinstance(reply, (bytes, ProtocolError)) or reply is None:
            answer: asyncio.Future[bytes | None] = self._loop.create_future()
            if isinstance(reply, ProtocolError):
                answer.set_exception(reply)
            else:
                answer.set_result(reply)
        else:
            answer = asyncio.ensure_future(cast(Awaitable[bytes | None], reply))
        self._answers.append(answer)
        answer.add_done_callback(self._answered)

    def cancel(self) -> None:
        """The connection is gone, or closing: nothing more is answered."""
        self._cancel_waiting()
        self._connection = None

    def _cancel_waiting(self) -> None:
        for answer in self._answers:
            answer.cancel()
        self._answers.clear()

    async def all_answered(self) -> None:
        if self._answers:
            self._all_answered = self._loop.create_future()
            await self._all_answered

    def _answered(self, _: asyncio.Future[bytes | None]) -> None:
        """Writes the answers that are ready, oldest first; a refusal closes the connection."""
        connection, answers = self._connection, self._answers
        if connection is None or connection.is_closing():
            return
        client = connection.client
        while answers and answers[0].done():
            answer = answers.popleft()
            # only the connection cancels its answers, once they are out of the queue: anything else is a bug
            error = answer.exception() if not answer.cancelled() else asyncio.CancelledError("answer cancelled")
            if error is None:
                if (reply := answer.result()) is not None:
                    client.queue_response(reply)
            elif isinstance(error, ClientError):
                connection.answer_error(error)
            else:
                if isinstance(error, ProtocolError):
                    connection.answer_error(error)
                else:
                    log.error("[%s] - failed to process a command", client, exc_info=error)
                self._cancel_waiting()
                connection.close()
                break
        client.flush()
        if not answers and self._all_answered is not None and not self._all_answered.done():
            self._all_answered.set_result(None)
