"""The admin's built-in login (``--htpasswd-file``): HTTP Basic authentication against an Apache htpasswd file of
bcrypt entries (``htpasswd -B``), for deployments without an authenticating proxy in front.

The file is read again whenever it changes, so users are added or removed without a restart. bcrypt is slow on
purpose (tens of milliseconds a check) and a browser sends its credentials with every request, the page refresh
included: a successful check is remembered, by a keyed digest of the credentials, until the file changes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import os
import secrets

import bcrypt

log = logging.getLogger("nsqadmin")

REALM = "nsqadmin"
_BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
_REMEMBERED_MAX = 4096  # distinct credentials remembered; a full table is forgotten at once


class HtpasswdError(ValueError):
    """The file cannot be read, or holds an entry that is not ``user:bcrypt-hash``."""


def parse_htpasswd(text: str, path: str) -> dict[str, bytes]:
    """``user:$2y$...`` lines (blank lines and ``#`` comments skipped) as user -> hash."""
    users: dict[str, bytes] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, colon, hashed = line.partition(":")
        if not colon or not user:
            raise HtpasswdError(f"{path}:{number}: not a user:hash entry")
        if not hashed.startswith(_BCRYPT_PREFIXES):
            raise HtpasswdError(f"{path}:{number}: the entry for {user!r} is not bcrypt (make it with htpasswd -B)")
        users[user] = hashed.encode()
    return users


def read_htpasswd(path: str) -> dict[str, bytes]:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise HtpasswdError(f"cannot read {path}: {error}") from None
    return parse_htpasswd(text, path)


def basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """The user and password of an ``Authorization: Basic ...`` header; None for anything else."""
    scheme, _, encoded = (authorization or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None


class Login:
    """The users of one htpasswd file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._users: dict[str, bytes] = {}
        self._stamp: tuple[int, int] | None = None
        self._key = secrets.token_bytes(32)
        self._remembered: set[bytes] = set()
        self._reload()

    def _reload(self) -> None:
        """Reads the file if it changed since the last read. Only the first read may fail: later, a file that
        cannot be read keeps the users read before, and a bad edit is logged once and ignored."""
        try:
            status = os.stat(self.path)
        except OSError as error:
            if self._stamp is None:
                raise HtpasswdError(f"cannot read {self.path}: {error}") from None
            return
        stamp = (status.st_mtime_ns, status.st_size)
        if stamp == self._stamp:
            return
        try:
            users = read_htpasswd(self.path)
        except HtpasswdError as error:
            if self._stamp is None:
                raise
            log.error("kept the users read before from %s - %s", self.path, error)
            self._stamp = stamp
            return
        self._users, self._stamp = users, stamp
        self._remembered.clear()

    async def authenticate(self, authorization: str | None) -> str | None:
        """The user an ``Authorization`` header proves, or None."""
        credentials = basic_credentials(authorization)
        if credentials is None:
            return None
        self._reload()
        user, password = credentials
        hashed = self._users.get(user)
        if hashed is None:
            return None
        digest = hmac.new(self._key, f"{user}\0{password}\0".encode() + hashed, hashlib.sha256).digest()
        if digest in self._remembered:
            return user
        if not await asyncio.to_thread(bcrypt.checkpw, password.encode(), hashed):
            return None
        if len(self._remembered) >= _REMEMBERED_MAX:
            self._remembered.clear()
        self._remembered.add(digest)
        return user
