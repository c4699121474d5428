"""An auth server's reply, as nsqd reads it (NSQ's ``internal/auth``): ``parse_auth_reply`` decodes it as Go's
``encoding/json`` fills NSQ's ``auth.State`` (keys matched case-insensitively, unknown keys ignored, ``null`` and
missing fields left at their zero value, wrong types refused), then validates it: permissions only
``subscribe``/``publish``, regexes that compile, ``ttl > 0``. ``AuthState.allows`` says what it grants.

nsqd uses it for its AUTH command and both nsqd and lookupd for their HTTP APIs (``shared.auth_client`` asks the
servers), and ``nsq_auth_server`` to refuse at start the rules nsqd would refuse. A reply to a question about the HTTP
APIs may also grant ``admin`` (``HTTP_PERMISSIONS``); one to a TCP AUTH may not, as NSQ's Go nsqd refuses it.

Regexes are compiled with Python's ``re``, not Go's RE2: the common syntax is the same, but a pattern valid in one
may be refused by the other. Matching is unanchored, as Go's ``MatchString``: topic regex ``foo`` allows
``xfoox``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nsqclient.protocol.names import go_quote

from . import go_json

if TYPE_CHECKING:
    import ssl

PERMISSIONS = frozenset({"subscribe", "publish"})
# what an answer about the HTTP APIs (asked with ``interface=http``) may grant: ``admin`` changes the cluster
HTTP_PERMISSIONS = PERMISSIONS | {"admin"}


class AuthError(Exception):
    """No auth server could be asked, or none answered something valid: nsqd answers ``E_AUTH_FAILED``."""


class AuthRefused(AuthError):
    """Every auth server asked refused the secret (401 or 403): a bad credential, not a broken auth server."""


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

    def names_topic(self, topic: str) -> bool:
        """Whether any authorization's topic regex matches ``topic``: what an identity may see of the topics."""
        return any(authorization.topic.search(topic) is not None for authorization in self.authorizations)


def parse_auth_reply(body: bytes | str, now: float, permissions: frozenset[str] = PERMISSIONS) -> AuthState:
    """The state an auth server's 200 reply grants from ``now`` on; AuthError when NSQ would refuse the reply
    (``permissions``: those it may grant)."""
    try:
        document = go_json.decode(body)
    except go_json.GoJSONError as error:
        raise AuthError(f"invalid JSON reply: {error}") from error
    try:
        return _state(document, now, permissions)
    except go_json.GoJSONError as error:
        raise AuthError(str(error)) from error


def _state(document: Any, now: float, permissions: frozenset[str]) -> AuthState:
    state = go_json.struct_fields(document, "auth.State", ("ttl", "authorizations", "identity", "identity_url"))
    ttl = go_json.as_int(state.get("ttl", 0), "auth.State.ttl")
    items = go_json.as_list(state.get("authorizations"), "auth.State.authorizations", "[]auth.Authorization")
    authorizations = tuple(_authorization(item, f"auth.State.authorizations[{index}]", permissions)
                           for index, item in enumerate(items))
    # NSQ checks the authorizations before the TTL, so a reply wrong in both reports the authorization
    if ttl <= 0:
        raise AuthError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(identity=go_json.as_str(state.get("identity", ""), "auth.State.identity"),
                     identity_url=go_json.as_str(state.get("identity_url", ""), "auth.State.identity_url"),
                     authorizations=authorizations, expires_at=now + ttl)


def _authorization(item: Any, where: str, known: frozenset[str]) -> Authorization:
    fields = go_json.struct_fields(item, where, ("topic", "channels", "permissions"))
    topic = go_json.as_str(fields.get("topic", ""), f"{where}.topic")
    channels = [go_json.as_str(channel, f"{where}.channels")
                for channel in go_json.as_list(fields.get("channels"), f"{where}.channels")]
    permissions = [go_json.as_str(permission, f"{where}.permissions")
                   for permission in go_json.as_list(fields.get("permissions"), f"{where}.permissions")]
    # NSQ's order: every permission, then the topic regex, then each channel regex
    for permission in permissions:
        if permission not in known:
            raise AuthError(f"unknown permission {permission}")
    return Authorization(topic=_compile(topic, "topic"),
                         channels=tuple(_compile(channel, "channel") for channel in channels),
                         permissions=frozenset(permissions))


def _compile(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as error:
        raise AuthError(f"unable to compile {what} {go_quote(pattern)} {error}") from error


def certificate_common_name(tls: ssl.SSLObject | None) -> str:
    """The CN of a connection's verified client certificate, which the auth server is told."""
    certificate = tls.getpeercert() if tls is not None else None
    subject: tuple[tuple[tuple[str, str], ...], ...] = (
        (certificate or {}).get("subject", ()))  # type: ignore[assignment]
    return next((value for entry in subject for key, value in entry if key == "commonName"), "")
