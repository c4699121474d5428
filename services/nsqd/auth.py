"""nsqd's side of AUTH without I/O: an auth server's reply (``parse_auth_reply``) and what it allows
(``AuthState.allows``). ``auth_client.AuthClient`` does the asking, as NSQ's ``internal/auth`` does:

- each address is ``host:port`` (asked at ``http://host:port/auth``) or a full URL containing ``://``, used as is;
- the servers are tried from a random one on, in turn, until one gives a valid answer; if none does, one
  ``AuthError`` names every address with its failure;
- GET sends ``?common_name=&remote_ip=&secret=&tls=`` (sorted, as Go's ``url.Values.Encode``); POST sends the same
  ``url.Values`` as JSON, so every value is a one-element list;
- a 403 whose JSON names an ``https_port`` is asked again over https on that port (NSQ's V1 HTTP client);
- the reply is decoded as Go's ``encoding/json`` fills NSQ's ``auth.State`` (keys matched case-insensitively,
  unknown keys ignored, ``null`` and missing fields left at their zero value, wrong types refused), then
  validated: permissions only ``subscribe``/``publish``, regexes that compile, ``ttl > 0``.

Regexes are compiled with Python's ``re``, not Go's RE2: the common syntax is the same, but a pattern valid in one
may be refused by the other. Matching is unanchored, as Go's ``MatchString``: topic regex ``foo`` allows
``xfoox``. Error messages name the auth server's address, never the request URL, so a secret sent in a GET query
does not end up in nsqd's log.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from shared.names import go_quote

PERMISSIONS = frozenset({"subscribe", "publish"})
METHODS = ("get", "post")
# the media type of NSQ's V1 HTTP answers, which NSQ's HTTP client asks for
ACCEPT_V1 = "application/vnd.nsq; version=1.0"
_INT64 = range(-(1 << 63), 1 << 63)


class AuthError(Exception):
    """No auth server could be asked, or none answered something valid: nsqd answers ``E_AUTH_FAILED``."""


@dataclass(frozen=True)
class Authorization:
    """One entry of the reply's ``authorizations``: what may be done on the topics and channels it matches."""

    topic: re.Pattern[str]
    channels: tuple[re.Pattern[str], ...]
    permissions: frozenset[str]

    def allows(self, topic: str, channel: str, permission: str) -> bool:
        """NSQ's ``Authorization.IsAllowed``: the permission is granted, the topic regex matches and so does one
        of the channel regexes. Publishes are checked with channel ``""``, so they need a channel regex that
        matches the empty string (``.*``)."""
        if permission not in self.permissions or self.topic.search(topic) is None:
            return False
        return any(pattern.search(channel) is not None for pattern in self.channels)


@dataclass
class AuthState:
    """What one secret may do, until ``expires_at`` (the reply's time plus its ``ttl``, in ``time.time()``
    seconds unless the caller chose another clock)."""

    identity: str
    identity_url: str
    authorizations: tuple[Authorization, ...]
    expires_at: float

    def is_expired(self, now: float) -> bool:
        return self.expires_at < now

    def allows(self, topic: str, channel: str, permission: str) -> bool:
        """A command is allowed when any authorization allows it."""
        return any(authorization.allows(topic, channel, permission) for authorization in self.authorizations)


def parse_auth_reply(body: bytes | str, now: float) -> AuthState:
    """The state an auth server's 200 reply grants from ``now`` on; AuthError when NSQ would refuse the reply."""
    document = _decode(body)
    state = _fields(document, "auth.State", ("ttl", "authorizations", "identity", "identity_url"))
    ttl = _int(state.get("ttl", 0), "auth.State.ttl")
    items = _list(state.get("authorizations"), "auth.State.authorizations", "[]auth.Authorization")
    authorizations = tuple(_authorization(item, f"auth.State.authorizations[{index}]")
                           for index, item in enumerate(items))
    # NSQ checks the authorizations before the TTL, so a reply wrong in both reports the authorization
    if ttl <= 0:
        raise AuthError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(identity=_str(state.get("identity", ""), "auth.State.identity"),
                     identity_url=_str(state.get("identity_url", ""), "auth.State.identity_url"),
                     authorizations=authorizations, expires_at=now + ttl)


def auth_response(state: AuthState) -> bytes:
    """The JSON nsqd answers a successful AUTH with; ``permission_count`` is the number of authorizations."""
    return go_json({"identity": state.identity, "identity_url": state.identity_url,
                     "permission_count": len(state.authorizations)})


def _authorization(item: Any, where: str) -> Authorization:
    fields = _fields(item, where, ("topic", "channels", "permissions"))
    topic = _str(fields.get("topic", ""), f"{where}.topic")
    channels = [_str(channel, f"{where}.channels") for channel in _list(fields.get("channels"), f"{where}.channels")]
    permissions = [_str(permission, f"{where}.permissions")
                   for permission in _list(fields.get("permissions"), f"{where}.permissions")]
    # NSQ's order: every permission, then the topic regex, then each channel regex
    for permission in permissions:
        if permission not in PERMISSIONS:
            raise AuthError(f"unknown permission {permission}")
    return Authorization(topic=_compile(topic, "topic"),
                         channels=tuple(_compile(channel, "channel") for channel in channels),
                         permissions=frozenset(permissions))


def _compile(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as error:
        raise AuthError(f"unable to compile {what} {go_quote(pattern)} {error}") from error


# -- Go's encoding/json, as far as NSQ's auth.State needs it -------------------------------------------------------

class _Object(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in order: Go applies duplicate keys in turn, and ``null`` leaves the
    value an earlier key set, which a dict would lose."""


def _decode(body: bytes | str) -> Any:
    # Go reads invalid UTF-8 inside strings as U+FFFD, and has no NaN or Infinity
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    try:
        return json.loads(text, object_pairs_hook=_Object, parse_constant=_refuse_constant)
    except ValueError as error:
        raise AuthError(f"invalid JSON reply: {error}") from error


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def _fields(value: Any, where: str, names: tuple[str, ...]) -> dict[str, Any]:
    """A JSON object's fields as Go fills a struct: each key is matched case-insensitively (Go's fold, with the
    length kept so ``ß`` is not ``ss``), the last one wins, ``null`` changes nothing, other keys are ignored."""
    if value is None:
        return {}
    if not isinstance(value, _Object):
        raise AuthError(f"json: cannot unmarshal {_kind(value)} into Go value of type {where}")
    fields: dict[str, Any] = {}
    for key, item in value:
        name = key.casefold()
        if name in names and len(key) == len(name) and item is not None:
            fields[name] = item
    return fields


def _list(value: Any, where: str, go_type: str = "[]string") -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or isinstance(value, _Object):
        raise AuthError(f"json: cannot unmarshal {_kind(value)} into Go struct field {where} of type {go_type}")
    return value


def _str(value: Any, where: str) -> str:
    if value is None:  # a null list element is the zero string
        return ""
    if not isinstance(value, str):
        raise AuthError(f"json: cannot unmarshal {_kind(value)} into Go struct field {where} of type string")
    return value


def _int(value: Any, where: str) -> int:
    # a float (3600.0, 1e3) is refused as Go refuses it for an int field
    if isinstance(value, bool) or not isinstance(value, int) or value not in _INT64:
        raise AuthError(f"json: cannot unmarshal {_kind(value)} into Go struct field {where} of type int")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, _Object):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return f"number {value}"


def go_json(value: Any) -> bytes:
    """Compact JSON as Go's ``json.Marshal`` writes it: UTF-8 as is; ``<``, ``>``, ``&``, U+2028, U+2029 and each
    byte that was not UTF-8 (a lone surrogate here, from surrogateescape) escaped, the last as ``\\ufffd``."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.translate(_GO_ESCAPES).encode()


_GO_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028",
               0x2029: "\\u2029", **{code: "\\ufffd" for code in range(0xD800, 0xE000)}}
