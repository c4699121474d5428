"""Topic and channel names as the wire protocols take them: 1 to 64 characters of ``[.a-zA-Z0-9_-]``, optionally
ending in ``#ephemeral``; and ``go_quote``, how NSQ's error texts quote them."""

from __future__ import annotations

import re

EPHEMERAL_SUFFIX = "#ephemeral"
MAX_NAME_LENGTH = 64

_VALID_NAME = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")


def is_valid_name(name: str) -> bool:
    return 0 < len(name) <= MAX_NAME_LENGTH and _VALID_NAME.fullmatch(name) is not None


is_valid_topic_name = is_valid_name
is_valid_channel_name = is_valid_name


def is_ephemeral(name: str) -> bool:
    return name.endswith(EPHEMERAL_SUFFIX)


def go_quote(text: str) -> str:
    """A string quoted as Go's ``%q`` prints it, for error texts that must match NSQ's.

    A byte that was not UTF-8, decoded with ``errors="surrogateescape"``, comes out as ``\\xNN`` as in Go.
    """
    return '"' + "".join(_GO_ESCAPES.get(ch) or _go_escape(ch) for ch in text) + '"'


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
               "\\": "\\\\", '"': '\\"'}


def _go_escape(ch: str) -> str:
    """strconv.Quote for one character that has no short escape: printable ones stay as they are."""
    if ch.isprintable():
        return ch
    code = ord(ch)
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    if 0xD800 <= code <= 0xDFFF:
        code = 0xFFFD  # Go writes a rune that is not valid as the replacement character
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
