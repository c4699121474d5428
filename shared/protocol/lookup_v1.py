"""lookupd's TCP protocol V1, parsed from bytes without I/O: what nsqd sends to register its topics.

After the magic ``"  V1"`` a client sends lines (trimmed of surrounding whitespace, split on spaces); IDENTIFY is
followed by ``[int32 size][JSON]``. lookupd answers every command with ``[int32 size][data]``, with no frame type
(an error is ``E_CODE description`` and closes the connection: every V1 error is fatal).

TLS, beyond NSQ, is negotiated the way protocol V2 negotiates it: nsqd asks with ``"tls_v1": true`` in its
IDENTIFY body, lookupd agrees with ``"tls_v1": true`` in its answer, and both sides go on over TLS on the same
connection from the byte after that answer. Once the handshake is done (the nsqd's certificate accepted), lookupd
sends ``OK`` over TLS, and nsqd waits for it before its next command, as a V2 client waits for the ``OK`` after its
upgrade: with TLS 1.3 a client learns that its certificate was refused only when it next reads. Every other byte
stays as NSQ has it, so either side can be NSQ's:

- NSQ's lookupd ignores the field it does not know and answers without it: an nsqd that asked refuses to go on in
  plain (it closes and tries again later), with a log line naming the reason;
- NSQ's nsqd never asks: lookupd answers as NSQ's does, unless it requires TLS, when it refuses the IDENTIFY with an
  error that NSQ's nsqd writes to its log.

IDENTIFY itself (the nsqd's addresses, ports and version, which lookupd hands to anyone on ``/nodes`` anyway) is
sent in plain; registrations, which come after it, travel over TLS. Negotiating in IDENTIFY, rather than telling a
TLS ClientHello from the magic by the first byte on the port, keeps the refusals readable in both logs (NSQ's
lookupd would see a ClientHello as a bad magic, and the nsqd only a failed handshake) and needs no peeking at a
socket before the event loop reads it (asyncio cannot hand bytes it has read to a TLS layer).
"""

from __future__ import annotations

import struct

from collections.abc import Mapping
from typing import Any

from .commands import MAX_LINE_LENGTH, Command, MagicFirst
from .errors import FatalClientError

MAGIC_V1 = b"  V1"
# lookupd has no --max-body-size; an IDENTIFY body is a few hundred bytes
MAX_IDENTIFY_BODY = 1 << 20

_SIZE = struct.Struct(">i")
_new = tuple.__new__


# the IDENTIFY field nsqd asks for TLS with, and the answer's field lookupd agrees with
TLS_V1 = "tls_v1"


def encode_response(data: bytes) -> bytes:
    return _SIZE.pack(len(data)) + data


def lookupd_upgrades(requested: bool, offered: bool, required: bool) -> bool:
    """lookupd's side: whether the connection goes on over TLS after the IDENTIFY answer (which then carries
    ``"tls_v1": true``). ``offered``: lookupd has a certificate; ``required``: it refuses registrations in plain."""
    if requested and offered:
        return True
    if required:
        raise FatalClientError("E_INVALID", "cannot IDENTIFY without TLS (nsqlookupd has --tls-required; an nsqd "
                                            "registers over TLS with --lookupd-tls-root-ca-file)")
    return False


def lookupd_agreed(answer: Mapping[str, Any]) -> bool:
    """nsqd's side: whether lookupd's IDENTIFY answer agreed to go on over TLS."""
    return answer.get(TLS_V1) is True


class LookupCommandParser(MagicFirst):
    """Bytes in (the magic first, when given), ``Command`` values out; stops at the first command that carries an
    error."""

    def __init__(self, magic: bytes = b"") -> None:
        super().__init__(magic)
        self._pending = bytearray()
        # how long the pending bytes must grow before parsing them again can finish a command: a body arriving in
        # small reads is then parsed once, not once per read
        self._needs = 0

    @property
    def buffered(self) -> int:
        """Bytes received that are not a whole command yet."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[Command]:
        if self._stopped:
            return []
        if self._magic is not None:
            data, instead = self._strip_magic(data)
            if instead is not None:
                return instead
        self._pending += data
        if len(self._pending) < self._needs:
            return []
        data = bytes(self._pending)
        commands: list[Command] = []
        self._needs = 0
        pos = 0
        while not self._stopped:
            newline = data.find(b"\n", pos, pos + MAX_LINE_LENGTH)
            if newline < 0:
                if len(data) - pos >= MAX_LINE_LENGTH:
                    self._stop(commands, b"", [], "E_INVALID", f"command line exceeds {MAX_LINE_LENGTH} bytes")
                break  # a line is searched again from its start: bounded by MAX_LINE_LENGTH
            args = data[pos:newline].strip().split(b" ")
            name = args.pop(0)
            if name != b"IDENTIFY":
                commands.append(_new(Command, (name, args, b"", None, None)))
                pos = newline + 1
                continue
            body_at = newline + 1
            if len(data) - body_at < 4:
                self._needs = body_at + 4 - pos
                break
            (size,) = _SIZE.unpack_from(data, body_at)
            if not 0 < size <= MAX_IDENTIFY_BODY:
                self._stop(commands, name, args, "E_BAD_BODY", f"IDENTIFY invalid body size {size}")
                break
            if len(data) - body_at - 4 < size:
                self._needs = body_at + 4 + size - pos
                break
            commands.append(_new(Command, (name, args, data[body_at + 4:body_at + 4 + size], None, None)))
            pos = body_at + 4 + size
        self._pending = bytearray(data[pos:]) if not self._stopped else bytearray()
        return commands

    def _stop(self, commands: list[Command], name: bytes, args: list[bytes], code: str, text: str) -> None:
        commands.append(_new(Command, (name, args, b"", None, FatalClientError(code, text))))
        self._stopped = True
