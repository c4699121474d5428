"""nsq_to_nsq's pure parts: NSQ's flags and flag errors, and the JSON filter."""

from __future__ import annotations

import json
from functools import partial

import pytest

from apps.nsq_to_nsq import JsonFilter, Options
from tests.unit.tool_flags import parsed, refused

NSQD = "--nsqd-tcp-address=127.0.0.1:4150"
DESTINATION = "--destination-nsqd-tcp-address=127.0.0.1:5150"


options = partial(parsed, Options)
flag_error = partial(refused, Options)


def test_nsq_defaults() -> None:
    opts = options("--topic=t", NSQD, DESTINATION)
    assert (opts.channel, opts.max_in_flight, opts.mode, opts.status_every) == ("nsq_to_nsq", 200, "hostpool", 250)
    assert (opts.destination_topic, opts.require_json_field, opts.whitelist_json_field) == ("", "", [])


def test_flags_as_nsq_names_them() -> None:
    opts = options("--topic=a", "-topic", "b", "--channel=c", "--lookupd-http-address=127.0.0.1:4161", DESTINATION,
                   "--destination-nsqd-tcp-address=[::1]:5150", "--destination-topic=d", "--mode=multicast",
                   "--require-json-field=kind", "--require-json-value=3", "--whitelist-json-field=x",
                   "--whitelist-json-field=y", "--producer-opt=heartbeat_interval,10s", "--max-in-flight=9")
    assert (opts.topic, opts.destination_nsqd_tcp_address) == (["a", "b"], ["127.0.0.1:5150", "[::1]:5150"])
    assert (opts.destination_topic, opts.mode, opts.max_in_flight) == ("d", "multicast", 9)
    assert (opts.require_json_field, opts.require_json_value, opts.whitelist_json_field) == ("kind", "3", ["x", "y"])


@pytest.mark.parametrize(("argv", "error"), [
    ((NSQD, DESTINATION), "--topic and --channel are required"),
    (("--topic=t", "--channel=", NSQD, DESTINATION), "--topic and --channel are required"),
    (("--topic=t", "--topic=no good", NSQD, DESTINATION), "--topic is invalid"),
    (("--topic=t", "--destination-topic=x" * 20, NSQD, DESTINATION), "--destination-topic is invalid"),
    (("--topic=t", "--channel=c!", NSQD, DESTINATION), "--channel is invalid"),
    (("--topic=t", DESTINATION), "--nsqd-tcp-address or --lookupd-http-address required"),
    (("--topic=t", NSQD, "--lookupd-http-address=h:1", DESTINATION),
     "use --nsqd-tcp-address or --lookupd-http-address not both"),
    (("--topic=t", NSQD), "--destination-nsqd-tcp-address required"),
    (("--topic=t", NSQD, "--destination-nsqd-tcp-address=5150"), "--destination-nsqd-tcp-address: "),
    (("--topic=t", NSQD, DESTINATION, "--mode=epsilon-greedy"), "--mode must be one of"),
    (("--topic=t", NSQD, DESTINATION, "--require-json-value=1"), "--require-json-value needs --require-json-field"),
    (("--topic=t", NSQD, DESTINATION, "--producer-opt=max_in_flight,3"), "invalid option max_in_flight"),
    (("--topic=t", NSQD, DESTINATION, "--consumer-opt=max_attempts,x"), "failed to coerce option max_attempts"),
])
def test_flag_errors_in_nsq_words(argv: tuple[str, ...], error: str) -> None:
    assert error in flag_error(*argv)


# -- the JSON filter ---------------------------------------------------------------------------------------


def test_without_filter_flags_every_body_passes_untouched() -> None:
    json_filter = JsonFilter("", "", [])
    assert not json_filter.active
    for body in (b"not json", b"[1]", b'{"a": 1}', b"\xff"):
        assert json_filter.apply(body) == body


@pytest.mark.parametrize(("value", "body", "passes"), [
    ("", b'{"kind": "click"}', True),
    ("", b'{"kind": null}', True),  # present is enough without a value
    ("", b'{"other": 1}', False),
    ("click", b'{"kind": "click"}', True),
    ("click", b'{"kind": "view"}', False),
    ("click", b'{"other": "click"}', False),  # missing: dropped, not requeued
    ("3", b'{"kind": 3}', True),
    ("3", b'{"kind": 3.0}', True),
    ("3", b'{"kind": "3"}', True),  # a string compares as a string
    ("3.5", b'{"kind": 3.5}', True),
    ("3", b'{"kind": 4}', False),
    ("3", b'{"kind": true}', False),
    ("1", b'{"kind": true}', False),  # a boolean is not the number 1
    ("click", b'{"kind": 3}', False),  # a value that is no number matches no number
    ("click", b'{"kind": ["click"]}', False),
])
def test_required_field_and_value(value: str, body: bytes, passes: bool) -> None:
    assert (JsonFilter("kind", value, []).apply(body) == body) is passes
    assert JsonFilter("kind", value, []).apply(body) in (body, None)


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'"text"', b"3", b"\xff\xfe", b"", b'{"kind": 1'])
def test_a_body_that_is_not_a_json_object_is_dropped_when_filtering(body: bytes) -> None:
    assert JsonFilter("kind", "", []).apply(body) is None
    assert JsonFilter("", "", ["kind"]).apply(body) is None


def test_whitelist_passes_only_those_fields_sorted_and_compact() -> None:
    json_filter = JsonFilter("", "", ["z", "a", "missing", "n"])
    body = '{"a": "caf\u00e9", "b": 2, "z": {"deep": [1, 2.5]}, "n": 2.0}'.encode()
    out = json_filter.apply(body)
    assert out == '{"a":"caf\u00e9","n":2,"z":{"deep":[1,2.5]}}'.encode()
    assert json.loads(out) == {"a": "caf\u00e9", "n": 2, "z": {"deep": [1, 2.5]}}


def test_whitelist_applies_after_the_required_field() -> None:
    json_filter = JsonFilter("kind", "click", ["id"])
    assert json_filter.apply(b'{"kind": "click", "id": 7, "secret": "x"}') == b'{"id":7}'
    assert json_filter.apply(b'{"kind": "view", "id": 8}') is None
    assert json_filter.apply(b'{"kind": "click"}') == b"{}"
