"""Protocol V2's rules, checked synchronously: bytes in, requests or NSQ's errors out, no socket."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from nsqclient.protocol.frames import MAGIC_V2
from shared.protocol.errors import BadProtocolError, FatalClientError
from shared.protocol.session_v2 import (
    Auth,
    ClientState,
    Close,
    CreateTopic,
    Finish,
    Identify,
    Limits,
    Publish,
    Ready,
    Reauthorize,
    Request,
    Requeue,
    SessionV2,
    Subscribe,
    Touch,
)

LIMITS = Limits(max_msg_size=100, max_body_size=1000, max_rdy_count=2500, max_req_timeout_ms=3_600_000,
                tls_required=False, auth_enabled=False)
ID = b"0123456789abcdef"


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def session(**limits: Any) -> SessionV2:
    return SessionV2(LIMITS._replace(**limits))


def requests(session: SessionV2, data: bytes, *, magic: bool = True) -> list[Request]:
    return list(session.receive((MAGIC_V2 if magic else b"") + data))


def error_of(session: SessionV2, data: bytes, *, magic: bool = True) -> str:
    with pytest.raises(FatalClientError) as raised:
        requests(session, data, magic=magic)
    return raised.value.frame_text.decode()


def subscribed(**limits: Any) -> SessionV2:
    s = session(**limits)
    assert requests(s, b"SUB t c\n") == [Subscribe("t", "c")]
    return s


# each input whole, then one byte at a time: the same requests come out
VALID = [
    (b"PUB t\n" + sized(b"hi"), [Publish("PUB", "t", [b"hi"], 0)]),
    (b"MPUB t\n" + sized(struct.pack(">i", 2) + sized(b"a") + sized(b"bc")), [Publish("MPUB", "t", [b"a", b"bc"], 0)]),
    (b"DPUB t 1500\n" + sized(b"x"), [Publish("DPUB", "t", [b"x"], 1500)]),
    (b"IDENTIFY\n" + sized(b"{}"), [Identify(b"{}")]),
    (b"NOP\n", []),
    (b"SUB t c\nRDY 10\nFIN " + ID + b"\nREQ " + ID + b" 10\nTOUCH " + ID + b"\nCLS\n",
     [Subscribe("t", "c"), Ready(10), Finish([ID]), Requeue(ID, 10), Touch(ID), Close()]),
]


@pytest.mark.parametrize("data, expected", VALID)
def test_valid_commands_become_requests(data: bytes, expected: list[Request]) -> None:
    assert requests(session(), data) == expected
    one_at_a_time = session()
    assert [r for i in range(len(MAGIC_V2 + data)) for r in one_at_a_time.receive((MAGIC_V2 + data)[i:i + 1])] \
        == expected


def test_bytes_that_are_not_v2_are_refused_with_the_bare_code() -> None:
    s = session()
    assert list(s.receive(b"  V")) == []
    with pytest.raises(BadProtocolError) as raised:
        list(s.receive(b"1PUB t\n"))
    assert raised.value.frame_text == b"E_BAD_PROTOCOL"


def test_consecutive_fins_come_out_as_one_request() -> None:
    ids = [b"%016d" % n for n in range(5)]
    assert requests(subscribed(), b"".join(b"FIN " + i + b"\n" for i in ids), magic=False) == [Finish(ids)]


@pytest.mark.parametrize("data, text", [
    (b"PUB\n", "E_INVALID PUB insufficient number of parameters"),
    (b"PUB bad!topic\n" + sized(b"x" * 500), 'E_BAD_TOPIC PUB topic name "bad!topic" is not valid'),
    (b"PUB t\n" + sized(b"x" * 500), "E_BAD_MESSAGE PUB message too big 500 > 100"),
    (b"MPUB bad!topic\n" + sized(struct.pack(">i", 1) + sized(b"x")), 'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!topic" is not valid'),
    (b"DPUB t x\n" + sized(b"x"), "E_INVALID DPUB could not parse timeout x"),
    (b"DPUB t 3600001\n" + sized(b"x" * 500), "E_INVALID DPUB timeout 3600001 out of range 0-3600000"),
    (b"RDY 1\n", "E_INVALID cannot RDY in current state"),
    (b"FIN " + ID + b"\n", "E_INVALID cannot FIN in current state"),
    (b"CLS\n", "E_INVALID cannot CLS in current state"),
    (b"SUB t\n", "E_INVALID SUB insufficient number of parameters"),
    (b"SUB t bad!channel\n", 'E_BAD_CHANNEL SUB channel name "bad!channel" is not valid'),
    (b"AUTH\n" + sized(b"secret"), "E_AUTH_DISABLED AUTH disabled"),
    (b"AUTH x\n", "E_INVALID AUTH invalid number of parameters"),
    (b"WHAT\n", "E_INVALID invalid command WHAT"),
])
def test_nsq_errors_in_nsq_order(data: bytes, text: str) -> None:
    assert error_of(session(), data) == text


@pytest.mark.parametrize("data, text", [
    (b"RDY x\n", "E_INVALID RDY could not parse count x"),
    (b"RDY 2501\n", "E_INVALID RDY count 2501 out of range 0-2500"),
    (b"FIN short\n", "E_INVALID invalid message ID"),
    (b"REQ " + ID + b"\n", "E_INVALID REQ insufficient number of params"),
    (b"REQ " + ID + b" -1\n", "E_INVALID REQ could not parse timeout -1"),
    (b"SUB t c\n", "E_INVALID cannot SUB in current state"),
    (b"IDENTIFY\n" + sized(b"{}"), "E_INVALID cannot IDENTIFY in current state"),
])
def test_subscribed_errors(data: bytes, text: str) -> None:
    assert error_of(subscribed(), data, magic=False) == text


def test_a_long_requeue_is_cut_to_the_maximum() -> None:
    assert requests(subscribed(), b"REQ " + ID + b" 99999999\n", magic=False) == [Requeue(ID, 3_600_000)]


def test_after_cls_rdy_is_ignored_and_fin_still_taken() -> None:
    s = subscribed()
    assert requests(s, b"CLS\nRDY 5\nFIN " + ID + b"\n", magic=False) == [Close(), Finish([ID])]
    assert s.state == ClientState.CLOSING
    assert error_of(s, b"CLS\n", magic=False) == "E_INVALID cannot CLS in current state"


def test_sub_needs_heartbeats() -> None:
    s = session()
    s.identified(heartbeat_interval=0)
    assert error_of(s, b"SUB t c\n") == "E_INVALID cannot SUB with heartbeats disabled"


def test_an_mpub_with_a_bad_body_creates_its_topic_first() -> None:
    s = session()
    received = s.receive(MAGIC_V2 + b"MPUB t\n" + sized(struct.pack(">i", 1) + sized(b"x" * 500)))
    assert next(received) == CreateTopic("t")
    with pytest.raises(FatalClientError, match="E_BAD_MESSAGE MPUB message too big 500 > 100"):
        next(received)


def test_tls_required_allows_identify_only_until_upgraded() -> None:
    s = session(tls_required=True)
    assert requests(s, b"IDENTIFY\n" + sized(b"{}")) == [Identify(b"{}")]
    assert error_of(s, b"PUB t\n" + sized(b"x"), magic=False) == "E_INVALID cannot PUB in current state (TLS required)"
    upgraded = session(tls_required=True)
    upgraded.upgraded_to_tls()
    assert requests(upgraded, b"PUB t\n" + sized(b"x")) == [Publish("PUB", "t", [b"x"], 0)]


class Allowed:
    def __init__(self, topic: str, expired: bool = False) -> None:
        self.topic, self.expired = topic, expired

    def allows(self, topic: str, channel: str, permission: str) -> bool:
        return topic == self.topic

    def is_expired(self, now: float) -> bool:
        return self.expired


def test_auth_is_required_then_checked_per_topic() -> None:
    s = session(auth_enabled=True)
    assert error_of(s, b"PUB t\n" + sized(b"x")) == "E_AUTH_FIRST AUTH required before PUB"
    s = session(auth_enabled=True)
    assert requests(s, b"AUTH\n" + sized(b"secret")) == [Auth(b"secret")]
    s.authenticated(Allowed("t"))
    assert requests(s, b"PUB t\n" + sized(b"x"), magic=False) == [Publish("PUB", "t", [b"x"], 0)]
    assert error_of(s, b"SUB other c\n", magic=False) == 'E_UNAUTHORIZED AUTH failed for SUB on "other" "c"'
    assert error_of(s, b"AUTH\n" + sized(b"again"), magic=False) == "E_INVALID AUTH already set"


def test_expired_authorizations_are_renewed_before_the_command_is_checked() -> None:
    s = session(auth_enabled=True)
    s.authenticated(Allowed("t", expired=True))
    received = s.receive(MAGIC_V2 + b"PUB other\n" + sized(b"x"))
    assert next(received) == Reauthorize()
    s.authenticated(Allowed("other"))  # what the auth server says now
    assert next(received) == Publish("PUB", "other", [b"x"], 0)


# -- waiting: a request the connection cannot answer at once holds back everything after it ---------------------

def pieces(data: bytes, bytewise: bool) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))] if bytewise else [data]


def taken(s: SessionV2, chunks: list[bytes], waits: type | None = None) -> list[Request]:
    """The requests a connection takes from ``chunks`` received in turn, telling the session to wait at the first
    request of type ``waits``."""
    got: list[Request] = []
    for chunk in chunks:
        for request in s.receive(chunk):
            got.append(request)
            if request.__class__ is waits and not s.waiting:
                s.wait()
                break
    return got


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
def test_nothing_after_an_auth_is_checked_until_the_auth_server_answered(bytewise: bool) -> None:
    s = session(auth_enabled=True)
    data = MAGIC_V2 + b"AUTH\n" + sized(b"secret") + b"PUB t\n" + sized(b"x") + b"NOP\nPUB t\n" + sized(b"y")
    assert taken(s, pieces(data, bytewise), Auth) == [Auth(b"secret")]
    assert s.waiting
    assert list(s.receive(b"PUB t\n" + sized(b"z"))) == []  # kept, in order, while it waits
    s.authenticated(Allowed("t"))
    assert list(s.resume()) == [Publish("PUB", "t", [body], 0) for body in (b"x", b"y", b"z")]
    assert not s.waiting


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
def test_commands_after_a_waiting_publish_come_out_once_it_is_answered(bytewise: bool) -> None:
    s = session()
    data = MAGIC_V2 + b"PUB t\n" + sized(b"x") + b"SUB t c\nRDY 5\n"
    assert taken(s, pieces(data, bytewise), Publish) == [Publish("PUB", "t", [b"x"], 0)]
    assert list(s.resume()) == [Subscribe("t", "c"), Ready(5)]


def test_expired_authorizations_hold_back_their_command_while_they_are_renewed() -> None:
    s = session(auth_enabled=True)
    s.authenticated(Allowed("t", expired=True))
    assert taken(s, [MAGIC_V2 + b"PUB t\n" + sized(b"x") + b"PUB t\n" + sized(b"y")], Reauthorize) == [
        Reauthorize()]
    s.authenticated(Allowed("t"))
    assert list(s.resume()) == [Publish("PUB", "t", [b"x"], 0), Publish("PUB", "t", [b"y"], 0)]


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
def test_what_follows_an_identify_that_upgraded_nothing_is_read_as_it_is(bytewise: bool) -> None:
    s = session()
    data = MAGIC_V2 + b"IDENTIFY\n" + sized(b"{}") + b"PUB t\n" + sized(b"x")
    assert taken(s, pieces(data, bytewise)) == [Identify(b"{}"), Publish("PUB", "t", [b"x"], 0)]
    assert s.take_held() == b""


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
def test_what_follows_an_identify_is_handed_back_unread_for_an_upgrade(bytewise: bool) -> None:
    s = session()
    compressed = b"\xff\x06\x00\x00sNaPpY" + b"PUB t\n"  # whatever the client sends once it compresses
    data = MAGIC_V2 + b"IDENTIFY\n" + sized(b'{"snappy":true}') + compressed
    assert taken(s, pieces(data, bytewise), Identify) == [Identify(b'{"snappy":true}')]
    assert s.take_held() == compressed
    s.resume()
    assert requests(s, b"PUB t\n" + sized(b"x"), magic=False) == [Publish("PUB", "t", [b"x"], 0)]
