"""etcd's v3 API as JSON, the way its gRPC gateway serves it over HTTP (``POST /v3/kv/range`` and so on): the
request bodies and what the answers mean, without any I/O.

The gateway speaks protobuf's JSON mapping: keys and values are base64, 64-bit integers (revisions, lease IDs,
TTLs) are strings, and fields at their zero value are left out (a key's ``version`` of 0, an empty ``kvs``).
Keys here are text, values bytes.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]


class EtcdError(Exception):
    """etcd refused a request (its ``error`` or ``message`` text, and the gRPC status ``code`` it gave, if any), or
    answered in a shape not understood."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


NOT_FOUND = 5  # gRPC's status code, as etcd gives it for a lease that is not there


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@dataclass(frozen=True)
class Event:
    """One change a watch reports: a put (``kv`` as it is now) or a delete (``kv`` with the key only)."""

    deleted: bool
    kv: KeyValue


@dataclass(frozen=True)
class Compare:
    """One condition of a transaction: ``target`` of ``key`` (VERSION, MOD, CREATE or VALUE) compared by
    ``result`` (EQUAL, GREATER, LESS, NOT_EQUAL) with ``operand``."""

    key: str
    target: str
    result: str
    operand: int | bytes


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _range_end(prefix: str) -> str:
    """The ``range_end`` that makes a range every key starting with ``prefix``: its last byte plus one."""
    raw = bytearray(prefix.encode())
    while raw and raw[-1] == 0xFF:
        raw.pop()
    if not raw:
        return _b64(b"\0")  # every key
    raw[-1] += 1
    return _b64(bytes(raw))


# -- requests -------------------------------------------------------------------------------------------------

def range_request(key: str, *, prefix: bool = False) -> Json:
    request: Json = {"key": _b64(key)}
    if prefix:
        request["range_end"] = _range_end(key)
    return request


def put_request(key: str, value: bytes, lease: int = 0) -> Json:
    request: Json = {"key": _b64(key), "value": _b64(value)}
    if lease:
        request["lease"] = str(lease)
    return request


def delete_request(key: str, *, prefix: bool = False) -> Json:
    return range_request(key, prefix=prefix)


def version_is(key: str, version: int) -> Compare:
    """``version_is(key, 0)``: the key does not exist."""
    return Compare(key, "VERSION", "EQUAL", version)


def mod_revision_is(key: str, revision: int) -> Compare:
    """The key was last written at ``revision`` (0: it does not exist)."""
    return Compare(key, "MOD", "EQUAL", revision)


def value_is(key: str, value: bytes) -> Compare:
    return Compare(key, "VALUE", "EQUAL", value)


def txn_request(compare: list[Compare], success: list[Json], failure: list[Json] | None = None) -> Json:
    """``success`` and ``failure`` hold operations: ``put(...)``, ``delete(...)``, ``get(...)``."""
    return {"compare": [_compare(condition) for condition in compare], "success": success,
            "failure": failure or []}


def _compare(condition: Compare) -> Json:
    field = {"VERSION": "version", "MOD": "mod_revision", "CREATE": "create_revision", "VALUE": "value"}
    operand = condition.operand
    encoded = _b64(operand) if isinstance(operand, bytes) else str(operand)
    return {"key": _b64(condition.key), "target": condition.target, "result": condition.result,
            field[condition.target]: encoded}


def put(key: str, value: bytes, lease: int = 0) -> Json:
    """A put inside a transaction."""
    return {"request_put": put_request(key, value, lease)}


def delete(key: str, *, prefix: bool = False) -> Json:
    return {"request_delete_range": delete_request(key, prefix=prefix)}


def get(key: str, *, prefix: bool = False) -> Json:
    return {"request_range": range_request(key, prefix=prefix)}


def watch_request(key: str, *, prefix: bool = False, start_revision: int = 0) -> Json:
    request = range_request(key, prefix=prefix)
    if start_revision:
        request["start_revision"] = str(start_revision)
    return {"create_request": request}


# -- answers --------------------------------------------------------------------------------------------------

def check(answer: Json) -> Json:
    """The answer, or EtcdError with etcd's own words when it is an error."""
    if not isinstance(answer, dict):
        raise EtcdError(f"unexpected answer {answer!r}")
    error = answer.get("error")
    if isinstance(error, dict):  # a stream's error frame
        raise EtcdError(str(error.get("message") or error), _code(error.get("grpc_code")))
    if error is not None or ("code" in answer and "message" in answer):
        raise EtcdError(str(answer.get("message") or error), _code(answer.get("code")))
    return answer


def _code(value: object) -> int | None:
    return value if isinstance(value, int) else None


def revision(answer: Json) -> int:
    """The store's revision when the request was served."""
    return int(check(answer).get("header", {}).get("revision", 0))


def key_values(answer: Json) -> list[KeyValue]:
    """The keys of a range answer (also inside a transaction's ``response_range``)."""
    return [_key_value(kv) for kv in check(answer).get("kvs", [])]


def _key_value(kv: Json) -> KeyValue:
    return KeyValue(key=_unb64(kv["key"]).decode(), value=_unb64(kv.get("value", "")),
                    create_revision=int(kv.get("create_revision", 0)), mod_revision=int(kv.get("mod_revision", 0)),
                    version=int(kv.get("version", 0)), lease=int(kv.get("lease", 0)))


def lease_id(answer: Json) -> int:
    """The ID of a granted lease."""
    return int(check(answer)["ID"])


def keep_alive_ttl(answer: Json) -> int:
    """Seconds the lease has left after a keep-alive: 0 when it had already expired (or was revoked)."""
    result = check(answer).get("result", answer)
    return int(check(result).get("TTL", 0))


def txn_outcome(answer: Json) -> tuple[bool, list[Json]]:
    """Whether the comparisons held, and the answers of the operations that ran."""
    checked = check(answer)
    return bool(checked.get("succeeded", False)), list(checked.get("responses", []))


def watch_frame(line: bytes) -> tuple[int, list[Event], bool]:
    """One line of a watch stream: (the revision it is current to, the events, whether the watch ended)."""
    result = check(check(json.loads(line)).get("result", {}))
    events = [Event(deleted=event.get("type") == "DELETE", kv=_key_value(event["kv"]))
              for event in result.get("events", [])]
    ended = bool(result.get("canceled")) or bool(result.get("compact_revision"))
    return int(result.get("header", {}).get("revision", 0)), events, ended
