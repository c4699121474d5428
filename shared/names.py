"""Topic and channel names: 1 to 64 characters of ``[.a-zA-Z0-9_-]``, optionally ending in ``#ephemeral``."""

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
    """A string quoted as Go's ``%q`` prints it, for error texts that must match NSQ's."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in escaped) + '"'
