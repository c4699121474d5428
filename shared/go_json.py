"""JSON as Go's ``encoding/json`` reads it into NSQ's structs and writes it, so that a body NSQ refuses is refused
here too, with Go's words:

- ``decode``: invalid UTF-8 inside strings reads as U+FFFD, ``NaN`` and ``Infinity`` are not JSON, an object keeps
  its key/value pairs in order (``GoObject``);
- ``struct_fields``: an object's fields as Go fills a struct: each key matched case-insensitively, the last one
  wins, ``null`` leaves the field as it was, unknown keys ignored; ``as_str``, ``as_int``, ``as_bool`` and
  ``as_list`` then type one value as its field's Go type, or fail as ``json.Unmarshal`` does;
- ``unmarshal``: both at once for a flat struct of strings, integers and booleans (nsqd's and lookupd's IDENTIFY);
- ``encode``: ``json.Marshal``'s compact output and escapes.

Every failure is a ``GoJSONError`` (a ValueError) carrying Go's message.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

_INT64 = range(-(1 << 63), 1 << 63)
_ZERO: dict[type, Any] = {str: "", int: 0, bool: False}


class GoJSONError(ValueError):
    """What Go's ``json.Unmarshal`` would have answered."""


class GoObject(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in order: Go applies duplicate keys in turn, and ``null`` leaves the
    value an earlier key set, which a dict would lose."""


def decode(body: bytes | str) -> Any:
    """The JSON value of ``body``, objects as ``GoObject``."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    try:
        return json.loads(text, object_pairs_hook=GoObject, parse_constant=_refuse_constant)
    except RecursionError:
        raise GoJSONError("exceeded max depth") from None
    except ValueError as error:
        raise GoJSONError(str(error)) from error


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def struct_fields(value: Any, go_type: str, names: Iterable[str]) -> dict[str, Any]:
    """The fields ``names`` (lower case) that the object ``value`` sets, as Go fills a struct of type ``go_type``:
    keys matched case-insensitively (Go's fold, with the length kept so ``ß`` is not ``ss``), the last one wins,
    ``null`` changes nothing, other keys are ignored. A ``null`` value sets nothing at all."""
    if value is None:
        return {}
    if not isinstance(value, GoObject):
        raise GoJSONError(f"json: cannot unmarshal {kind(value)} into Go value of type {go_type}")
    wanted = set(names)
    fields: dict[str, Any] = {}
    for key, item in value:
        name = key.casefold()
        if name in wanted and len(key) == len(name) and item is not None:
            fields[name] = item
    return fields


def unmarshal(body: bytes | str, go_type: str, fields: Mapping[str, type]) -> dict[str, Any]:
    """A flat struct's fields (each ``str``, ``int`` or ``bool``) from a JSON object, as ``json.Unmarshal`` fills
    them: every field present, at its zero value unless set."""
    values = struct_fields(decode(body), go_type, fields)
    checks = {str: as_str, int: as_int, bool: as_bool}
    return {name: checks[kind_](values[name], f"{go_type}.{name}") if name in values else _ZERO[kind_]
            for name, kind_ in fields.items()}


def as_list(value: Any, where: str, go_type: str = "[]string") -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or isinstance(value, GoObject):
        raise GoJSONError(f"json: cannot unmarshal {kind(value)} into Go struct field {where} of type {go_type}")
    return value


def as_str(value: Any, where: str) -> str:
    if value is None:  # a null list element is the zero string
        return ""
    if not isinstance(value, str):
        raise GoJSONError(f"json: cannot unmarshal {kind(value)} into Go struct field {where} of type string")
    return value


def as_int(value: Any, where: str) -> int:
    # a float (3600.0, 1e3) is refused as Go refuses it for an int field
    if isinstance(value, bool) or not isinstance(value, int) or value not in _INT64:
        raise GoJSONError(f"json: cannot unmarshal {kind(value)} into Go struct field {where} of type int")
    return value


def as_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise GoJSONError(f"json: cannot unmarshal {kind(value)} into Go struct field {where} of type bool")
    return value


def kind(value: Any) -> str:
    """How Go's errors name a JSON value: ``object``, ``array``, ``string``, ``bool`` or ``number 1.5``."""
    if isinstance(value, GoObject):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return f"number {value}"


def encode(value: Any) -> bytes:
    """Compact JSON as Go's ``json.Marshal`` writes it: UTF-8 as is; ``<``, ``>``, ``&``, U+2028, U+2029 and each
    byte that was not UTF-8 (a lone surrogate here, from surrogateescape) escaped, the last as ``\\ufffd``."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.translate(_GO_ESCAPES).encode()


_GO_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028",
               0x2029: "\\u2029", **{code: "\\ufffd" for code in range(0xD800, 0xE000)}}
