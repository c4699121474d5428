"""nsq_to_http as a real program, from a real nsqd to real HTTP servers on loopback: what each request carries,
the modes, and that a message is finished only once an endpoint took it, whether endpoints fail, are slower than
the timeout, come back, or the program is stopped or killed."""

from __future__ import annotations

import http.server
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from harness.processes import NSQDProcess, ToolProcess, finished, wait_for

TOPIC = "events"
CHANNEL = "nsq_to_http"
# quick retries, so that a test sees the requeued messages again within seconds (NSQ's delay is 90 s an attempt)
QUICK_RETRIES = ("--consumer-opt=default_requeue_delay,50ms", "--consumer-opt=backoff_multiplier,50ms",
                 "--consumer-opt=max_backoff_duration,200ms")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


class Endpoint:
    """A real HTTP server on a thread: answers ``status`` after ``delay`` seconds, and keeps every request."""

    def __init__(self) -> None:
        self.status, self.delay = 200, 0.0
        self.requests: list[Request] = []
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the program's connection pool expects

            def do_POST(self) -> None:
                self._answer(self.rfile.read(int(self.headers.get("Content-Length", 0))))

            def do_GET(self) -> None:
                self._answer(b"")

            def _answer(self, body: bytes) -> None:
                status, delay = endpoint.status, endpoint.delay
                time.sleep(delay)
                endpoint.requests.append(Request(self.command, self.path, dict(self.headers), body, status))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up before the answer: nothing to report

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str = "/in") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def taken(self) -> list[bytes]:
        """The bodies it answered with a 2xx."""
        return [request.body for request in list(self.requests) if 200 <= request.status < 300]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def endpoints() -> Iterator[Callable[[], Endpoint]]:
    started: list[Endpoint] = []

    def start() -> Endpoint:
        started.append(Endpoint())
        return started[-1]

    yield start
    for endpoint in started:
        endpoint.close()


@pytest.fixture
def relay(tools: Callable[..., ToolProcess], nsqd: NSQDProcess) -> Callable[..., ToolProcess]:
    """Starts nsq_to_http on ``nsqd``'s TOPIC with the given flags."""
    return lambda *args: tools("apps.nsq_to_http", f"--topic={TOPIC}",
                               f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", *args)


def numbered(count: int, prefix: str = "message") -> list[bytes]:
    return [f"{prefix} {number}".encode() for number in range(count)]


def all_finished(nsqd: NSQDProcess, count: int, timeout: float = 20.0, channel: str = CHANNEL) -> dict[str, Any]:
    """Waits until the channel finished ``count`` messages and holds none; its stats."""
    def done() -> dict[str, Any]:
        stats = nsqd.channel_stats(TOPIC, channel)
        return stats if finished(stats) == count and stats["depth"] == stats["in_flight_count"] == 0 else {}

    return wait_for(done, timeout, f"{count} messages finished")


def test_each_message_is_posted_with_the_headers_asked_for_then_finished(
        nsqd: NSQDProcess, relay: Callable[..., ToolProcess], endpoints: Callable[[], Endpoint]) -> None:
    endpoint = endpoints()
    bodies = [*numbered(50), b"\x00\xff binary\r\n", "caf\u00e9 \u2603".encode(), b"x" * 100_000]
    tool = relay(f"--post={endpoint.url()}", "--content-type=application/x-ndjson", "--header=X-Tenant: blue",
                 "--header=Authorization: Bearer t0k3n")
    nsqd.publish(TOPIC, *bodies)
    all_finished(nsqd, len(bodies))
    assert sorted(endpoint.taken()) == sorted(bodies)
    request = endpoint.requests[0]
    assert (request.method, request.path) == ("POST", "/in")
    assert request.headers["Content-Type"] == "application/x-ndjson"
    assert request.headers["X-Tenant"] == "blue" and request.headers["Authorization"] == "Bearer t0k3n"
    assert request.headers["User-Agent"] == "nsq_to_http v1.3.0"
    assert tool.stop() == 0
    assert "Traceback" not in tool.log


def test_get_puts_the_escaped_message_in_the_url(nsqd: NSQDProcess, relay: Callable[..., ToolProcess],
                                                 endpoints: Callable[[], Endpoint]) -> None:
    endpoint = endpoints()
    bodies = [b"plain", b"a b&c=d/e?f#g%h+i", "caf\u00e9".encode()]
    tool = relay(f"--get={endpoint.url('/track?source=nsq&data=%s')}")
    nsqd.publish(TOPIC, *bodies)
    all_finished(nsqd, len(bodies))
    queries = [parse_qs(urlsplit(request.path).query) for request in endpoint.requests]
    assert all(query["source"] == ["nsq"] for query in queries)
    assert sorted(query["data"][0].encode() for query in queries) == sorted(bodies)
    assert {request.method for request in endpoint.requests} == {"GET"}
    assert tool.stop() == 0


def test_an_endpoint_that_fails_gets_every_message_again_once_it_answers(
        nsqd: NSQDProcess, relay: Callable[..., ToolProcess], endpoints: Callable[[], Endpoint]) -> None:
    endpoint = endpoints()
    endpoint.status = 503
    relay(f"--post={endpoint.url()}", *QUICK_RETRIES)
    bodies = numbered(20)
    nsqd.publish(TOPIC, *bodies)
    wait_for(lambda: len(endpoint.requests) >= 40, what="the failing endpoint tried repeatedly")
    stats = nsqd.channel_stats(TOPIC, CHANNEL)
    assert finished(stats) == 0 and stats["requeue_count"] >= 20  # none taken, none finished
    endpoint.status = 200
    all_finished(nsqd, len(bodies))
    assert sorted(set(endpoint.taken())) == sorted(bodies)


def test_a_message_is_never_given_up_on_by_default(nsqd: NSQDProcess, relay: Callable[..., ToolProcess],
                                                  endpoints: Callable[[], Endpoint]) -> None:
    endpoint = endpoints()
    endpoint.status = 500
    relay(f"--post={endpoint.url()}", "--consumer-opt=default_requeue_delay,1ms",
          "--consumer-opt=backoff_multiplier,1ms", "--consumer-opt=max_backoff_duration,5ms")
    nsqd.publish(TOPIC, b"persistent")
    wait_for(lambda: len(endpoint.requests) >= 8, what="eight attempts")  # go-nsq drops it after five
    endpoint.status = 200
    all_finished(nsqd, 1)
    assert endpoint.taken() == [b"persistent"]


def test_a_request_slower_than_the_timeout_is_requeued_and_sent_again(
        nsqd: NSQDProcess, relay: Callable[..., ToolProcess], endpoints: Callable[[], Endpoint]) -> None:
    endpoint = endpoints()
    endpoint.delay = 2.0
    tool = relay(f"--post={endpoint.url()}", "--http-client-request-timeout=300ms", *QUICK_RETRIES)
    bodies = numbered(5)
    nsqd.publish(TOPIC, *bodies)
    wait_for(lambda: nsqd.channel_stats(TOPIC, CHANNEL).get("requeue_count", 0) >= 5, what="timeouts requeued")
    assert finished(nsqd.channel_stats(TOPIC, CHANNEL)) == 0
    endpoint.delay = 0.0
    all_finished(nsqd, len(bodies))
    assert set(bodies) <= set(endpoint.taken())  # the slow answers came too late to count: at least once
    assert "TimeoutError" in tool.log


def test_an_endpoint_down_until_later_loses_nothing(nsqd: NSQDProcess, relay: Callable[..., ToolProcess],
                                                    endpoints: Callable[[], Endpoint]) -> None:
    endpoint = endpoints()
    url = endpoint.url()
    endpoint.close()  # nothing listens there: connections are refused
    tool = relay(f"--post={url}", *QUICK_RETRIES)
    bodies = numbered(10)
    nsqd.publish(TOPIC, *bodies)
    wait_for(lambda: nsqd.channel_stats(TOPIC, CHANNEL).get("requeue_count", 0) >= 20, what="refusals requeued")
    assert "Cannot connect" in tool.log
    tool.stop()
    back = endpoints()
    relay(f"--post={back.url()}", *QUICK_RETRIES)
    all_finished(nsqd, len(bodies))
    assert sorted(back.taken()) == sorted(bodies)


def test_hostpool_sends_around_a_failing_endpoint(nsqd: NSQDProcess, relay: Callable[..., ToolProcess],
                                                   endpoints: Callable[[], Endpoint]) -> None:
    failing, working = endpoints(), endpoints()
    failing.status = 500
    relay(f"--post={failing.url()}", f"--post={working.url()}", "--n=1", *QUICK_RETRIES)  # NSQ's default mode
    bodies = numbered(30)
    nsqd.publish(TOPIC, *bodies)
    all_finished(nsqd, len(bodies))
    assert sorted(working.taken()) == sorted(bodies)
    assert len(failing.requests) == 1  # out after its first failure, for 30 s


def test_round_robin_alternates_the_endpoints(nsqd: NSQDProcess, relay: Callable[..., ToolProcess],
                                              endpoints: Callable[[], Endpoint]) -> None:
    first, second = endpoints(), endpoints()
    relay(f"--post={first.url()}", f"--post={second.url()}", "--mode=round-robin")
    bodies = numbered(40)
    nsqd.publish(TOPIC, *bodies)
    all_finished(nsqd, len(bodies))
    assert len(first.requests) == len(second.requests) == 20
    assert sorted(first.taken() + second.taken()) == sorted(bodies)


def test_multicast_finishes_a_message_once_every_endpoint_took_it(
        nsqd: NSQDProcess, relay: Callable[..., ToolProcess], endpoints: Callable[[], Endpoint]) -> None:
    first, second = endpoints(), endpoints()
    second.status = 500
    relay(f"--post={first.url()}", f"--post={second.url()}", "--mode=multicast", *QUICK_RETRIES)
    bodies = numbered(10)
    nsqd.publish(TOPIC, *bodies)
    wait_for(lambda: len(second.requests) >= 20, what="the failing endpoint tried repeatedly")
    assert finished(nsqd.channel_stats(TOPIC, CHANNEL)) == 0  # one of two took them: not enough
    second.status = 200
    all_finished(nsqd, len(bodies))
    assert set(first.taken()) == set(second.taken()) == set(bodies)


def test_sigterm_lets_the_requests_under_way_finish_and_leaves_the_rest_on_the_channel(
        nsqd: NSQDProcess, relay: Callable[..., ToolProcess], endpoints: Callable[[], Endpoint]) -> None:
    endpoint = endpoints()
    endpoint.delay = 0.5
    tool = relay(f"--post={endpoint.url()}", "--n=4", "--max-in-flight=4")
    bodies = numbered(40)
    nsqd.publish(TOPIC, *bodies)
    wait_for(lambda: len(endpoint.requests) >= 4, what="some requests answered")
    assert tool.stop(signal.SIGTERM) == 0
    stats = nsqd.channel_stats(TOPIC, CHANNEL)
    assert stats["in_flight_count"] == 0
    assert finished(stats) == len(set(endpoint.taken())) < len(bodies)  # finished: exactly what was taken
    assert finished(stats) + stats["depth"] == len(bodies)  # and the rest still there


def test_sigkill_mid_stream_loses_nothing(nsqd_factory: Callable[..., NSQDProcess], tools: Callable[..., ToolProcess],
                                         endpoints: Callable[[], Endpoint]) -> None:
    nsqd = nsqd_factory("--msg-timeout=1s")  # what the killed program held comes back within a second
    endpoint = endpoints()
    endpoint.delay = 0.2
    args = ("apps.nsq_to_http", f"--topic={TOPIC}", f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}",
            f"--post={endpoint.url()}", "--n=5")
    killed = tools(*args)
    bodies = numbered(60)
    nsqd.publish(TOPIC, *bodies)
    wait_for(lambda: len(endpoint.requests) >= 10, what="some requests answered")
    killed.stop(signal.SIGKILL)
    endpoint.delay = 0.0
    tools(*args)
    all_finished(nsqd, len(bodies))
    assert set(endpoint.taken()) == set(bodies)


def test_sample_zero_finishes_every_message_unsent(nsqd: NSQDProcess, relay: Callable[..., ToolProcess],
                                                   endpoints: Callable[[], Endpoint]) -> None:
    endpoint = endpoints()
    relay(f"--post={endpoint.url()}", "--sample=0")
    nsqd.publish(TOPIC, *numbered(10))
    all_finished(nsqd, 10)
    assert endpoint.requests == []


def test_bad_flags_exit_2_with_the_reason(tools: Callable[..., ToolProcess]) -> None:
    tool = tools("apps.nsq_to_http", "--topic=t", "--nsqd-tcp-address=127.0.0.1:4150", "--get=http://a/")
    assert tool.process.wait(20) == 2
    assert "nsq_to_http: invalid GET address - must be a printf string" in tool.log
