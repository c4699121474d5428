"""nsq_to_nsq as a real program between real nsqd: what reaches the destination topics, the modes and the JSON
filter, and that a message is finished only once a destination nsqd took it, whether that nsqd is down for a while
or the program is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from harness.processes import ROOT, NSQDProcess, ToolProcess, finished, start_nsqd, wait_for

CHANNEL = "nsq_to_nsq"
KEEP = "kept"  # the destination channel the tests read back
QUICK_RETRIES = ("--consumer-opt=default_requeue_delay,50ms", "--consumer-opt=backoff_multiplier,50ms",
                 "--consumer-opt=max_backoff_duration,200ms")


def keep(nsqd: NSQDProcess, topic: str) -> None:
    """Gives the destination topic a channel, so that what arrives stays there to be read back."""
    assert nsqd.http("POST", f"/topic/create?topic={topic}")[0] == 200
    assert nsqd.http("POST", f"/channel/create?topic={topic}&channel={KEEP}")[0] == 200


def arrived(nsqd: NSQDProcess, topic: str, count: int) -> list[bytes]:
    """The ``count`` messages on the destination's channel, read with nsq_tail."""
    wait_for(lambda: nsqd.channel_stats(topic, KEEP).get("depth", 0) >= count, 20, f"{count} on {topic}")
    result = subprocess.run([sys.executable, "-m", "apps.nsq_tail", f"--topic={topic}", f"--channel={KEEP}",
                             f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", f"-n={count}"],
                            cwd=ROOT, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.split(b"\n")[:-1]


def all_finished(nsqd: NSQDProcess, topic: str, count: int) -> None:
    def done() -> bool:
        stats = nsqd.channel_stats(topic, CHANNEL)
        return finished(stats) == count and stats["depth"] == stats["in_flight_count"] == 0

    wait_for(done, 20, f"{count} finished on {topic}")


def relay(tools: Callable[..., ToolProcess], source: NSQDProcess, *args: str) -> ToolProcess:
    return tools("apps.nsq_to_nsq", f"--nsqd-tcp-address=127.0.0.1:{source.tcp_port}", *args)


def to(nsqd: NSQDProcess) -> str:
    return f"--destination-nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}"


def numbered(count: int, prefix: str = "message") -> list[bytes]:
    return [f"{prefix} {number}".encode() for number in range(count)]


def test_every_topic_is_copied_to_the_same_name_on_the_destination(
        nsqd_factory: Callable[..., NSQDProcess], tools: Callable[..., ToolProcess]) -> None:
    source, destination = nsqd_factory(), nsqd_factory()
    for topic in ("clicks", "views"):
        keep(destination, topic)
    tool = relay(tools, source, "--topic=clicks", "--topic=views", to(destination))
    clicks, views = [*numbered(30, "click"), b"\x00\xff binary"], numbered(20, "view")
    source.publish("clicks", *clicks)
    source.publish("views", *views)
    all_finished(source, "clicks", len(clicks))
    all_finished(source, "views", len(views))
    assert sorted(arrived(destination, "clicks", len(clicks))) == sorted(clicks)
    assert sorted(arrived(destination, "views", len(views))) == sorted(views)
    assert tool.stop() == 0
    assert "Traceback" not in tool.log


def test_destination_topic_and_round_robin_over_two_nsqd(nsqd_factory: Callable[..., NSQDProcess],
                                                        tools: Callable[..., ToolProcess]) -> None:
    source, first, second = nsqd_factory(), nsqd_factory(), nsqd_factory()
    for destination in (first, second):
        keep(destination, "merged")
    relay(tools, source, "--topic=a", "--topic=b", "--destination-topic=merged", to(first), to(second),
          "--mode=round-robin")
    bodies = numbered(20, "a") + numbered(20, "b")
    source.publish("a", *bodies[:20])
    source.publish("b", *bodies[20:])
    all_finished(source, "a", 20)
    all_finished(source, "b", 20)
    got_first, got_second = arrived(first, "merged", 20), arrived(second, "merged", 20)
    assert sorted(got_first + got_second) == sorted(bodies)


def test_multicast_copies_each_message_to_every_destination(nsqd_factory: Callable[..., NSQDProcess],
                                                            tools: Callable[..., ToolProcess]) -> None:
    source, first, second = nsqd_factory(), nsqd_factory(), nsqd_factory()
    for destination in (first, second):
        keep(destination, "t")
    relay(tools, source, "--topic=t", to(first), to(second), "--mode=multicast")
    bodies = numbered(25)
    source.publish("t", *bodies)
    all_finished(source, "t", len(bodies))
    assert sorted(arrived(first, "t", 25)) == sorted(arrived(second, "t", 25)) == sorted(bodies)


def test_json_filter_passes_only_matching_objects_with_the_whitelisted_fields(
        nsqd_factory: Callable[..., NSQDProcess], tools: Callable[..., ToolProcess]) -> None:
    source, destination = nsqd_factory(), nsqd_factory()
    keep(destination, "events")
    tool = relay(tools, source, "--topic=events", to(destination), "--require-json-field=kind",
                 "--require-json-value=click", "--whitelist-json-field=id", "--whitelist-json-field=at")
    bodies = [b'{"kind": "click", "id": 1, "at": 10, "secret": "s"}', b'{"kind": "view", "id": 2}',
              b'{"id": 3}', b"not json", b'{"kind": "click", "id": 4.0}', b"[1, 2]"]
    source.publish("events", *bodies)
    all_finished(source, "events", len(bodies))  # the ones that did not pass are finished too: dropped
    assert sorted(arrived(destination, "events", 2)) == [b'{"at":10,"id":1}', b'{"id":4}']
    assert destination.channel_stats("events", KEEP)["message_count"] == 2
    assert "Unable to decode json: b'not json'" in tool.log


def test_a_destination_down_for_a_while_loses_nothing(nsqd_factory: Callable[..., NSQDProcess],
                                                      tools: Callable[..., ToolProcess], tmp_path: Path) -> None:
    source = nsqd_factory()
    data = tmp_path / "destination"
    data.mkdir()
    destination = start_nsqd(data_path=data)
    port = destination.tcp_port
    keep(destination, "t")
    destination.stop()
    tool = relay(tools, source, "--topic=t", to(destination), *QUICK_RETRIES)
    bodies = numbered(20)
    source.publish("t", *bodies)
    wait_for(lambda: source.channel_stats("t", CHANNEL).get("requeue_count", 0) >= 20, 20, "refusals requeued")
    assert finished(source.channel_stats("t", CHANNEL)) == 0
    assert "Connect call failed" in tool.log or "Connection refused" in tool.log
    back = start_nsqd(f"--tcp-address=127.0.0.1:{port}", data_path=data)
    try:
        all_finished(source, "t", len(bodies))
        assert sorted(set(arrived(back, "t", len(bodies)))) == sorted(bodies)
    finally:
        back.stop()


def test_sigkill_mid_stream_loses_nothing(nsqd_factory: Callable[..., NSQDProcess],
                                          tools: Callable[..., ToolProcess]) -> None:
    source, destination = nsqd_factory("--msg-timeout=1s"), nsqd_factory()
    keep(destination, "t")
    bodies = numbered(20_000)
    for start in range(0, len(bodies), 1000):
        assert source.http("POST", "/mpub?topic=t", b"\n".join(bodies[start:start + 1000]))[0] == 200
    killed = relay(tools, source, "--topic=t", to(destination))
    wait_for(lambda: finished(source.channel_stats("t", CHANNEL)) >= 2000, 20, "some relayed")
    killed.stop(signal.SIGKILL)
    assert finished(source.channel_stats("t", CHANNEL)) < len(bodies)  # killed mid-stream
    relay(tools, source, "--topic=t", to(destination))
    all_finished(source, "t", len(bodies))
    copied = destination.channel_stats("t", KEEP)["depth"]
    assert copied >= len(bodies)  # at least once: what was in flight when killed may have gone twice
    assert set(arrived(destination, "t", copied)) == set(bodies)


def test_bad_flags_exit_2_with_the_reason(tools: Callable[..., ToolProcess]) -> None:
    tool = tools("apps.nsq_to_nsq", "--topic=t", "--nsqd-tcp-address=127.0.0.1:4150")
    assert tool.process.wait(20) == 2
    assert "nsq_to_nsq: --destination-nsqd-tcp-address required" in tool.log
