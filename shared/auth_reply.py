"""An auth server's reply, as nsqd reads it (NSQ's ``internal/auth``): ``parse_auth_reply`` decodes it as Go's
``encoding/json`` fills NSQ's ``auth.State`` (keys matched case-insensitively, unknown keys ignored, ``null`` and
missing fields left at their zero value, wrong types refused), then validates it: permissions only
``subscribe``/``publish``, regexes that compile, ``ttl > 0``. ``AuthState.allows`` says what it grants.

nsqd uses it for its AUTH command (``services.nsqd.auth_client`` asks the servers), and ``nsq_auth_server`` to refuse
at start the rules nsqd would refuse.

Regexes are compiled with Python's ``re``, not Go's RE2: the common syntax is the same, but a pattern valid in one
may be refused by the other. Matching is unanchored, as Go's ``MatchString``: topic regex ``foo`` allows
``xfoox``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nsqclient.protocol.names import go_quote

from . import go_json

PERMISSIONS = frozenset({"subscribe", "publish"})


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
    try:
        document = go_json.decode(body)
    except go_json.GoJSONError as error:
        raise AuthError(f"invalid JSON reply: {error}") from error
    try:
        return _state(document, now)
    except go_json.GoJSONError as error:
        raise AuthError(str(error)) from error


def _state(document: Any, now: float) -> AuthState:
    state = go_json.struct_fields(document, "auth.State", ("ttl", "authorizations", "identity", "identity_url"))
    ttl = go_json.as_int(state.get("ttl", 0), "auth.State.ttl")
    items = go_json.as_list(state.get("authorizations"), "auth.State.authorizations", "[]auth.Authorization")
    authorizations = tuple(_authorization(item, f"auth.State.authorizations[{index}]")
                           for index, item in enumerate(items))
    # NSQ checks the authorizations before the TTL, so a reply wrong in both reports the authorization
    if ttl <= 0:
        raise AuthError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(identity=go_json.as_str(state.get("identity", ""), "auth.State.identity"),
                     identity_url=go_json.as_str(state.get("identity_url", ""), "auth.State.identity_url"),
                     authorizations=authorizations, expires_at=now + ttl)


def _authorization(item: Any, where: str) -> Authorization:
    fields = go_json.struct_fields(item, where, ("topic", "channels", "permissions"))
    topic = go_json.as_str(fields.get("topic", ""), f"{where}.topic")
    channels = [go_json.as_str(channel, f"{where}.channels")
                for channel in go_json.as_list(fields.get("channels"), f"{where}.channels")]
    permissions = [go_json.as_str(permission, f"{where}.permissions")
                   for permission in go_json.as_list(fields.get("permissions"), f"{where}.permissions")]
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
