"""IDENTIFY: each field's bounds with NSQ's error texts, the defaults, and the negotiated JSON reply."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nsqclient.version import VERSION
from services.nsqd import topology
from services.nsqd.identify import Identity, negotiate, response
from services.nsqd.options import Options
from shared.protocol.errors import FatalClientError


def identify(opts: Options | None = None, **fields: Any) -> Identity:
    return negotiate(json.dumps(fields).encode(), opts or Options())


def rejected(body: bytes, opts: Options | None = None) -> tuple[str, str]:
    with pytest.raises(FatalClientError) as info:
        negotiate(body, opts or Options())
    return info.value.code, info.value.description


def invalid(**fields: Any) -> tuple[str, str]:
    return rejected(json.dumps(fields).encode())


def test_defaults() -> None:
    identity = identify()
    assert identity == Identity(
        client_id="", hostname="", user_agent="", feature_negotiation=False,
        heartbeat_interval=30.0,  # NSQ's ClientTimeout / 2
        output_buffer_size=16 * 1024, output_buffer_timeout=0.25,
        sample_rate=0, msg_timeout=60.0,
        deflate=False, deflate_level=6, snappy=False, tls_v1=False,
    )


def test_zero_means_default_for_every_numeric_field() -> None:
    assert identify(heartbeat_interval=0, output_buffer_size=0, output_buffer_timeout=0, sample_rate=0,
                    msg_timeout=0) == identify()


def test_client_fields() -> None:
    identity = identify(client_id="consumer-1", hostname="host.example", user_agent="go-nsq/1.1.0",
                        feature_negotiation=True)
    assert (identity.client_id, identity.hostname, identity.user_agent) == \
        ("consumer-1", "host.example", "go-nsq/1.1.0")
    assert identity.feature_negotiation is True


def test_unknown_fields_are_ignored() -> None:
    assert identify(long_id="x", something_new=[1, 2]) == identify()


def test_where_the_client_is_is_kept_and_how_near_it_counts_only_with_the_experiment() -> None:
    identity = identify(topology_zone="z", topology_region="r")
    assert (identity.topology_zone, identity.topology_region, identity.locality) == ("z", "r", topology.ELSEWHERE)
    aware = Options(enable_experiment=[topology.EXPERIMENT], topology_zone="z", topology_region="r")
    for zone, region, locality in (("z", "r", topology.ZONE), ("y", "r", topology.REGION), ("y", "q", 0)):
        body = json.dumps({"topology_zone": zone, "topology_region": region}).encode()
        assert negotiate(body, aware).locality == locality


def test_defaults_follow_options() -> None:
    opts = Options(msg_timeout=5.0, output_buffer_timeout=0.1)
    identity = identify(opts)
    assert (identity.msg_timeout, identity.output_buffer_timeout) == (5.0, 0.1)


# -- heartbeat_interval: -1 disables, 0 keeps 30 s, else 1000 ms to --max-heartbeat-interval -----------------

@pytest.mark.parametrize(("requested", "seconds"), [(-1, 0.0), (0, 30.0), (1000, 1.0), (5000, 5.0), (60000, 60.0)])
def test_heartbeat_interval(requested: int, seconds: float) -> None:
    assert identify(heartbeat_interval=requested).heartbeat_interval == seconds


@pytest.mark.parametrize("requested", [500, 999, 60001, -2, 1, -1000])
def test_heartbeat_interval_out_of_range(requested: int) -> None:
    assert invalid(heartbeat_interval=requested) == \
        ("E_BAD_BODY", f"IDENTIFY heartbeat interval ({requested}) is invalid")


def test_heartbeat_interval_bound_is_the_option() -> None:
    opts = Options(max_heartbeat_interval=10.0)
    assert identify(opts, heartbeat_interval=10000).heartbeat_interval == 10.0
    with pytest.raises(FatalClientError, match=r"IDENTIFY heartbeat interval \(10001\) is invalid"):
        identify(opts, heartbeat_interval=10001)


# -- output_buffer_size: -1 disables buffering, 0 keeps 16 KiB, else 64 to --max-output-buffer-size ----------

@pytest.mark.parametrize(("requested", "size"), [(0, 16384), (64, 64), (1000, 1000), (65536, 65536)])
def test_output_buffer_size(requested: int, size: int) -> None:
    identity = identify(output_buffer_size=requested)
    assert identity.output_buffer_size == size
    assert identity.output_buffer_timeout == 0.25


def test_output_buffer_size_minus_one_disables_buffering() -> None:
    identity = identify(output_buffer_size=-1)
    assert (identity.output_buffer_size, identity.output_buffer_timeout) == (1, 0.0)


@pytest.mark.parametrize("requested", [1, 63, 65537, -2])
def test_output_buffer_size_out_of_range(requested: int) -> None:
    assert invalid(output_buffer_size=requested) == \
        ("E_BAD_BODY", f"IDENTIFY output buffer size ({requested}) is invalid")


def test_output_buffer_size_bound_is_the_option() -> None:
    opts = Options(max_output_buffer_size=100)
    assert identify(opts, output_buffer_size=100).output_buffer_size == 100
    with pytest.raises(FatalClientError, match=r"IDENTIFY output buffer size \(101\) is invalid"):
        identify(opts, output_buffer_size=101)


# -- output_buffer_timeout: -1 disables, 0 keeps the default, else 25 ms to 30 s ----------------------------

@pytest.mark.parametrize(("requested", "seconds"), [(-1, 0.0), (0, 0.25), (25, 0.025), (100, 0.1), (30000, 30.0)])
def test_output_buffer_timeout(requested: int, seconds: float) -> None:
    assert identify(output_buffer_timeout=requested).output_buffer_timeout == seconds


@pytest.mark.parametrize("requested", [1, 24, 30001, -2])
def test_output_buffer_timeout_out_of_range(requested: int) -> None:
    assert invalid(output_buffer_timeout=requested) == \
        ("E_BAD_BODY", f"IDENTIFY output buffer timeout ({requested}) is invalid")


def test_output_buffer_timeout_bounds_are_the_options() -> None:
    opts = Options(min_output_buffer_timeout=0.01, max_output_buffer_timeout=1.0)
    assert identify(opts, output_buffer_timeout=10).output_buffer_timeout == 0.01
    assert identify(opts, output_buffer_timeout=1000).output_buffer_timeout == 1.0
    for requested in (9, 1001):
        with pytest.raises(FatalClientError, match=rf"IDENTIFY output buffer timeout \({requested}\) is invalid"):
            identify(opts, output_buffer_timeout=requested)


def test_output_buffer_size_and_timeout_together() -> None:
    identity = identify(output_buffer_size=128, output_buffer_timeout=50)
    assert (identity.output_buffer_size, identity.output_buffer_timeout) == (128, 0.05)
    identity = identify(output_buffer_size=-1, output_buffer_timeout=-1)
    assert (identity.output_buffer_size, identity.output_buffer_timeout) == (1, 0.0)


def test_output_buffer_size_minus_one_wins_over_a_requested_timeout() -> None:
    identity = identify(output_buffer_size=-1, output_buffer_timeout=100)
    assert (identity.output_buffer_size, identity.output_buffer_timeout) == (1, 0.0)


def test_output_buffer_timeout_is_checked_before_the_size() -> None:
    assert invalid(output_buffer_size=1, output_buffer_timeout=1) == \
        ("E_BAD_BODY", "IDENTIFY output buffer timeout (1) is invalid")


# -- sample_rate 0..99, msg_timeout 0 or 1000 ms to --max-msg-timeout ----------------------------------------

@pytest.mark.parametrize("rate", [0, 1, 50, 99])
def test_sample_rate(rate: int) -> None:
    assert identify(sample_rate=rate).sample_rate == rate


@pytest.mark.parametrize("rate", [-1, 100, 1000])
def test_sample_rate_out_of_range(rate: int) -> None:
    assert invalid(sample_rate=rate) == ("E_BAD_BODY", f"IDENTIFY sample rate ({rate}) is invalid")


@pytest.mark.parametrize(("requested", "seconds"), [(0, 60.0), (1000, 1.0), (30000, 30.0), (900000, 900.0)])
def test_msg_timeout(requested: int, seconds: float) -> None:
    assert identify(msg_timeout=requested).msg_timeout == seconds


@pytest.mark.parametrize("requested", [1, 999, 900001, -1])
def test_msg_timeout_out_of_range(requested: int) -> None:
    assert invalid(msg_timeout=requested) == ("E_BAD_BODY", f"IDENTIFY msg timeout ({requested}) is invalid")


def test_msg_timeout_bound_is_the_option() -> None:
    opts = Options(max_msg_timeout=10.0)
    assert identify(opts, msg_timeout=10000).msg_timeout == 10.0
    with pytest.raises(FatalClientError, match=r"IDENTIFY msg timeout \(10001\) is invalid"):
        identify(opts, msg_timeout=10001)


def test_fields_are_checked_in_nsqs_order() -> None:
    # heartbeat, then output buffer, then sample rate, then msg timeout: the first bad one is reported
    bad = {"heartbeat_interval": 1, "output_buffer_size": 1, "sample_rate": 100, "msg_timeout": 1}
    assert invalid(**bad) == ("E_BAD_BODY", "IDENTIFY heartbeat interval (1) is invalid")
    del bad["heartbeat_interval"]
    assert invalid(**bad) == ("E_BAD_BODY", "IDENTIFY output buffer size (1) is invalid")
    del bad["output_buffer_size"]
    assert invalid(**bad) == ("E_BAD_BODY", "IDENTIFY sample rate (100) is invalid")
    del bad["sample_rate"]
    assert invalid(**bad) == ("E_BAD_BODY", "IDENTIFY msg timeout (1) is invalid")


# -- compression and TLS -------------------------------------------------------------------------------------

def test_deflate_and_snappy_together_fail() -> None:
    assert invalid(feature_negotiation=True, deflate=True, snappy=True) == \
        ("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")


@pytest.mark.parametrize("opts", [Options(deflate=False), Options(snappy=False)])
def test_deflate_and_snappy_together_are_fine_when_the_server_disables_one(opts: Options) -> None:
    identity = identify(opts, feature_negotiation=True, deflate=True, snappy=True)
    assert identity.deflate is opts.deflate and identity.snappy is opts.snappy


def test_deflate_and_snappy_without_feature_negotiation_are_ignored() -> None:
    identity = identify(deflate=True, snappy=True)
    assert identity.feature_negotiation is False


def test_compression_is_offered_and_tls_only_with_a_certificate() -> None:
    identity = identify(feature_negotiation=True, tls_v1=True, deflate=True)
    assert (identity.tls_v1, identity.deflate, identity.snappy) == (False, True, False)
    identity = negotiate(json.dumps({"feature_negotiation": True, "tls_v1": True}).encode(), Options(),
                         tls_available=True)
    assert identity.tls_v1 is True
    identity = identify(feature_negotiation=True, snappy=True)
    assert identity.snappy is True
    identity = identify(Options(snappy=False), feature_negotiation=True, snappy=True)
    assert identity.snappy is False


@pytest.mark.parametrize(("fields", "opts", "level"), [
    ({}, Options(), 6),
    ({"deflate": True}, Options(), 6),
    ({"deflate": True, "deflate_level": 3}, Options(), 3),
    ({"deflate": True, "deflate_level": 0}, Options(), 6),
    ({"deflate": True, "deflate_level": -4}, Options(), 6),
    ({"deflate": True, "deflate_level": 9}, Options(), 6),  # clamped to --max-deflate-level
    ({"deflate": True, "deflate_level": 9}, Options(max_deflate_level=9), 9),
    ({"deflate": True, "deflate_level": 8}, Options(max_deflate_level=9), 8),
    ({"deflate_level": 3}, Options(), 6),  # a level without deflate is not used
    ({"deflate": True, "deflate_level": 3}, Options(deflate=False), 6),
    ({}, Options(max_deflate_level=2), 2),
])
def test_deflate_level(fields: dict[str, Any], opts: Options, level: int) -> None:
    assert identify(opts, feature_negotiation=True, **fields).deflate_level == level


# -- bodies that are not an IDENTIFY ------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    b"", b"not json", b"{", b"[1, 2]", b'"string"', b"42", b"\xff\xfe", b'{"heartbeat_interval": "1000"}',
    b'{"heartbeat_interval": true}', b'{"msg_timeout": [1]}', b'{"client_id": 5}', b'{"hostname": {}}',
    b'{"user_agent": false}', b'{"deflate_level": "9"}', b'{"sample_rate": {"a": 1}}',
])
def test_undecodable_body(body: bytes) -> None:
    assert rejected(body) == ("E_BAD_BODY", "IDENTIFY failed to decode JSON body")


def test_null_numbers_are_defaults() -> None:
    assert negotiate(b'{"heartbeat_interval": null, "msg_timeout": null}', Options()) == identify()


def test_fractional_numbers_do_not_decode() -> None:
    assert rejected(b'{"heartbeat_interval": 1500.5}') == ("E_BAD_BODY", "IDENTIFY failed to decode JSON body")


def test_absent_client_id_and_hostname_are_empty_as_in_nsq() -> None:
    identity = identify()
    assert (identity.client_id, identity.hostname) == ("", "")


# -- the negotiated reply ------------------------------------------------------------------------------------

def reply(identity: Identity, opts: Options | None = None, auth_required: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response(identity, opts or Options(), auth_required))
    return data


def test_response_fields_and_values() -> None:
    data = reply(identify(feature_negotiation=True))
    assert data == {
        "max_rdy_count": 2500,
        "version": VERSION,
        "max_msg_timeout": 900000,
        "msg_timeout": 60000,
        "tls_v1": False,
        "deflate": False,
        "deflate_level": 6,
        "max_deflate_level": 6,
        "snappy": False,
        "sample_rate": 0,
        "auth_required": False,
        "output_buffer_size": 16384,
        "output_buffer_timeout": 250,
        "topology_region": "",
        "topology_zone": "",
    }
    assert list(data) == ["max_rdy_count", "version", "max_msg_timeout", "msg_timeout", "tls_v1", "deflate",
                          "deflate_level", "max_deflate_level", "snappy", "sample_rate", "auth_required",
                          "output_buffer_size", "output_buffer_timeout", "topology_region", "topology_zone"]
    assert VERSION == "1.3.0"


def test_response_reflects_the_negotiation_in_milliseconds() -> None:
    identity = identify(feature_negotiation=True, msg_timeout=30000, output_buffer_size=4096,
                        output_buffer_timeout=100, sample_rate=10)
    data = reply(identity)
    assert (data["msg_timeout"], data["output_buffer_size"], data["output_buffer_timeout"], data["sample_rate"]) == \
        (30000, 4096, 100, 10)
    assert reply(identify(feature_negotiation=True, output_buffer_size=-1))["output_buffer_timeout"] == 0
    assert all(type(data[key]) is int for key in ("max_msg_timeout", "msg_timeout", "output_buffer_timeout"))


def test_response_reflects_options() -> None:
    opts = Options(max_rdy_count=100, max_msg_timeout=120.0, max_deflate_level=9, topology_region="eu",
                   topology_zone="eu-1")
    data = reply(identify(opts, feature_negotiation=True), opts, auth_required=True)
    assert (data["max_rdy_count"], data["max_msg_timeout"], data["max_deflate_level"]) == (100, 120000, 9)
    assert (data["topology_region"], data["topology_zone"], data["auth_required"]) == ("eu", "eu-1", True)


def test_response_is_compact_json_bytes() -> None:
    body = response(identify(feature_negotiation=True), Options(), False)
    assert isinstance(body, bytes)
    assert b" " not in body


@pytest.mark.parametrize("ms", [1001, 1003])
def test_response_milliseconds_round_trip(ms: int) -> None:
    data = reply(identify(feature_negotiation=True, msg_timeout=ms, output_buffer_timeout=ms))
    assert (data["msg_timeout"], data["output_buffer_timeout"]) == (ms, ms)
