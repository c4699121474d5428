"""One client's session of protocol V2 as nsqd sees it, without I/O: its state and the rules every command passes.

``SessionV2.receive(data)`` parses the bytes (magic first) and yields each command as a request nsqd can act on
without checking anything: ``Publish(command, topic, bodies, defer_ms)``, ``Subscribe(topic, channel)``,
``Ready(ready_count)``, ``Finish(ids)``, ``Requeue(id, delay_ms)``, ``Touch(id)``, ``Close()``, ``Identify(body)``,
``Auth(secret)``. A command that breaks a rule raises NSQ's ``FatalClientError`` instead (NSQ's order of checks,
codes and texts); the session is over then. Commands are checked one at a time, as the caller asks for the next,
so what the previous one changed (an IDENTIFY's heartbeats, an AUTH's authorizations) applies to the next.

Two requests are not commands: ``Reauthorize()`` comes before a command that needs authorizations whose TTL is
over (the command is checked once the caller called ``authenticated`` again), and ``CreateTopic(topic)`` before
an MPUB's body error, since NSQ creates the topic before it reads the body.

The state follows NSQ's client states: INIT until a SUB (SUBSCRIBED), CLOSING after CLS. The caller reports what
the broker and the connection did through ``identified``, ``authenticated``, ``upgraded_to_tls``, ``closing`` and
``disconnected``.

A request may have to wait before the next can be checked or acted on: AUTH for the auth server, a command on a
topic that is not started yet, an IDENTIFY for its upgrade. The caller says so with ``wait()``, as h11 pauses:
from then on nothing more comes out, whatever arrives and in whatever pieces, until ``resume()`` hands out the
requests that arrived meanwhile, in order. What is received and not yet handed out stays here: the commands parsed
and not yet checked, and the bytes after an IDENTIFY, which the parser holds unparsed until the caller says how
they are framed (``take_held`` for an upgrade to compression, ``drop_held`` before a TLS handshake, else they are
parsed as they are).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from enum import IntEnum
from typing import Callable, Iterator, NamedTuple, NoReturn, Protocol

from nsqclient.protocol.frames import MAGIC_V2
from nsqclient.protocol.names import go_quote, is_valid_channel_name, is_valid_topic_name

from .commands import FIN_RUN, Command, CommandParser
from .errors import FatalClientError

log = logging.getLogger("nsqd")


class ClientState(IntEnum):
    """NSQ's client states (the numbers /stats reports)."""

    INIT = 0
    DISCONNECTED = 1
    CONNECTED = 2
    SUBSCRIBED = 3
    CLOSING = 4


class Identify(NamedTuple):
    body: bytes


class Auth(NamedTuple):
    secret: bytes


class Subscribe(NamedTuple):
    topic: str
    channel: str


class Ready(NamedTuple):
    ready_count: int


class Finish(NamedTuple):
    ids: list[bytes]


class Requeue(NamedTuple):
    id: bytes
    delay_ms: int


class Touch(NamedTuple):
    id: bytes


class Close(NamedTuple):
    pass


class Publish(NamedTuple):
    command: str  # PUB, MPUB or DPUB: names the failure (E_PUB_FAILED ...)
    topic: str
    bodies: list[bytes]
    defer_ms: int


class CreateTopic(NamedTuple):
    topic: str


class Reauthorize(NamedTuple):
    pass


Request = Identify | Auth | Subscribe | Ready | Finish | Requeue | Touch | Close | Publish | CreateTopic | Reauthorize


class Authorizations(Protocol):
    """What an auth server allowed one secret."""

    def allows(self, topic: str, channel: str, permission: str) -> bool: ...

    def is_expired(self, now: float) -> bool: ...


class Limits(NamedTuple):
    """nsqd's flags the rules depend on (sizes in bytes, times in milliseconds)."""

    max_msg_size: int
    max_body_size: int
    max_rdy_count: int
    max_req_timeout_ms: int
    tls_required: bool
    auth_enabled: bool


# NamedTuple.__new__ is a Python function; building the tuple directly is three times cheaper (PUB's hot path)
_new = tuple.__new__
_CLOSE = Close()
_REAUTHORIZE = Reauthorize()
# commands checked against the client's authorizations
_AUTHORIZED = frozenset({b"SUB", b"PUB", b"MPUB", b"DPUB"})
# topic names this session found valid, remembered so a producer's every PUB does not run the name's regex again
_KNOWN_TOPICS_LIMIT = 1024


class SessionV2:
    def __init__(self, limits: Limits, clock: Callable[[], float] = time.time) -> None:
        self.limits = limits
        self.state = ClientState.INIT
        self.heartbeats = True
        # commands other than IDENTIFY wait for TLS (--tls-required) until the connection upgraded
        self.tls_pending = limits.tls_required
        self.authorizations: Authorizations | None = None
        self._auth_enabled = limits.auth_enabled
        self._clock = clock
        self._parser = CommandParser(limits.max_msg_size, limits.max_body_size, MAGIC_V2)
        self._commands: deque[Command] = deque()  # parsed, not yet checked and handed out
        self.waiting = False
        self._valid_topics: dict[bytes, str] = {}

    # -- what the broker did ---------------------------------------------------------------------------------

    def identified(self, heartbeat_interval: float) -> None:
        self.heartbeats = heartbeat_interval > 0

    def authenticated(self, authorizations: Authorizations) -> None:
        self.authorizations = authorizations

    def upgraded_to_tls(self) -> None:
        self.tls_pending = False

    def closing(self) -> None:
        if self.state != ClientState.DISCONNECTED:
            self.state = ClientState.CLOSING

    def disconnected(self) -> None:
        self.state = ClientState.DISCONNECTED

    # -- bytes in, requests out ------------------------------------------------------------------------------

    def receive(self, data: bytes) -> Iterator[Request]:
        """The requests in ``data`` (after what earlier calls left), parsed once the first is asked for and
        checked one by one as they are taken; raises FatalClientError at the first command that breaks a rule (or
        bytes that are not V2). Nothing while a request waits."""
        return self._requests(data)

    def wait(self) -> None:
        """The request just taken waits: nothing after it is checked or handed out until ``resume()``."""
        self.waiting = True

    def resume(self) -> Iterator[Request]:
        """The wait is over: the requests received meanwhile, as ``receive`` hands them out."""
        self.waiting = False
        return self._requests()

    def take_held(self) -> bytes:
        """What was received after an IDENTIFY, unparsed: the connection upgraded to compression, so the bytes
        are to be inflated and received again."""
        return self._parser.take_held()

    def drop_held(self) -> int:
        """Forgets what was received after an IDENTIFY that upgrades to TLS (it came before the handshake); what
        comes next is held until the upgrade is done. How many bytes were dropped."""
        return self._parser.drop_held()

    def _requests(self, data: bytes = b"") -> Iterator[Request]:
        commands, parser = self._commands, self._parser
        if data:
            commands.extend(parser.feed(data))
        while not self.waiting:
            if not commands:
                if not parser.holding:
                    return
                # the bytes after an IDENTIFY that upgraded nothing (its request was acted on by now)
                commands.extend(parser.release_held())
                continue
            command = commands.popleft()
            if self.tls_pending and command.name != b"IDENTIFY":
                name = b"FIN" if command.name == FIN_RUN else command.name
                raise FatalClientError("E_INVALID", f"cannot {_text(name)} in current state (TLS required)")
            if self.authorizations is not None and command.name in _AUTHORIZED \
                    and self.authorizations.is_expired(self._clock()):
                commands.appendleft(command)  # checked again once ``authenticated`` renewed them
                yield _REAUTHORIZE
                continue
            request = _CHECKS.get(command.name, _unknown)(self, command)
            if request is not None:
                yield request
                if request.__class__ is CreateTopic:
                    raise command.error  # type: ignore[misc]

    # -- the rules, one per command --------------------------------------------------------------------------

    def _identify(self, command: Command) -> Request | None:
        if self.state != ClientState.INIT:
            raise FatalClientError("E_INVALID", "cannot IDENTIFY in current state")
        if command.error is not None:
            raise command.error
        return Identify(command.body)

    def _auth(self, command: Command) -> Request | None:
        if self.state != ClientState.INIT:
            raise FatalClientError("E_INVALID", "cannot AUTH in current state")
        if command.args:
            raise FatalClientError("E_INVALID", "AUTH invalid number of parameters")
        if command.error is not None:
            raise command.error
        if self.authorizations is not None:
            raise FatalClientError("E_INVALID", "AUTH already set")
        if not self.limits.auth_enabled:
            raise FatalClientError("E_AUTH_DISABLED", "AUTH disabled")
        return Auth(command.body)

    def _sub(self, command: Command) -> Request | None:
        if self.state != ClientState.INIT:
            raise FatalClientError("E_INVALID", "cannot SUB in current state")
        if not self.heartbeats:
            raise FatalClientError("E_INVALID", "cannot SUB with heartbeats disabled")
        if len(command.args) < 2:
            raise FatalClientError("E_INVALID", "SUB insufficient number of parameters")
        topic, channel = _text(command.args[0]), _text(command.args[1])
        if not is_valid_topic_name(topic):
            raise FatalClientError("E_BAD_TOPIC", f"SUB topic name {go_quote(topic)} is not valid")
        if not is_valid_channel_name(channel):
            raise FatalClientError("E_BAD_CHANNEL", f"SUB channel name {go_quote(channel)} is not valid")
        self._check_auth("SUB", topic, channel)
        self.state = ClientState.SUBSCRIBED  # a SUB the broker refuses ends the session
        return Subscribe(topic, channel)

    def _rdy(self, command: Command) -> Request | None:
        if self.state == ClientState.CLOSING:
            log.info("PROTOCOL(V2): ignoring RDY after CLS in state ClientStateV2Closing")
            return None
        if self.state != ClientState.SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot RDY in current state")
        count = 1
        if command.args:
            parsed = _decimal(command.args[0])
            if parsed is None:
                raise FatalClientError("E_INVALID", f"RDY could not parse count {_text(command.args[0])}")
            count = parsed
        if count > self.limits.max_rdy_count:
            raise FatalClientError("E_INVALID", f"RDY count {count} out of range 0-{self.limits.max_rdy_count}")
        return _new(Ready, (count,))

    def _message_id(self, command: Command, name: str, min_args: int) -> bytes:
        """The checks FIN, REQ and TOUCH share; returns the message ID."""
        if self.state != ClientState.SUBSCRIBED and self.state != ClientState.CLOSING:
            raise FatalClientError("E_INVALID", f"cannot {name} in current state")
        if len(command.args) < min_args:
            raise FatalClientError("E_INVALID", f"{name} insufficient number of params")
        msg_id = command.args[0]
        if len(msg_id) != 16:
            raise FatalClientError("E_INVALID", "invalid message ID")
        return msg_id

    def _fin(self, command: Command) -> Request | None:
        return _new(Finish, ([self._message_id(command, "FIN", 1)],))

    def _fin_run(self, command: Command) -> Request | None:
        """Consecutive plain FINs, which the parser already found well formed."""
        if self.state != ClientState.SUBSCRIBED and self.state != ClientState.CLOSING:
            raise FatalClientError("E_INVALID", "cannot FIN in current state")
        return _new(Finish, (command.args,))

    def _req(self, command: Command) -> Request | None:
        msg_id = self._message_id(command, "REQ", 2)
        delay_ms = _decimal(command.args[1])
        if delay_ms is None:
            raise FatalClientError("E_INVALID", f"REQ could not parse timeout {_text(command.args[1])}")
        max_ms = self.limits.max_req_timeout_ms
        if delay_ms > max_ms:
            log.info("PROTOCOL(V2): REQ timeout %d out of range 0-%d. Setting to %d", delay_ms, max_ms, max_ms)
            delay_ms = max_ms
        return Requeue(msg_id, delay_ms)

    def _touch(self, command: Command) -> Request | None:
        return Touch(self._message_id(command, "TOUCH", 1))

    def _cls(self, command: Command) -> Request | None:
        if self.state != ClientState.SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot CLS in current state")
        self.state = ClientState.CLOSING
        return _CLOSE

    def _nop(self, command: Command) -> Request | None:
        return None

    def _pub(self, command: Command) -> Request | None:
        topic = self._publish_topic(command, "PUB", 1)
        if command.error is not None:
            raise command.error
        self._check_auth("PUB", topic, "")
        return _new(Publish, ("PUB", topic, [command.body], 0))

    def _mpub(self, command: Command) -> Request | None:
        topic = self._publish_topic(command, "MPUB", 1, quote_prefix="E_BAD_TOPIC ")  # NSQ repeats the code here
        self._check_auth("MPUB", topic, "")
        if command.error is not None:
            return CreateTopic(topic)  # then the error: NSQ creates the topic before it reads the body
        assert command.messages is not None
        return _new(Publish, ("MPUB", topic, command.messages, 0))

    def _dpub(self, command: Command) -> Request | None:
        topic = self._publish_topic(command, "DPUB", 2)
        defer_ms = _decimal(command.args[1])
        if defer_ms is None:
            raise FatalClientError("E_INVALID", f"DPUB could not parse timeout {_text(command.args[1])}")
        max_ms = self.limits.max_req_timeout_ms
        if defer_ms > max_ms:
            raise FatalClientError("E_INVALID", f"DPUB timeout {defer_ms} out of range 0-{max_ms}")
        if command.error is not None:
            raise command.error
        self._check_auth("DPUB", topic, "")
        return Publish("DPUB", topic, [command.body], defer_ms)

    def _publish_topic(self, command: Command, name: str, min_args: int, quote_prefix: str = "") -> str:
        if len(command.args) < min_args:
            raise FatalClientError("E_INVALID", f"{name} insufficient number of parameters")
        raw = command.args[0]
        topic = self._valid_topics.get(raw)
        if topic is None:
            topic = _text(raw)
            if not is_valid_topic_name(topic):
                raise FatalClientError("E_BAD_TOPIC", f"{quote_prefix}{name} topic name {go_quote(topic)} is not valid")
            if len(self._valid_topics) < _KNOWN_TOPICS_LIMIT:
                self._valid_topics[raw] = topic
        return topic

    def _check_auth(self, command: str, topic: str, channel: str) -> None:
        if not self._auth_enabled:
            return
        if self.authorizations is None:
            raise FatalClientError("E_AUTH_FIRST", f"AUTH required before {command}")
        if not self.authorizations.allows(topic, channel, "subscribe" if command == "SUB" else "publish"):
            raise FatalClientError("E_UNAUTHORIZED",
                                   f"AUTH failed for {command} on {go_quote(topic)} {go_quote(channel)}")


def _unknown(session: SessionV2, command: Command) -> NoReturn:
    if command.error is not None:
        raise command.error  # a line the parser could not take (too long), or bytes that are not V2
    raise FatalClientError("E_INVALID", f"invalid command {_text(command.name)}")


def _decimal(text: bytes) -> int | None:
    """NSQ's ByteToBase10: ASCII digits only (empty is 0); None if anything else, or more digits than a uint64
    holds."""
    if not text:
        return 0
    return int(text) if text.isdigit() and len(text) <= 20 else None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")  # go_quote prints undecodable bytes as \xNN, as Go does


_CHECKS: dict[bytes, Callable[[SessionV2, Command], Request | None]] = {
    b"IDENTIFY": SessionV2._identify,
    b"AUTH": SessionV2._auth,
    b"SUB": SessionV2._sub,
    b"RDY": SessionV2._rdy,
    b"FIN": SessionV2._fin,
    FIN_RUN: SessionV2._fin_run,
    b"REQ": SessionV2._req,
    b"TOUCH": SessionV2._touch,
    b"CLS": SessionV2._cls,
    b"NOP": SessionV2._nop,
    b"PUB": SessionV2._pub,
    b"MPUB": SessionV2._mpub,
    b"DPUB": SessionV2._dpub,
}
