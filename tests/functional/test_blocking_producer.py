"""``BlockingProducer`` against a real nsqd, from plain threads with no event loop of their own: many threads share
one, every message arrives once, nsqd's refusals and a dead address are raised in the calling thread, closing
waits for what is under way, lookupd finds the nsqd (and the other one when it goes away), a forked child is told
to make its own, and the README's Flask example works as written."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import textwrap
import threading
from collections.abc import Callable

import pytest

from harness.processes import ROOT, NSQDProcess, free_port, start_lookupd, wait_for
from harness.wire import WireClient
from nsqclient import BlockingProducer, ConnectError, ConnectionClosed, NSQError, NSQProtocolError, ProducerClosed

THREADS, EACH = 8, 250


def message_count(nsqd: NSQDProcess, topic: str) -> int:
    stats = json.loads(nsqd.http("GET", f"/stats?format=json&topic={topic}")[2])
    return sum(t["message_count"] for t in stats["topics"] or [])


def consume(nsqd: NSQDProcess, topic: str, channel: str, count: int) -> list[bytes]:
    """The bodies of ``count`` messages a consumer of ``channel`` gets, in the order it gets them (each finished)."""
    async def read() -> list[bytes]:
        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe(topic, channel, rdy=count)
        messages = await consumer.read_messages(count)
        for message in messages:
            await consumer.command(b"FIN", message.id)
        await consumer.expect_nothing(0.3)
        await consumer.close()
        return [message.body for message in messages]
    return asyncio.run(read())


def test_threads_share_one_producer_and_every_message_arrives_once(nsqd: NSQDProcess) -> None:
    assert nsqd.http("POST", "/topic/create?topic=orders")[0] == 200
    assert nsqd.http("POST", "/channel/create?topic=orders&channel=audit")[0] == 200
    failures: list[BaseException] = []

    with BlockingProducer(nsqd.tcp_address_text) as producer:
        def publish_many(thread: int) -> None:
            try:
                for n in range(EACH):
                    producer.publish("orders", b"%d-%d" % (thread, n))
                producer.multi_publish("orders", [b"%d-batch-%d" % (thread, n) for n in range(10)])
            except BaseException as error:  # reported below, in the test's thread
                failures.append(error)

        threads = [threading.Thread(target=publish_many, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        producer.deferred_publish("orders", b"later", delay=60.0)
    assert failures == []
    assert message_count(nsqd, "orders") == THREADS * (EACH + 10) + 1
    queued = consume(nsqd, "orders", "audit", THREADS * (EACH + 10))
    expected = {b"%d-%d" % (t, n) for t in range(THREADS) for n in range(EACH)}
    expected |= {b"%d-batch-%d" % (t, n) for t in range(THREADS) for n in range(10)}
    assert sorted(queued) == sorted(expected)  # each once; the deferred one is not queued yet
    # each thread's own publishes arrive in the order it made them
    first_thread = [body for body in queued if body.startswith(b"0-") and b"batch" not in body]
    assert first_thread == [b"0-%d" % n for n in range(EACH)]


def test_nsqds_refusals_and_a_dead_address_are_raised_in_the_calling_thread(nsqd: NSQDProcess) -> None:
    with BlockingProducer(nsqd.tcp_address_text) as producer:
        with pytest.raises(NSQProtocolError) as refused:
            producer.publish("not!a_topic", b"x")
        assert refused.value.code == "E_BAD_TOPIC"
        producer.publish("fine", b"x")  # the connection nsqd closed is opened again
    assert message_count(nsqd, "fine") == 1

    with BlockingProducer(f"127.0.0.1:{free_port()}", connect_timeout=1.0) as nowhere:
        with pytest.raises(ConnectError):
            nowhere.publish("t", b"x")
    with pytest.raises(ValueError, match="give an nsqd TCP address or lookupd_http_addresses"):
        BlockingProducer()


def test_close_waits_for_publishes_under_way_and_refuses_later_ones(nsqd: NSQDProcess) -> None:
    producer = BlockingProducer(nsqd.tcp_address_text)
    producer.connect()
    results: list[str] = []

    def publish() -> None:
        producer.multi_publish("closing", [b"x" * 1000] * 500)
        results.append("published")

    nsqd.process.send_signal(signal.SIGSTOP)  # the publishes wait for their answers until it runs again
    try:
        threads = [threading.Thread(target=publish) for _ in range(4)]
        for thread in threads:
            thread.start()
        wait_for(lambda: producer._calls == 4, 5, "the four publishes under way")  # noqa: SLF001 (close waits on it)
        closing, closing_too = threading.Thread(target=producer.close), threading.Thread(target=producer.close)
        closing.start()
        closing_too.start()
        closing.join(0.5)
        # close waits for them, and a second close for the first
        assert closing.is_alive() and closing_too.is_alive() and results == []
    finally:
        nsqd.process.send_signal(signal.SIGCONT)
    closing.join(10)
    closing_too.join(10)
    for thread in threads:
        thread.join()
    assert not closing.is_alive() and not closing_too.is_alive()
    assert results == ["published"] * 4 and message_count(nsqd, "closing") == 2000
    with pytest.raises(ProducerClosed):
        producer.publish("closing", b"late")
    producer.close()  # again: nothing
    assert not any(t.name == "nsq-blocking-producer" for t in threading.enumerate())


def test_lookupd_finds_the_nsqd_to_publish_to(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    lookupd = start_lookupd()
    try:
        nsqd = nsqd_factory(f"--lookupd-tcp-address={lookupd.tcp_address_text}")
        assert nsqd.http("POST", "/topic/create?topic=found")[0] == 200
        wait_for(lambda: b"found" in lookupd.http("GET", "/topics")[2], 10, "the topic registered")
        with BlockingProducer(lookupd_http_addresses=[lookupd.http_address_text]) as producer:
            producer.publish("found", b"x")
            assert producer.address == nsqd.tcp_address_text
        assert message_count(nsqd, "found") == 1
    finally:
        lookupd.stop()


def test_threads_publish_on_through_lookupd_when_their_nsqd_goes_away(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    """Two nsqd on one host behind lookupd: the producer publishes to one; when it stops, a publish raises in the
    calling thread (the application publishes again: at least once), and the next connects to the other node."""
    lookupd = start_lookupd()
    try:
        nodes = [nsqd_factory(f"--lookupd-tcp-address={lookupd.tcp_address_text}") for _ in range(2)]
        for node in nodes:
            assert node.http("POST", "/topic/create?topic=clicks")[0] == 200
        wait_for(lambda: len(json.loads(lookupd.http("GET", "/lookup?topic=clicks")[2])["producers"]) == 2, 10,
                 "both nodes registered")
        published: list[bytes] = []
        errors: list[BaseException] = []
        first_half = threading.Barrier(THREADS + 1)

        with BlockingProducer(lookupd_http_addresses=[lookupd.http_address_text], connect_timeout=1.0) as producer:
            def publish_many(thread: int) -> None:
                for n in range(2 * EACH):
                    if n == EACH:
                        first_half.wait()  # the main thread stops the node in between
                        first_half.wait()
                    body = b"%d-%d" % (thread, n)
                    for _attempt in range(5):
                        try:
                            producer.publish("clicks", body)
                            published.append(body)
                            break
                        except NSQError as error:
                            errors.append(error)
                    else:
                        raise AssertionError(f"{body!r} not published: {errors[-1]!r}")

            threads = [threading.Thread(target=publish_many, args=(t,)) for t in range(THREADS)]
            for thread in threads:
                thread.start()
            first_half.wait()
            first = next(node for node in nodes if node.tcp_address_text == producer.address)
            first.stop()
            first_half.wait()
            for thread in threads:
                thread.join()
            second = next(node for node in nodes if node is not first)
            assert producer.address == second.tcp_address_text
        assert len(published) == THREADS * 2 * EACH
        assert message_count(second, "clicks") == THREADS * EACH  # the second half, each once
        assert all(isinstance(error, ConnectionClosed) for error in errors)
    finally:
        lookupd.stop()


def test_a_forked_child_is_told_to_make_its_own(nsqd: NSQDProcess) -> None:
    with BlockingProducer(nsqd.tcp_address_text) as producer:
        producer.publish("forked", b"parent")
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:  # the child: report what a publish does, and leave without running the test's teardown
            try:
                producer.publish("forked", b"child")
                outcome = b"published"
            except RuntimeError as error:
                outcome = str(error).encode()
            os.write(writer, outcome)
            os._exit(0)
        os.close(writer)
        outcome = os.read(reader, 1000)
        os.close(reader)
        os.waitpid(child, 0)
        assert b"made in the parent process before a fork" in outcome
        producer.publish("forked", b"parent again")
    assert message_count(nsqd, "forked") == 2


def readme_flask_example() -> str:
    """The README's Flask example, as written."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("In Flask:")
    block = re.search(r"```python\n(.*?)```", readme[start:], re.DOTALL)
    assert block is not None
    return textwrap.dedent(block.group(1))


def test_the_readmes_flask_example_publishes_from_its_views(nsqd: NSQDProcess) -> None:
    source = readme_flask_example().replace("127.0.0.1:4150", nsqd.tcp_address_text)
    example: dict[str, object] = {"__name__": "orders_app"}
    exec(compile(source, "README.md (Flask example)", "exec"), example)  # noqa: S102 (the README's own code)
    app, producer = example["app"], example["producer"]
    assert isinstance(producer, BlockingProducer)
    statuses: list[int] = []

    def post_orders() -> None:
        client = app.test_client()  # type: ignore[attr-defined]
        for n in range(10):
            statuses.append(client.post("/orders", data=b"order %d" % n).status_code)

    try:
        threads = [threading.Thread(target=post_orders) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert statuses == [202] * 40 and message_count(nsqd, "orders") == 40
        nsqd.stop()
        response = app.test_client().post("/orders", data=b"lost?")  # type: ignore[attr-defined]
        assert response.status_code == 503 and "error" in response.get_json()
    finally:
        producer.close()
