"""Client commands of protocol V2, parsed from bytes without I/O.

``CommandParser.feed(data)`` returns every command completed by ``data``. A command is its name, its
space-separated arguments and, for IDENTIFY, AUTH, PUB, DPUB and MPUB, its body. Parsing stops after an IDENTIFY:
it may upgrade the connection (TLS, compression), so the bytes after it are held, unparsed, until the caller takes
them (``take_held``: they are framed anew), drops them (``drop_held``: they came before a TLS handshake) or lets
them be parsed as they are (``release_held``).

Limits are checked while parsing, before a body is buffered: a body over ``--max-body-size`` (or a message over
``--max-msg-size``) is never read. Such a command comes out with ``error`` set and the parser stops there, because
the byte stream cannot be trusted past it; the handler validates the command line first and raises ``error``
after, which keeps NSQ's order of checks (a bad topic name is reported before a bad body).
"""

from __future__ import annotations

import struct
from typing import Callable, NamedTuple

from .errors import BadProtocolError, FatalClientError

# nsqd reads command lines through a 16 KiB buffer; a longer line cannot be a command
MAX_LINE_LENGTH = 16 * 1024

_SIZE = struct.Struct(">i")


class Command(NamedTuple):
    name: bytes
    args: list[bytes]
    body: bytes = b""
    # MPUB's message bodies
    messages: list[bytes] | None = None
    error: FatalClientError | None = None


# Consecutive well-formed ``FIN <id>`` lines come out as one command of this name whose args are their IDs, in
# order: consumers FIN in runs of thousands, and one command per run is what keeps FIN cheap. No client can
# send this name, since a parsed name never contains a newline.
FIN_RUN = b"FIN\n"

# NamedTuple.__new__ is a Python function; building the tuple directly is three times cheaper
_new = tuple.__new__


def _line_command(name: bytes, args: list[bytes]) -> Command:
    return _new(Command, (name, args, b"", None, None))


def _failed(name: bytes, args: list[bytes], code: str, description: str) -> Command:
    return _new(Command, (name, args, b"", None, FatalClientError(code, description)))


class Magic:
    """The four bytes a client sends first, naming the protocol it speaks."""

    def __init__(self, expected: bytes) -> None:
        self.expected = expected
        self.seen = b""

    @property
    def complete(self) -> bool:
        return len(self.seen) == len(self.expected)

    def take(self, data: bytes) -> bytes:
        """The bytes of ``data`` after the magic (none while it is incomplete); raises BadProtocolError once it
        is complete and not the expected one."""
        needed = len(self.expected) - len(self.seen)
        self.seen += data[:needed]
        if self.complete and self.seen != self.expected:
            raise BadProtocolError(self.seen)
        return data[needed:]


class MagicFirst:
    """What the parsers of a stream that opens with the protocol's magic share: the magic, then commands until one
    carries an error."""

    def __init__(self, magic: bytes) -> None:
        self._magic = Magic(magic) if magic else None
        self._stopped = False

    def _strip_magic(self, data: bytes) -> tuple[bytes, list[Command] | None]:
        """The bytes past the magic, or the commands to answer with instead: none while the magic is incomplete,
        the one refusing a wrong magic."""
        assert self._magic is not None
        try:
            data = self._magic.take(data)
        except BadProtocolError as error:
            self._stopped = True
            return b"", [_new(Command, (b"", [], b"", None, error))]
        if not self._magic.complete:
            return b"", []
        self._magic = None
        return data, None


# (parsed command, position after it); None when more bytes are needed, which are kept from the start of the
# command; (None, position) when they are kept from that position (an MPUB keeps the messages it has)
_Parsed = tuple[Command | None, int] | None
_BodyParser = Callable[["CommandParser", bytes, list[bytes], bytes, int], _Parsed]


class CommandParser(MagicFirst):
    """Turns the bytes a client sends into ``Command`` values (the magic first, when given)."""

    def __init__(self, max_msg_size: int, max_body_size: int, magic: bytes = b"") -> None:
        super().__init__(magic)
        self.max_msg_size = max_msg_size
        self.max_body_size = max_body_size
        # an unfinished command as the pieces it arrived in (joined once it is worth parsing again: a large message
        # is then copied once, not once per piece), their length, and the length it needs for that
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._pending_needs = 0
        self._wait_until = 0
        # an MPUB whose messages are still arriving; the pending bytes then start at its next message
        self._partial_mpub: _PartialMpub | None = None
        # after an IDENTIFY: the pending bytes are held unparsed until the caller knows how they are framed
        self.holding = False

    def feed(self, data: bytes) -> list[Command]:
        if self._stopped:
            return []
        if self._magic is not None:
            data, instead = self._strip_magic(data)
            if instead is not None:
                return instead
        if self.holding:
            self._keep_pending(data)
            return []
        if self._pending:
            self._keep_pending(data)
            if self._pending_size < self._pending_needs:
                return []
            data = self._take_pending()
        commands: list[Command] = []
        pos = self._parse(data, commands)
        if pos < len(data) and not self._stopped:
            self._keep_pending(data[pos:])
            self._pending_needs = max(self._wait_until - pos, self._pending_size + 1)
        return commands

    def _keep_pending(self, data: bytes) -> None:
        # kept beyond this call: a caller's reusable buffer is copied
        self._pending.append(data if data.__class__ is bytes else bytes(data))
        self._pending_size += len(data)

    def _take_pending(self) -> bytes:
        pending = self._pending
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        self._pending = []
        self._pending_size = 0
        return data

    def take_held(self) -> bytes:
        """The bytes received after an IDENTIFY, unparsed and forgotten here: the connection upgraded, and they
        are to be unframed first (inflated)."""
        if not self.holding:
            return b""
        self.holding = False
        return self._take_pending()

    def drop_held(self) -> int:
        """Forgets the bytes held after an IDENTIFY and goes on holding what comes next: the connection is about to
        upgrade to TLS, and bytes sent before the handshake are not TLS records. How many were dropped."""
        holding = self.holding
        dropped = len(self.take_held())
        self.holding = holding
        return dropped

    def release_held(self) -> list[Command]:
        """The commands in the bytes held after an IDENTIFY that upgraded nothing."""
        return self.feed(self.take_held()) if self.holding else []

    def _parse(self, data: bytes, commands: list[Command]) -> int:
        pos, end = 0, len(data)
        self._wait_until = 0
        if self._partial_mpub is not None:
            command, pos = self._mpub_messages(self._partial_mpub, data, 0)
            if command is None or not self._keep(command, commands):
                return pos
        while pos < end:
            newline = data.find(b"\n", pos, pos + MAX_LINE_LENGTH)
            if newline < 0:
                if end - pos >= MAX_LINE_LENGTH:
                    commands.append(_failed(b"", [], "E_INVALID", f"command line exceeds {MAX_LINE_LENGTH} bytes"))
                    self._stopped = True
                return pos
            if newline - pos == 20 and data.startswith(b"FIN ", pos):
                run_end = self._fin_run_end(data, pos)
                if run_end > pos:
                    ids = [data[line + 4:line + 20] for line in range(pos, run_end, 21)]
                    commands.append(_new(Command, (FIN_RUN, ids, b"", None, None)))
                    pos = run_end
                    continue
            line_end = newline - 1 if newline > pos and data[newline - 1] == 13 else newline  # one \r
            args = data[pos:line_end].split(b" ")
            name = args.pop(0)
            body_parser = _BODY_PARSERS.get(name)
            if body_parser is None:
                commands.append(_new(Command, (name, args, b"", None, None)))
                pos = newline + 1
                continue
            parsed = body_parser(self, name, args, data, newline + 1)
            if parsed is None:
                return pos
            command, pos = parsed
            if command is None or not self._keep(command, commands):
                return pos
            if name == b"IDENTIFY":
                self.holding = True
                return pos
        return pos

    def _keep(self, command: Command, commands: list[Command]) -> bool:
        """Appends ``command``; False when it carries an error, past which the byte stream cannot be trusted."""
        commands.append(command)
        if command.error is not None:
            self._stopped = True
            return False
        return True

    @staticmethod
    def _fin_run_end(data: bytes, pos: int) -> int:
        """Where the run of plain ``FIN <16-byte id>\\n`` lines starting at ``pos`` ends (``pos`` if the first line
        is not one); a line that is not plain goes through the general path, which reports it as NSQ does."""
        end, run_end = len(data), pos + 21
        while run_end + 21 <= end and data[run_end + 20] == 10 and data.startswith(b"FIN ", run_end):
            run_end += 21
        if _plain_fins(data, pos, run_end):  # checked once for the whole run, the common case
            return run_end
        for line in range(pos, run_end, 21):
            if not _plain_fins(data, line, line + 21):
                return line
        return run_end

    def _sized_body(self, name: bytes, args: list[bytes], data: bytes, start: int) -> _Parsed:
        """IDENTIFY and AUTH: one body of at most --max-body-size."""
        if name == b"AUTH" and args:
            return _line_command(name, args), start  # wrong arity: NSQ rejects it before reading a body
        if len(data) - start < 4:
            return None
        (size,) = _SIZE.unpack_from(data, start)
        label = name.decode()
        if size > self.max_body_size:
            return _failed(name, args, "E_BAD_BODY", f"{label} body too big {size} > {self.max_body_size}"), start
        if size <= 0:
            return _failed(name, args, "E_BAD_BODY", f"{label} invalid body size {size}"), start
        return self._take_body(name, args, data, start, size)

    def _message_body(self, name: bytes, args: list[bytes], data: bytes, start: int) -> _Parsed:
        """PUB and DPUB: one message of at most --max-msg-size."""
        if len(args) < _MIN_ARGS[name]:
            return _line_command(name, args), start
        if len(data) - start < 4:
            return None
        (size,) = _SIZE.unpack_from(data, start)
        label = name.decode()
        if size <= 0:
            return _failed(name, args, "E_BAD_MESSAGE", f"{label} invalid message body size {size}"), start
        if size > self.max_msg_size:
            return _failed(name, args, "E_BAD_MESSAGE", f"{label} message too big {size} > {self.max_msg_size}"), start
        return self._take_body(name, args, data, start, size)

    def _take_body(self, name: bytes, args: list[bytes], data: bytes, start: int, size: int) -> _Parsed:
        end = start + 4 + size
        if len(data) < end:
            self._wait_until = end
            return None
        return _new(Command, (name, args, data[start + 4:end], None, None)), end

    def _mpub(self, name: bytes, args: list[bytes], data: bytes, start: int) -> _Parsed:
        """MPUB: ``[body size][count]([size][message])*``, every message checked before any is accepted."""
        if not args:
            return _line_command(name, args), start
        if len(data) - start < 4:
            return None
        (body_size,) = _SIZE.unpack_from(data, start)
        if body_size <= 0:
            return _failed(name, args, "E_BAD_BODY", f"MPUB invalid body size {body_size}"), start
        if body_size > self.max_body_size:
            return _failed(name, args, "E_BAD_BODY", f"MPUB body too big {body_size} > {self.max_body_size}"), start
        # NSQ reads the count and the messages from the stream and never reconciles them with the declared
        # size: the MPUB ends where its last message does, whatever the size said. What its messages add up to
        # is held to --max-body-size, though, which NSQ does not do: unchecked, one MPUB could make nsqd buffer
        # (max_body_size / 5) messages of max_msg_size each before answering
        try:
            count = _mpub_count(data, start + 4, self.max_body_size)
        except FatalClientError as error:
            return _new(Command, (name, args, b"", None, error)), start
        if count is None:
            self._wait_until = start + 8
            return None
        return self._mpub_messages(_PartialMpub(name, args, count, self.max_body_size - 4), data, start + 8)

    def _mpub_messages(self, mpub: _PartialMpub, data: bytes, offset: int) -> tuple[Command | None, int]:
        """Reads on an MPUB's messages from ``offset``: the command once all are there, else (None, the offset of
        the first missing one), remembering the MPUB so the next feed resumes there."""
        messages = mpub.messages
        try:
            offset, needs, mpub.room = _read_messages(data, offset, len(messages), mpub.count, self.max_msg_size,
                                                      messages, mpub.room)
        except FatalClientError as error:
            self._partial_mpub = None
            return _new(Command, (mpub.name, mpub.args, b"", None, error)), offset
        if needs:
            self._partial_mpub = mpub
            self._wait_until = needs
            return None, offset
        self._partial_mpub = None
        return _new(Command, (mpub.name, mpub.args, b"", messages, None)), offset


class _PartialMpub:
    """An MPUB whose count has arrived, with the messages read so far."""

    __slots__ = ("name", "args", "count", "messages", "room")

    def __init__(self, name: bytes, args: list[bytes], count: int, room: int) -> None:
        self.name = name
        self.args = args
        self.count = count
        self.messages: list[bytes] = []
        self.room = room  # bytes the remaining messages (sizes included) may still take


def _plain_fins(data: bytes, start: int, end: int) -> bool:
    """Whether the 21-byte lines from ``start`` to ``end`` each hold one space and one newline and no \\r."""
    lines = (end - start) // 21
    return data.count(b" ", start, end) == lines and data.count(b"\n", start, end) == lines \
        and data.find(b"\r", start, end) < 0


def split_mpub(data: bytes, offset: int, max_msg_size: int, max_body_size: int) -> tuple[list[bytes] | None, int]:
    """MPUB's ``[count]([size][message])*`` starting at ``offset``: the messages and the offset after them.

    Returns ``(None, n)`` when ``data`` ends before the messages do (``n`` is the length it must reach to
    continue); raises FatalClientError with NSQ's code and text for a count or size out of bounds.
    """
    count = _mpub_count(data, offset, max_body_size)
    if count is None:
        return None, offset + 4
    messages: list[bytes] = []
    end, needs, _ = _read_messages(data, offset + 4, 0, count, max_msg_size, messages, max_body_size - 4)
    return (None, needs) if needs else (messages, end)


def _mpub_count(data: bytes, offset: int, max_body_size: int) -> int | None:
    """MPUB's message count at ``offset``, None if it has not arrived; NSQ's bound allows 5 bytes a message."""
    if len(data) < offset + 4:
        return None
    count: int = _SIZE.unpack_from(data, offset)[0]
    if count <= 0 or count > (max_body_size - 4) // 5:
        raise FatalClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
    return count


def _read_messages(data: bytes, offset: int, index: int, count: int, max_msg_size: int,
                   out: list[bytes], room: int) -> tuple[int, int, int]:
    """Appends MPUB messages ``index`` to ``count - 1``, read from ``offset``, to ``out``; together they may take
    ``room`` bytes (sizes included).

    Returns the offset after the last one read, the length ``data`` must reach to complete a missing one (else
    0), and the room left. A size out of bounds raises NSQ's error as soon as it is read, before its message.
    """
    unpack, end = _SIZE.unpack_from, len(data)
    for index in range(index, count):
        if offset + 4 > end:
            return offset, offset + 4, room
        size: int = unpack(data, offset)[0]
        if size <= 0:
            raise FatalClientError("E_BAD_MESSAGE", f"MPUB invalid message({index}) body size {size}")
        if size > max_msg_size:
            raise FatalClientError("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg_size}")
        if 4 + size > room:
            raise FatalClientError("E_BAD_BODY", "MPUB messages exceed --max-body-size")
        start = offset + 4
        if start + size > end:
            return offset, start + size, room
        offset = start + size
        room -= 4 + size
        out.append(data[start:offset])
    return offset, 0, room


_MIN_ARGS = {b"PUB": 1, b"DPUB": 2}

_BODY_PARSERS: dict[bytes, _BodyParser] = {
    b"IDENTIFY": CommandParser._sized_body,
    b"AUTH": CommandParser._sized_body,
    b"PUB": CommandParser._message_body,
    b"DPUB": CommandParser._message_body,
    b"MPUB": CommandParser._mpub,
}
