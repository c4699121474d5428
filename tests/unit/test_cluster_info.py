"""shared/cluster_info.py against real HTTP servers on loopback ports that answer as NSQ's lookupd and nsqd do
(NSQ's own samples, the envelope of NSQ before 1.0, failures), and the client library's discovery built on it."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from nsqclient.lookupd import lookup_nodes, lookup_topic
from shared.cluster_info import ClusterInfo, ClusterInfoError, gather_answers, http_address, tcp_address
from tests.unit.http_hosts import Hosts, closed_address

REFERENCE = Path(__file__).resolve().parent.parent / "reference"


def sample(name: str) -> str:
    return (REFERENCE / name).read_text()


@pytest.fixture
async def hosts() -> AsyncIterator[Hosts]:
    async with Hosts() as started:
        yield started


@pytest.fixture
async def cluster() -> AsyncIterator[ClusterInfo]:
    async with ClusterInfo.open(connect_timeout=1.0, request_timeout=1.0, user_agent="tester/1.0") as info:
        yield info


def envelope(body: str) -> str:
    return json.dumps({"status_code": 200, "status_txt": "OK", "data": json.loads(body)})


# --- lookupd's and nsqd's answers ----------------------------------------------------------------------------------

async def test_nsqs_lookupd_answers(hosts: Hosts, cluster: ClusterInfo) -> None:
    lookupd = await hosts.start(topics=(200, sample("lookupd_topics.json")),
                                channels=(200, sample("lookupd_channels.json")),
                                lookup=(200, sample("lookupd_lookup.json")), nodes=(200, sample("lookupd_nodes.json")))
    assert await cluster.topics(lookupd.address) == ["sample_topic"]
    assert await cluster.channels(lookupd.address, "sample_topic") == ["sample_channel"]
    producers = await cluster.producers(lookupd.address, "sample_topic")
    assert [tcp_address(producer) for producer in producers] == ["127.0.0.1:14150", "127.0.0.1:14250"]
    assert [http_address(producer) for producer in producers] == ["127.0.0.1:14151", "127.0.0.1:14251"]
    nodes = await cluster.nodes(lookupd.address)
    assert [(node["hostname"], node["topics"]) for node in nodes] == [("vm", ["sample_topic"])] * 2
    assert [request.query_string for request in lookupd.requests] == ["", "topic=sample_topic",
                                                                      "topic=sample_topic", ""]


async def test_the_envelope_of_nsq_before_1_0_is_unwrapped(hosts: Hosts, cluster: ClusterInfo) -> None:
    lookupd = await hosts.start(topics=(200, envelope('{"topics": ["a", "b"]}')),
                                lookup=(200, envelope(sample("lookupd_lookup.json"))),
                                stats=(200, envelope(sample("nsqd_stats.json"))))
    assert await cluster.topics(lookupd.address) == ["a", "b"]
    assert len(await cluster.producers(lookupd.address, "sample_topic")) == 2
    assert (await cluster.stats(lookupd.address))["topics"][0]["topic_name"] == "sample_topic"


async def test_empty_lists_may_be_null(hosts: Hosts, cluster: ClusterInfo) -> None:
    lookupd = await hosts.start(topics=(200, '{"topics": null}'), lookup=(200, '{"channels": [], "producers": null}'))
    assert await cluster.topics(lookupd.address) == []
    assert await cluster.producers(lookupd.address, "t") == []


async def test_nsqd_stats_and_info(hosts: Hosts, cluster: ClusterInfo) -> None:
    nsqd = await hosts.start(stats=(200, sample("nsqd_stats_topic_channel.json")), info=(200, sample("nsqd_info.json")))
    stats = await cluster.stats(nsqd.address, "sample_topic", "sample_channel", include_clients=True)
    assert stats["topics"][0]["channels"][0]["message_count"] == 7
    assert (await cluster.stats(nsqd.address))["version"] == "1.3.0"
    assert (await cluster.info(nsqd.address))["http_port"] == 14151
    queries = [dict(request.query) for request in nsqd.requests]
    assert queries == [
        {"format": "json", "topic": "sample_topic", "channel": "sample_channel", "include_clients": "true"},
        {"format": "json", "include_clients": "false"}, {}]


async def test_nsqd_peeks(hosts: Hosts, cluster: ClusterInfo) -> None:
    message = {"id": "0c1a2b3c4d5e6f70", "timestamp": 1_700_000_000_000_000_000, "attempts": 0, "body": "aGk="}
    nsqd = await hosts.start(channel_peek=(200, json.dumps({"messages": [message]})),
                             topic_peek=(200, '{"messages": []}'))
    assert await cluster.peek(nsqd.address, "t", "c", 5) == [message]
    assert await cluster.peek(nsqd.address, "t") == []
    assert [dict(request.query) for request in nsqd.requests] == [{"topic": "t", "channel": "c", "n": "5"},
                                                                  {"topic": "t", "n": "10"}]
    for wrong in ('{"messages": null}', '{"messages": [{"id": "x", "body": "", "timestamp": "1", "attempts": 0}]}'):
        nsqd.answers["/topic/peek"] = (200, wrong)
        with pytest.raises(ClusterInfoError, match="messages are not objects with id, timestamp"):
            await cluster.peek(nsqd.address, "t")
    nsq = await hosts.start()  # NSQ's own nsqd has no such route
    with pytest.raises(ClusterInfoError) as raised:
        await cluster.peek(nsq.address, "t", "c")
    assert raised.value.status == 404


async def test_nsqd_dead_letters_peeked_and_replayed(hosts: Hosts, cluster: ClusterInfo) -> None:
    nsqd = await hosts.start(channel_peek=(200, '{"messages": []}'), channel_replay=(200, '{"replayed":3}'))
    assert await cluster.peek(nsqd.address, "t", "c", 5, queue="dead") == []
    assert await cluster.replay(nsqd.address, "t", "c") == 3
    assert [(request.method, dict(request.query)) for request in nsqd.requests] == [
        ("GET", {"topic": "t", "channel": "c", "n": "5", "queue": "dead"}), ("POST", {"topic": "t", "channel": "c"})]
    for wrong, reason in (('{"replayed":"3"}', "replayed is not a number"), ("[]", "not a JSON object")):
        nsqd.answers["/channel/replay"] = (200, wrong)
        with pytest.raises(ClusterInfoError, match=rf"^POST http://.*/channel/replay\?topic=t&channel=c: {reason}"):
            await cluster.replay(nsqd.address, "t", "c")


async def test_every_request_asks_for_v1_answers_on_one_session(hosts: Hosts, cluster: ClusterInfo) -> None:
    lookupd = await hosts.start(topics=(200, '{"topics": []}'), topic_create=(200, ""))
    await cluster.topics(lookupd.address)
    await cluster.post(lookupd.address, "/topic/create", topic="t")
    await cluster.topics(lookupd.address)
    assert [request.method for request in lookupd.requests] == ["GET", "POST", "GET"]
    assert {request.headers["Accept"] for request in lookupd.requests} == {"application/vnd.nsq; version=1.0"}
    assert {request.headers["User-Agent"] for request in lookupd.requests} == {"tester/1.0"}
    assert lookupd.requests[1].query_string == "topic=t"
    assert len(set(lookupd.peers)) == 1, "one kept-alive connection"


async def test_addresses_may_be_urls(hosts: Hosts, cluster: ClusterInfo) -> None:
    lookupd = await hosts.start(topics=(200, '{"topics": ["t"]}'))
    assert await cluster.topics(f"http://{lookupd.address}/") == ["t"]


def test_producer_addresses_in_ipv6() -> None:
    producer = {"broadcast_address": "::1", "tcp_port": 4150, "http_port": 4151}
    assert (tcp_address(producer), http_address(producer)) == ("[::1]:4150", "[::1]:4151")


# --- failures ------------------------------------------------------------------------------------------------------

async def test_an_unknown_topic_is_a_404(hosts: Hosts, cluster: ClusterInfo) -> None:
    lookupd = await hosts.start(lookup=(404, sample("lookupd_lookup_missing.json")))
    with pytest.raises(ClusterInfoError) as raised:
        await cluster.producers(lookupd.address, "nope")
    url = f"http://{lookupd.address}/lookup?topic=nope"
    assert (raised.value.status, raised.value.url) == (404, url)
    assert str(raised.value) == f'{url}: got response 404 Not Found "{{\\"message\\":\\"TOPIC_NOT_FOUND\\"}}"'


async def test_a_failed_action_names_its_method(hosts: Hosts, cluster: ClusterInfo) -> None:
    nsqd = await hosts.start(topic_pause=(500, '{"message":"INTERNAL_ERROR"}'))
    with pytest.raises(ClusterInfoError, match=r"^POST http://.*/topic/pause\?topic=t: got response 500 "):
        await cluster.post(nsqd.address, "/topic/pause", topic="t")


async def test_a_host_that_is_down_or_hangs(hosts: Hosts) -> None:
    async with ClusterInfo.open(connect_timeout=0.5, request_timeout=0.2) as cluster:
        with pytest.raises(ClusterInfoError) as refused:
            await cluster.topics(closed_address())
        assert refused.value.status is None
        hung = await hosts.start()
        hung.hang.add("/stats")
        with pytest.raises(ClusterInfoError, match=r"/stats\?format=json&include_clients=false: timed out$"):
            await cluster.stats(hung.address)


@pytest.mark.parametrize(("read", "body", "reason"), [
    ("topics", "not json", "invalid JSON"),
    ("topics", "[1, 2]", "not a JSON object"),
    ("topics", '{"topics": "t"}', "topics is not a list of strings"),
    ("topics", '{"topics": [1]}', "topics is not a list of strings"),
    ("nodes", '{"producers": [{"broadcast_address": "a", "tcp_port": 1}]}', "producers are not objects"),
    ("nodes", '{"producers": [{"broadcast_address": "a", "tcp_port": "1", "http_port": 2}]}', "producers are not"),
    ("nodes", '{"producers": {"a": 1}}', "producers are not objects"),
])
async def test_answers_of_the_wrong_shape(hosts: Hosts, cluster: ClusterInfo, read: str, body: str,
                                          reason: str) -> None:
    host = await hosts.start(**{read: (200, body)})
    with pytest.raises(ClusterInfoError, match=reason):
        await getattr(cluster, read)(host.address)


async def test_gather_answers_keeps_the_order_and_the_errors(hosts: Hosts, cluster: ClusterInfo) -> None:
    one = await hosts.start(topics=(200, '{"topics": ["a"]}'))
    two = await hosts.start(topics=(200, '{"topics": ["b"]}'))
    down = closed_address()
    answers = await gather_answers(cluster.topics(address) for address in (one.address, down, two.address))
    assert answers[0] == ["a"] and answers[2] == ["b"]
    assert isinstance(answers[1], ClusterInfoError) and down in str(answers[1])

    async def broken() -> list[str]:
        raise RuntimeError("a bug, not a host")

    with pytest.raises(RuntimeError):
        await gather_answers([cluster.topics(one.address), broken()])


# --- sessions ------------------------------------------------------------------------------------------------------

async def test_a_given_session_is_used_and_left_open(hosts: Hosts) -> None:
    lookupd = await hosts.start(topics=(200, '{"topics": []}'))
    async with aiohttp.ClientSession(headers={"User-Agent": "caller"}) as session:
        async with ClusterInfo(session) as cluster:
            await cluster.topics(lookupd.address)
        assert not session.closed
    assert lookupd.requests[0].headers["User-Agent"] == "caller"


async def test_an_own_session_is_closed() -> None:
    cluster = ClusterInfo.open(connect_timeout=1.0, request_timeout=1.0)
    await cluster.close()
    with pytest.raises(RuntimeError, match="Session is closed"):
        await cluster.topics("127.0.0.1:1")


# --- the client library's discovery --------------------------------------------------------------------------------

async def test_client_discovery(hosts: Hosts, caplog: pytest.LogCaptureFixture) -> None:
    lookupd = await hosts.start(lookup=(200, sample("lookupd_lookup.json")), nodes=(200, sample("lookupd_nodes.json")))
    missing = await hosts.start(lookup=(404, sample("lookupd_lookup_missing.json")), nodes=(500, "boom"))
    assert await lookup_topic(lookupd.address, "t", 1.0) == ["127.0.0.1:14150", "127.0.0.1:14250"]
    assert await lookup_nodes(lookupd.address, 1.0) == ["127.0.0.1:14150", "127.0.0.1:14250"]
    with caplog.at_level(logging.ERROR, "nsq.client"):
        assert await lookup_topic(missing.address, "t", 1.0) == []  # not published yet: no nsqd
        assert not caplog.records
        assert await lookup_nodes(missing.address, 1.0) is None
        assert await lookup_topic(closed_address(), "t", 1.0) is None
    assert len(caplog.records) == 2
    assert caplog.records[0].getMessage().endswith('/nodes: got response 500 Internal Server Error "boom"')
