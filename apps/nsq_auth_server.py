"""``nsq_auth_server``: an auth server for nsqd's ``--auth-http-address``, its rules kept in a JSON file.

It answers nsqd's auth queries (``GET /auth?common_name=&remote_ip=&secret=&tls=``, or ``POST /auth`` with the same
values as a JSON object of one-element lists, as ``--auth-http-request-method=post`` sends them): a known secret
gets NSQ's reply, ``{"ttl", "identity", "identity_url", "authorizations"}``, anything else a 403
``{"message":"NOT_AUTHORIZED"}``, which nsqd turns into ``E_AUTH_FAILED``. ``GET /ping`` answers ``OK``.

The ``admin`` permission (what changes the cluster over nsqd's and lookupd's HTTP APIs under
``--http-auth-required``) is granted only to a question that carries ``interface=http``, which those APIs send and
a TCP AUTH never does: NSQ's Go nsqd refuses a reply naming a permission it does not know, so for a TCP AUTH it is
left out of each authorization (one left with no permission is dropped).

The rules file::

    {
      "ttl": 3600,
      "secrets": {
        "s3cret": {
          "identity": "billing",
          "identity_url": "https://example.com/billing",
          "authorizations": [
            {"topic": "^orders$", "channels": [".*"], "permissions": ["subscribe", "publish"]}
          ],
          "remote_ips": ["127.0.0.1", "10.0.0.0/8"],
          "tls_required": true,
          "ttl": 60
        }
      }
    }

- ``ttl``: seconds nsqd may keep an answer before asking again (> 0; default 3600); a secret may set its own.
- ``secrets``: each key is a secret clients send with AUTH. ``identity`` and ``identity_url`` are shown in nsqd's
  stats and nsqadmin; ``authorizations`` are what NSQ expects: ``topic`` and ``channels`` are regexes, matched
  unanchored (``^...$`` to match a whole name); ``permissions`` are ``subscribe``, ``publish`` and ``admin``. A
  publish is checked with the channel ``""``, so a publishing authorization needs a channel regex matching it
  (``.*``); so is an action on a topic, and one on the whole node (``PUT /config``) with the topic ``""`` too.
- ``remote_ips`` (optional): the addresses or networks the secret may be used from (the client's IP as nsqd
  reports it); ``tls_required`` (optional): the secret is refused on connections without TLS.

Unknown keys are errors, so a misspelt restriction is not silently ignored. The file is checked at start (exit
code 2 if it is unusable) and read again whenever it changes (modification time, size or inode), so rules can be
edited while the server runs; an edit that makes the file unusable is logged and the previous rules stay.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from shared.auth_reply import HTTP_PERMISSIONS, AuthError, parse_auth_reply
from shared.flags import FlagError, option
from shared.http_api import HTTPError, error_response, json_response, nsq_errors, parse_bool, text_response
from shared.listeners import listen_http
from shared.program import ProgramOptions, run
from shared.version import version_line

log = logging.getLogger("nsq_auth_server")

DEFAULT_TTL = 3600
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_TOP_KEYS = {"ttl", "secrets"}
_SECRET_KEYS = {"identity", "identity_url", "authorizations", "ttl", "remote_ips", "tls_required"}
_AUTHORIZATION_KEYS = {"topic", "channels", "permissions"}
_QUERY_KEYS = ("common_name", "interface", "remote_ip", "secret", "tls")
_RULES_HELP = ('JSON rules file (required): {"ttl": 3600, "secrets": {"<secret>": {"identity": "...", '
               '"identity_url": "...", "authorizations": [{"topic": "<regex>", "channels": ["<regex>"], '
               '"permissions": ["subscribe", "publish", "admin"]}], "remote_ips": ["<ip or network>"] (optional), '
               '"tls_required": true (optional), "ttl": N (optional)}}}; re-read when it changes')


class RulesError(ValueError):
    """A rules file that cannot be used; the message says where in it."""


@dataclass(frozen=True)
class Grant:
    """What one secret gets: the reply nsqd receives, and where it may be used from."""

    reply: dict[str, Any]
    remote_networks: tuple[_Network, ...] | None  # None: from anywhere
    tls_required: bool


@dataclass(frozen=True)
class AuthRequest:
    """One query, as nsqd sends it (``common_name`` is the TLS client certificate's, or empty; ``interface``
    ``http`` for the HTTP APIs, empty for a TCP AUTH)."""

    secret: str
    remote_ip: str
    tls: bool
    common_name: str = ""
    interface: str = ""


class Denied(Exception):
    """A query answered 403; the message is the reason, for the log (never the secret)."""


def parse_rules(document: Any) -> dict[str, Grant]:
    """The grant of each secret in a rules file's JSON; RulesError naming the entry at fault."""
    _check_keys(document, _TOP_KEYS, "the rules file")
    default_ttl = _ttl(document.get("ttl", DEFAULT_TTL), "ttl")
    secrets = document.get("secrets")
    if not isinstance(secrets, dict):
        raise RulesError('"secrets" must be an object of secret -> rule')
    return {secret: _grant(rule, default_ttl, f"secrets entry {n}") for n, (secret, rule) in
            enumerate(secrets.items(), 1)}


def load_rules(path: str) -> dict[str, Grant]:
    try:
        with open(path, "rb") as file:
            document = json.loads(file.read())
    except ValueError as error:
        raise RulesError(f"{path}: not JSON - {error}") from error
    try:
        return parse_rules(document)
    except RulesError as error:
        raise RulesError(f"{path}: {error}") from error


def _grant(rule: Any, default_ttl: int, where: str) -> Grant:
    _check_keys(rule, _SECRET_KEYS, where)
    where = f"{where} (identity {rule.get('identity', '')!r})"
    reply = {"ttl": _ttl(rule.get("ttl", default_ttl), f"{where}: ttl"),
             "identity": _string(rule.get("identity", ""), f"{where}: identity"),
             "identity_url": _string(rule.get("identity_url", ""), f"{where}: identity_url"),
             "authorizations": _authorizations(rule.get("authorizations", []), where)}
    try:
        # what nsqd would refuse (bad regex or permission) is refused now
        parse_auth_reply(json.dumps(reply), now=0, permissions=HTTP_PERMISSIONS)
    except AuthError as error:
        raise RulesError(f"{where}: {error}") from error
    tls_required = rule.get("tls_required", False)
    if not isinstance(tls_required, bool):
        raise RulesError(f"{where}: tls_required must be true or false")
    return Grant(reply, _networks(rule.get("remote_ips"), where), tls_required)


def _authorizations(items: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(items, list):
        raise RulesError(f"{where}: authorizations must be a list")
    for n, item in enumerate(items, 1):
        _check_keys(item, _AUTHORIZATION_KEYS, f"{where}: authorization {n}")
        missing = _AUTHORIZATION_KEYS - item.keys()
        if missing:
            raise RulesError(f"{where}: authorization {n} needs {', '.join(sorted(missing))}")
        _string(item["topic"], f"{where}: authorization {n}: topic")
        for key in ("channels", "permissions"):
            if not isinstance(item[key], list) or not all(isinstance(value, str) for value in item[key]):
                raise RulesError(f"{where}: authorization {n}: {key} must be a list of strings")
    return items


def _networks(items: Any, where: str) -> tuple[_Network, ...] | None:
    if items is None:
        return None
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise RulesError(f"{where}: remote_ips must be a list of addresses or networks")
    try:
        return tuple(ipaddress.ip_network(item, strict=False) for item in items)
    except ValueError as error:
        raise RulesError(f"{where}: remote_ips: {error}") from error


def _check_keys(value: Any, allowed: set[str], where: str) -> None:
    if not isinstance(value, dict):
        raise RulesError(f"{where} must be a JSON object")
    unknown = value.keys() - allowed
    if unknown:
        raise RulesError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(allowed))})")


def _ttl(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RulesError(f"{where} must be a whole number of seconds > 0")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise RulesError(f"{where} must be a string")
    return value


def authorize(grants: dict[str, Grant], request: AuthRequest) -> dict[str, Any]:
    """The reply for a query; Denied when the secret is unknown or used from where it may not be."""
    grant = grants.get(request.secret)
    if grant is None:
        raise Denied("unknown secret")
    if grant.tls_required and not request.tls:
        raise Denied(f"identity {grant.reply['identity']!r} requires TLS")
    if grant.remote_networks is not None and not _address_in(request.remote_ip, grant.remote_networks):
        raise Denied(f"identity {grant.reply['identity']!r} is not allowed from this remote_ip")
    if request.interface == "http":
        return grant.reply
    return {**grant.reply, "authorizations": _without_admin(grant.reply["authorizations"])}


def _without_admin(authorizations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a TCP AUTH is granted: NSQ's Go nsqd refuses a reply with a permission it does not know."""
    kept = []
    for authorization in authorizations:
        permissions = [permission for permission in authorization["permissions"] if permission != "admin"]
        if permissions:
            kept.append({**authorization, "permissions": permissions})
    return kept


def _address_in(remote_ip: str, networks: tuple[_Network, ...]) -> bool:
    try:
        address = ipaddress.ip_address(remote_ip)
    except ValueError:
        return False
    return any(address in network for network in networks)


class RulesFile:
    """The rules as last read from their file, read again when the file's modification time, size or inode
    change. Checked on each query rather than on a timer: an edit applies to the very next query, and there is
    no task to own. (A stat and, rarely, the read of a small file block the loop only briefly.)"""

    def __init__(self, path: str) -> None:
        self.path = path
        self._signature = self._stat()
        self._grants = load_rules(path)

    def grants(self) -> dict[str, Grant]:
        signature = self._stat()
        if signature != self._signature:
            self._signature = signature
            self._reload()
        return self._grants

    def _reload(self) -> None:
        try:
            self._grants = load_rules(self.path)
        except (OSError, RulesError) as error:
            log.error("rules: keeping the previous rules - %s", error)
            return
        log.info("rules: read %s again (%d secrets)", self.path, len(self._grants))

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino


RULES_KEY = web.AppKey("rules", RulesFile)


async def _auth_get(request: web.Request) -> web.Response:
    return _answer(request, {key: request.query.get(key, "") for key in _QUERY_KEYS})


async def _auth_post(request: web.Request) -> web.Response:
    """NSQ posts its ``url.Values`` as JSON: each value a list, of which the first counts (``Values.Get``)."""
    try:
        document = json.loads(await request.read())
    except ValueError:
        raise HTTPError(400, "BAD_BODY") from None
    if not isinstance(document, dict):
        raise HTTPError(400, "BAD_BODY")
    return _answer(request, {key: _first(document.get(key)) for key in _QUERY_KEYS})


def _first(value: Any) -> str:
    if isinstance(value, list):
        value = value[0] if value else ""
    return value if isinstance(value, str) else ""


def _answer(request: web.Request, values: dict[str, str]) -> web.Response:
    query = AuthRequest(secret=values["secret"], remote_ip=values["remote_ip"],
                        tls=parse_bool(values["tls"]) is True, common_name=values["common_name"],
                        interface=values["interface"])
    try:
        reply = authorize(request.app[RULES_KEY].grants(), query)
    except Denied as denied:
        log.info("AUTH: denied remote_ip %s - %s", query.remote_ip, denied)
        return error_response(403, "NOT_AUTHORIZED")
    log.info("AUTH: identity %r for remote_ip %s", reply["identity"], query.remote_ip)
    return json_response(reply)


async def _ping(request: web.Request) -> web.Response:
    return text_response("OK")


def build_app(rules: RulesFile) -> web.Application:
    app = web.Application(middlewares=[nsq_errors(log)])
    app[RULES_KEY] = rules
    app.router.add_get("/ping", _ping, allow_head=False)
    app.router.add_get("/auth", _auth_get, allow_head=False)
    app.router.add_post("/auth", _auth_post)
    return app


@dataclass
class Options(ProgramOptions):
    log_prefix: str = option("[nsq_auth_server] ", "log message prefix")
    http_address: str = option("127.0.0.1:4181", "<addr>:<port> to listen on for HTTP clients")
    rules: str = option("", _RULES_HELP)

    def validate(self) -> None:
        """The rules file is read here, so an unusable one is a bad command line (exit code 2)."""
        super().validate()
        if not self.rules:
            raise FlagError("--rules is required")
        try:
            load_rules(self.rules)
        except (OSError, RulesError) as error:
            raise FlagError(f"--rules: {error}") from None


class AuthServer:
    """The server as a service: ``await start()`` listens (port 0 allowed, the bound address in
    ``http_address``), ``await stop()`` closes."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.rules = RulesFile(opts.rules)
        self.http_address: tuple[str, int] | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        log.info("rules: %d secrets from %s", len(self.rules.grants()), self.rules.path)
        self._runner, self.http_address = await listen_http(self.opts.http_address, build_app(self.rules), log)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def main(argv: list[str] | None = None) -> None:
    run("nsq_auth_server", Options, version_line("nsq_auth_server"), AuthServer, argv,
        startup_errors=(OSError, RulesError))


if __name__ == "__main__":
    main()
