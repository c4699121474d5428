"""IDENTIFY: validating a client's requested settings against nsqd's bounds and building the JSON reply.

Pure functions over parsed JSON; the connection applies the result. Times in IDENTIFY are milliseconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from nsqclient.version import VERSION
from shared import go_json
from shared.protocol.errors import FatalClientError

from .client import ClientDefaults
from .options import Options
from .topology import ELSEWHERE, locality


@dataclass
class Identity:
    """What a client ends up with after IDENTIFY (seconds and bytes)."""

    client_id: str
    hostname: str
    user_agent: str
    feature_negotiation: bool
    heartbeat_interval: float  # 0 = disabled
    output_buffer_size: int
    output_buffer_timeout: float
    sample_rate: int
    msg_timeout: float
    deflate: bool
    deflate_level: int
    snappy: bool
    tls_v1: bool
    topology_zone: str = ""
    topology_region: str = ""
    locality: int = ELSEWHERE  # how near the client is (topology.py)


def _decode(body: bytes) -> dict[str, Any]:
    """The request's fields as Go's json.Unmarshal fills NSQ's ``identifyDataV2``: null leaves a field at its zero
    value, and a value of the wrong type (a fraction in an integer field included) fails the whole decode."""
    try:
        return go_json.unmarshal(body, "nsqd.identifyDataV2", _FIELDS)
    except go_json.GoJSONError:
        raise FatalClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None


_FIELDS: dict[str, type] = {
    "client_id": str, "hostname": str, "user_agent": str, "feature_negotiation": bool, "heartbeat_interval": int,
    "output_buffer_size": int, "output_buffer_timeout": int, "tls_v1": bool, "snappy": bool, "deflate": bool,
    "deflate_level": int, "sample_rate": int, "msg_timeout": int, "topology_region": str, "topology_zone": str,
}


class Settings(Protocol):
    """What a client has before this IDENTIFY: a 0 in the request keeps it (as NSQ does on a repeated IDENTIFY)."""

    heartbeat_interval: float
    output_buffer_size: int
    output_buffer_timeout: float
    msg_timeout: float


def defaults(opts: Options) -> ClientDefaults:
    return ClientDefaults(heartbeat_interval=opts.client_timeout / 2, msg_timeout=opts.msg_timeout,
                          output_buffer_size=16 * 1024, output_buffer_timeout=opts.output_buffer_timeout)


def negotiate(body: bytes, opts: Options, current: Settings | None = None, tls_available: bool = False) -> Identity:
    fields = _decode(body)
    current = current or defaults(opts)
    # checked in NSQ's order, so the first bad field is the one reported
    heartbeat_interval = _heartbeat_interval(fields["heartbeat_interval"], current.heartbeat_interval, opts)
    buffer_size, buffer_timeout = _output_buffer(fields["output_buffer_size"], fields["output_buffer_timeout"],
                                                 current, opts)
    identity = Identity(
        client_id=fields["client_id"], hostname=fields["hostname"], user_agent=fields["user_agent"],
        feature_negotiation=fields["feature_negotiation"],
        heartbeat_interval=heartbeat_interval,
        output_buffer_size=buffer_size, output_buffer_timeout=buffer_timeout,
        sample_rate=_sample_rate(fields["sample_rate"]),
        msg_timeout=_msg_timeout(fields["msg_timeout"], current.msg_timeout, opts),
        deflate=False, deflate_level=6, snappy=False, tls_v1=False,
        topology_zone=fields["topology_zone"], topology_region=fields["topology_region"],
        locality=locality(fields["topology_zone"], fields["topology_region"], opts),
    )
    if identity.feature_negotiation:
        _negotiate_transport(identity, fields, opts, tls_available)
    return identity


def _invalid(text: str) -> FatalClientError:
    return FatalClientError("E_BAD_BODY", f"IDENTIFY {text}")


def _heartbeat_interval(requested_ms: int, current: float, opts: Options) -> float:
    if requested_ms == -1:
        return 0.0
    if requested_ms == 0:
        return current
    if 1000 <= requested_ms <= opts.max_heartbeat_interval * 1000:
        return requested_ms / 1000
    raise _invalid(f"heartbeat interval ({requested_ms}) is invalid")


def _output_buffer(size: int, timeout_ms: int, current: Settings, opts: Options) -> tuple[int, float]:
    """NSQ's SetOutputBuffer: the timeout is checked first, and size -1 then disables buffering altogether."""
    buffer_size, buffer_timeout = current.output_buffer_size, current.output_buffer_timeout
    if timeout_ms == -1:
        buffer_timeout = 0.0
    elif timeout_ms != 0:
        if not opts.min_output_buffer_timeout * 1000 <= timeout_ms <= opts.max_output_buffer_timeout * 1000:
            raise _invalid(f"output buffer timeout ({timeout_ms}) is invalid")
        buffer_timeout = timeout_ms / 1000
    if size == -1:
        buffer_size, buffer_timeout = 1, 0.0  # every frame is written at once
    elif size != 0:
        if not 64 <= size <= opts.max_output_buffer_size:
            raise _invalid(f"output buffer size ({size}) is invalid")
        buffer_size = size
    return buffer_size, buffer_timeout


def _sample_rate(rate: int) -> int:
    if not 0 <= rate <= 99:
        raise _invalid(f"sample rate ({rate}) is invalid")
    return rate


def _msg_timeout(requested_ms: int, current: float, opts: Options) -> float:
    if requested_ms == 0:
        return current
    if 1000 <= requested_ms <= opts.max_msg_timeout * 1000:
        return requested_ms / 1000
    raise _invalid(f"msg timeout ({requested_ms}) is invalid")


def _negotiate_transport(identity: Identity, data: dict[str, Any], opts: Options, tls_available: bool) -> None:
    """What the client asked for and nsqd offers; the connection upgrades in this order after replying."""
    identity.tls_v1 = tls_available and data["tls_v1"]
    identity.deflate = data["deflate"] and opts.deflate
    level = data["deflate_level"]
    identity.deflate_level = min(level if identity.deflate and level > 0 else 6, opts.max_deflate_level)
    identity.snappy = data["snappy"] and opts.snappy
    if identity.deflate and identity.snappy:
        raise FatalClientError("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")


def response(identity: Identity, opts: Options, auth_required: bool) -> bytes:
    """The JSON reply sent when the client asked for feature negotiation."""
    return json.dumps({
        "max_rdy_count": opts.max_rdy_count,
        "version": VERSION,
        "max_msg_timeout": round(opts.max_msg_timeout * 1000),
        "msg_timeout": round(identity.msg_timeout * 1000),
        "tls_v1": identity.tls_v1,
        "deflate": identity.deflate,
        "deflate_level": identity.deflate_level,
        "max_deflate_level": opts.max_deflate_level,
        "snappy": identity.snappy,
        "sample_rate": identity.sample_rate,
        "auth_required": auth_required,
        "output_buffer_size": identity.output_buffer_size,
        "output_buffer_timeout": round(identity.output_buffer_timeout * 1000),
        "topology_region": opts.topology_region,
        "topology_zone": opts.topology_zone,
    }, separators=(",", ":")).encode()
