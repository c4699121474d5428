"""Topic and channel names, and Go's %q quoting used in NSQ's error texts."""

from __future__ import annotations

import pytest

from nsqclient.protocol.names import (
    EPHEMERAL_SUFFIX,
    MAX_NAME_LENGTH,
    go_quote,
    is_ephemeral,
    is_valid_channel_name,
    is_valid_name,
    is_valid_topic_name,
)

VALID = [
    "a",
    "topic",
    "Topic_1",
    "a.b-c_d",
    "...",
    "-",
    "_",
    "0",
    "a#ephemeral",
    "x" * MAX_NAME_LENGTH,
    "x" * (MAX_NAME_LENGTH - len(EPHEMERAL_SUFFIX)) + EPHEMERAL_SUFFIX,
]

INVALID = [
    "",
    "x" * (MAX_NAME_LENGTH + 1),
    # the suffix counts toward the 64 characters
    "x" * (MAX_NAME_LENGTH - len(EPHEMERAL_SUFFIX) + 1) + EPHEMERAL_SUFFIX,
    "#ephemeral",
    "a#",
    "a#b",
    "a#Ephemeral",
    "a#ephemeral#ephemeral",
    "a#ephemeralx",
    "a b",
    " a",
    "a/b",
    "a:b",
    "a*",
    "a,b",
    "a\tb",
    "tópico",
    "a\u00a0b",
    "\u0661",  # a digit, but not an ASCII one
    # Go's $ without (?m) matches only at the very end: a trailing newline is not allowed
    "topic\n",
    "topic#ephemeral\n",
    "\ntopic",
    "top\nic",
    "topic\r",
    "topic\x00",
]


@pytest.mark.parametrize("name", VALID)
def test_valid_names(name: str) -> None:
    assert is_valid_name(name)
    assert is_valid_topic_name(name)
    assert is_valid_channel_name(name)


@pytest.mark.parametrize("name", INVALID, ids=[repr(name)[:30] for name in INVALID])
def test_invalid_names(name: str) -> None:
    assert not is_valid_name(name)
    assert not is_valid_topic_name(name)
    assert not is_valid_channel_name(name)


def test_length_limit_is_64() -> None:
    assert MAX_NAME_LENGTH == 64
    assert is_valid_name("a" * 64) and not is_valid_name("a" * 65)
    assert is_valid_name("a" * 54 + "#ephemeral") and not is_valid_name("a" * 55 + "#ephemeral")


@pytest.mark.parametrize(("name", "ephemeral"), [
    ("a#ephemeral", True),
    ("channel#ephemeral", True),
    ("a", False),
    ("ephemeral", False),
    ("a#Ephemeral", False),
    ("a#ephemeral ", False),
])
def test_is_ephemeral(name: str, ephemeral: bool) -> None:
    assert is_ephemeral(name) is ephemeral


@pytest.mark.parametrize(("text", "quoted"), [
    ("", '""'),
    ("topic", '"topic"'),
    ("a b", '"a b"'),
    ('say "hi"', r'"say \"hi\""'),
    ("back\\slash", r'"back\\slash"'),
    ("'", '"\'"'),
    # Go's short escapes
    ("\a\b\f\n\r\t\v", r'"\a\b\f\n\r\t\v"'),
    # other control characters as \x
    ("\x00\x01\x1f\x7f", r'"\x00\x01\x1f\x7f"'),
    # printable characters stay as they are, whatever the script
    ("tópico", '"tópico"'),
    ("日本", '"日本"'),
    ("😀", '"😀"'),
    ("\ufffd", '"\ufffd"'),
    # characters that are not printable, as \u or \U with lowercase hex
    ("\u0085", r'"\u0085"'),
    ("\u00a0", r'"\u00a0"'),
    ("\u00ad", r'"\u00ad"'),
    ("\u200b", r'"\u200b"'),
    ("\u2028", r'"\u2028"'),
    ("\ufeff", r'"\ufeff"'),
    ("\U000e0001", r'"\U000e0001"'),
    # a byte that was not UTF-8, kept by errors="surrogateescape", is written as Go writes it
    (b"a\xffb".decode("utf-8", "surrogateescape"), r'"a\xffb"'),
    (b"\xc3".decode("utf-8", "surrogateescape"), r'"\xc3"'),
])
def test_go_quote(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted


def test_go_quote_in_nsq_error_text() -> None:
    assert f"PUB topic name {go_quote('bad topic!')} is not valid" == 'PUB topic name "bad topic!" is not valid'
