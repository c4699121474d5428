"""The admin's actions (nsqadmin's POST and DELETE routes under ``/api``), each planned before it runs: a ``Plan``
names the action as the audit log and nsqadmin's notifications name it, and says what performs it. ``run_action``
serves every action route: it runs the plan for an admin, then audits and notifies it whatever the outcome;
``audit_refusal`` records an action that ``security`` refused before it ran.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from aiohttp import web

from nsqclient.protocol.names import is_valid_channel_name, is_valid_topic_name
from shared.http_api import HTTPError, json_response

from .app_state import admin_of, is_admin, user_of
from .audit import AuditEntry
from .cluster import Cluster
from .security import Refusal
from .upstream import UpstreamError, Warnings

TOPIC_ACTIONS = ("pause", "unpause", "empty")
DEAD_LETTER_ACTIONS = ("replay_dead_letters", "empty_dead_letters")  # beyond nsqadmin, on a channel

Perform = Callable[[Warnings], Awaitable[dict[str, Any] | None]]


@dataclass
class Plan:
    """An action as the audit log and nsqadmin's notifications name it, and what performs it."""

    action: str
    topic: str
    channel: str = ""
    node: str = ""
    perform: Perform | None = None
    # nsqadmin records creating a topic with a channel as a second action, create_channel
    created_channel: str = ""


Planner = Callable[[web.Request, dict[str, Any]], Plan]
PLANNERS_KEY: web.AppKey[dict[web.AbstractRoute, Planner]] = web.AppKey("planners", dict)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read() or b"{}")
    except ValueError:
        raise HTTPError(400, "INVALID_BODY") from None
    if not isinstance(body, dict) or not all(isinstance(value, str) for value in body.values()):
        raise HTTPError(400, "INVALID_BODY")
    return body


def _topic(name: str) -> str:
    if not is_valid_topic_name(name):
        raise HTTPError(400, "INVALID_TOPIC")
    return name


def _channel(name: str) -> str:
    if not is_valid_channel_name(name):
        raise HTTPError(400, "INVALID_CHANNEL")
    return name


async def _plan(request: web.Request) -> Plan:
    return request.app[PLANNERS_KEY][request.match_info.route](request, await _body(request))


async def run_action(request: web.Request) -> web.Response:
    """Every action route: runs the action for an admin, then audits and notifies it (also when it failed). The
    answer is nsqadmin's ``message`` and whatever the action tells of its outcome."""
    plan = await _plan(request)
    if not is_admin(request):
        await _record(request, plan, "refused: FORBIDDEN")
        raise HTTPError(403, "FORBIDDEN")
    assert plan.perform is not None
    warnings = Warnings()
    result = "ok"
    try:
        outcome = await plan.perform(warnings)
        result = warnings.message() or "ok"
    except UpstreamError as error:
        result = f"UPSTREAM_ERROR: {error}"
        raise
    finally:
        await _record(request, plan, result, notify=True)
    return json_response({"message": warnings.message(), **(outcome or {})})


async def audit_refusal(request: web.Request, refusal: Refusal) -> None:
    """A state-changing request refused before it ran (``security``): an action's is recorded as refused (not
    notified: nothing happened), named as well as its request allows."""
    if request.match_info.route not in request.app[PLANNERS_KEY]:
        return  # /config and paths that are no route: no admin action
    try:
        plan = await _plan(request)
    except (HTTPError, web.HTTPException):  # a body that is no action's, or too large to read
        match = request.match_info
        plan = Plan("unknown", match.get("topic", ""), match.get("channel", ""), match.get("node", ""))
    await _record(request, plan, f"refused: {refusal.message}")


async def _record(request: web.Request, plan: Plan, result: str, notify: bool = False) -> None:
    entries = [(plan.action, plan.channel)]
    if plan.created_channel:
        entries.append(("create_channel", plan.created_channel))
    identity = await admin_of(request).identity()
    for action, channel in entries:
        entry = AuditEntry(ts=time.time(), user=user_of(request), remote_ip=_remote_address(request),
                           user_agent=request.headers.get("User-Agent", ""), action=action, topic=plan.topic,
                           channel=channel, node=plan.node, result=result, identity=identity)
        await admin_of(request).record_action(entry, str(request.url), notify)


def _remote_address(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return f"{peer[0]}:{peer[1]}" if peer else request.remote or ""


def plan_create(request: web.Request, body: dict[str, Any]) -> Plan:
    topic, channel = _topic(body.get("topic", "")), body.get("channel", "")
    if channel:
        _channel(channel)
    cluster = admin_of(request).cluster
    return Plan("create_topic", topic, created_channel=channel,
                perform=lambda warnings: cluster.create_topic_channel(topic, channel, warnings))


def plan_topic_action(request: web.Request, body: dict[str, Any]) -> Plan:
    topic, action = _topic(request.match_info["topic"]), body.get("action", "")
    cluster = admin_of(request).cluster
    if action == "set_retention":  # beyond nsqadmin: the values as nsqd's /topic/retention takes them
        settings = {key: body[key].strip() for key in ("time", "bytes") if body.get(key, "").strip()}
        if not settings:
            raise HTTPError(400, "MISSING_ARG_TIME")
        return Plan(action, topic, perform=lambda warnings: cluster.set_retention(topic, settings, warnings))
    if action not in TOPIC_ACTIONS:
        raise HTTPError(400, "INVALID_ACTION")
    return Plan(f"{action}_topic", topic, perform=lambda warnings: cluster.topic_action(topic, action, warnings))


def plan_channel_action(request: web.Request, body: dict[str, Any]) -> Plan:
    topic, channel = _topic(request.match_info["topic"]), _channel(request.match_info["channel"])
    action, cluster = body.get("action", ""), admin_of(request).cluster
    if action == "rewind":  # beyond nsqadmin: a time, a duration before now, or "earliest", as nsqd takes it
        since = body.get("since", "").strip()
        if not since:
            raise HTTPError(400, "MISSING_ARG_SINCE")
        return Plan("rewind_channel", topic, channel,
                    perform=lambda warnings: _rewound(cluster.rewind(topic, channel, since, warnings)))
    if action in DEAD_LETTER_ACTIONS:
        return Plan(action, topic, channel,
                    perform=lambda warnings: _dead_letter_action(cluster, action, topic, channel, warnings))
    if action not in TOPIC_ACTIONS:
        raise HTTPError(400, "INVALID_ACTION")
    return Plan(f"{action}_channel", topic, channel,
                perform=lambda warnings: cluster.channel_action(topic, channel, action, warnings))


async def _dead_letter_action(cluster: Cluster, action: str, topic: str, channel: str,
                              warnings: Warnings) -> dict[str, Any] | None:
    if action == "replay_dead_letters":
        return {"replayed": await cluster.replay_dead_letters(topic, channel, warnings)}
    await cluster.empty_dead_letters(topic, channel, warnings)
    return None


async def _rewound(rewinding: Awaitable[int]) -> dict[str, Any]:
    return {"rewound": await rewinding}


def plan_delete_topic(request: web.Request, body: dict[str, Any]) -> Plan:
    topic, cluster = _topic(request.match_info["topic"]), admin_of(request).cluster
    return Plan("delete_topic", topic, perform=lambda warnings: cluster.delete_topic(topic, warnings))


def plan_delete_channel(request: web.Request, body: dict[str, Any]) -> Plan:
    topic, channel = _topic(request.match_info["topic"]), _channel(request.match_info["channel"])
    cluster = admin_of(request).cluster
    return Plan("delete_channel", topic, channel,
                perform=lambda warnings: cluster.delete_channel(topic, channel, warnings))


def plan_tombstone(request: web.Request, body: dict[str, Any]) -> Plan:
    node, topic = request.match_info["node"], _topic(body.get("topic", ""))
    cluster = admin_of(request).cluster
    return Plan("tombstone_topic_producer", topic, node=node,
                perform=lambda warnings: cluster.tombstone(node, topic, warnings))


ACTION_ROUTES: list[tuple[str, str, Planner]] = [
    ("POST", "/api/topics", plan_create), ("POST", "/api/topics/{topic}", plan_topic_action),
    ("POST", "/api/topics/{topic}/{channel}", plan_channel_action),
    ("DELETE", "/api/topics/{topic}", plan_delete_topic), ("DELETE", "/api/topics/{topic}/{channel}", plan_delete_channel),
    ("DELETE", "/api/nodes/{node}", plan_tombstone)]
