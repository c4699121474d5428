"""etcd's JSON gateway requests and answers, as etcd 3.4 writes them."""

from __future__ import annotations

import base64
import json

import pytest

from shared.etcd import messages
from shared.etcd.messages import EtcdError, Event, KeyValue


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_prefix_range_ends_after_the_last_key_with_that_prefix() -> None:
    request = messages.range_request("/nsq/nodes/")
    assert request == {"key": b64(b"/nsq/nodes/")}
    assert messages.range_request("/nsq/nodes/", prefix=True)["range_end"] == b64(b"/nsq/nodes0")
    assert messages.range_request("a\xff", prefix=True)["range_end"] == b64(b"a\xc3\xc0")  # ÿ is c3 bf in utf-8
    assert messages.range_request("", prefix=True)["range_end"] == b64(b"\0")


def test_puts_carry_the_lease_as_a_string_and_only_when_there_is_one() -> None:
    assert messages.put_request("k", b"v") == {"key": b64(b"k"), "value": b64(b"v")}
    assert messages.put_request("k", b"v", lease=7587868435938519813)["lease"] == "7587868435938519813"


def test_a_transaction_compares_each_target_by_its_own_field() -> None:
    request = messages.txn_request(
        [messages.version_is("a", 0), messages.mod_revision_is("b", 12), messages.value_is("c", b"x")],
        [messages.put("a", b"1")], [messages.get("a")])
    assert request["compare"] == [
        {"key": b64(b"a"), "target": "VERSION", "result": "EQUAL", "version": "0"},
        {"key": b64(b"b"), "target": "MOD", "result": "EQUAL", "mod_revision": "12"},
        {"key": b64(b"c"), "target": "VALUE", "result": "EQUAL", "value": b64(b"x")}]
    assert request["success"] == [{"request_put": {"key": b64(b"a"), "value": b64(b"1")}}]
    assert request["failure"] == [{"request_range": {"key": b64(b"a")}}]


def test_range_answers_with_int64_strings_and_zero_fields_left_out() -> None:
    answer = {"header": {"cluster_id": "1", "member_id": "2", "revision": "9", "raft_term": "2"},
              "kvs": [{"key": b64(b"/nsq/nodes/a"), "create_revision": "2", "mod_revision": "4", "version": "3",
                       "value": b64(b"{}"), "lease": "7587868435938519813"},
                      {"key": b64(b"/nsq/nodes/b"), "create_revision": "5", "mod_revision": "5", "version": "1"}],
              "count": "2"}
    assert messages.revision(answer) == 9
    assert messages.key_values(answer) == [
        KeyValue("/nsq/nodes/a", b"{}", 2, 4, 3, 7587868435938519813), KeyValue("/nsq/nodes/b", b"", 5, 5, 1, 0)]
    assert messages.key_values({"header": {"revision": "9"}}) == []


def test_errors_carry_etcds_words_and_code() -> None:
    with pytest.raises(EtcdError, match="requested lease not found") as refused:
        messages.check({"error": "etcdserver: requested lease not found", "code": 5,
                        "message": "etcdserver: requested lease not found"})
    assert refused.value.code == messages.NOT_FOUND
    with pytest.raises(EtcdError, match="lease not found") as in_a_stream:  # a stream's error frame
        messages.check({"error": {"grpc_code": 5, "http_code": 404, "message": "etcdserver: requested lease not found",
                                  "http_status": "Not Found"}})
    assert in_a_stream.value.code == messages.NOT_FOUND
    with pytest.raises(EtcdError, match="unexpected answer") as unexpected:
        messages.check([])  # type: ignore[arg-type]
    assert unexpected.value.code is None


def test_leases_and_keep_alives() -> None:
    assert messages.lease_id({"header": {}, "ID": "4111120284163039749", "TTL": "5"}) == 4111120284163039749
    assert messages.keep_alive_ttl({"result": {"header": {}, "ID": "41", "TTL": "4"}}) == 4
    assert messages.keep_alive_ttl({"result": {"header": {}, "ID": "41"}}) == 0  # it had ended


def test_transaction_outcomes() -> None:
    assert messages.txn_outcome({"header": {"revision": "3"}, "succeeded": True,
                                 "responses": [{"response_put": {"header": {"revision": "3"}}}]}) == \
        (True, [{"response_put": {"header": {"revision": "3"}}}])
    assert messages.txn_outcome({"header": {"revision": "3"}}) == (False, [])


def test_watch_frames() -> None:
    created = json.dumps({"result": {"header": {"revision": "3"}, "created": True}}).encode()
    assert messages.watch_frame(created) == (3, [], False)
    changes = json.dumps({"result": {"header": {"revision": "5"}, "events": [
        {"kv": {"key": b64(b"k"), "create_revision": "4", "mod_revision": "4", "version": "1", "value": b64(b"v")}},
        {"type": "DELETE", "kv": {"key": b64(b"j"), "mod_revision": "5"}}]}}).encode()
    assert messages.watch_frame(changes) == (5, [Event(False, KeyValue("k", b"v", 4, 4, 1, 0)),
                                                 Event(True, KeyValue("j", b"", 0, 5, 0, 0))], False)
    compacted = json.dumps({"result": {"header": {"revision": "9"}, "canceled": True,
                                       "compact_revision": "7"}}).encode()
    assert messages.watch_frame(compacted)[2]
    with pytest.raises(EtcdError, match="broken"):
        messages.watch_frame(json.dumps({"error": {"grpc_code": 14, "message": "broken"}}).encode())
