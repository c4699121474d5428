"""The HTTP server of nsqd and lookupd refusing what a browser sends for another site's page, sans I/O: the
requests' bytes are fed to one connection (whole, then a byte at a time) and its answers read from what it wrote."""

from __future__ import annotations

import asyncio
import logging

import pytest

from shared.http_auth import OPEN
from shared.http_router import NSQ_V1, Request, Response, Router
from shared.http_server import HTTPService
from tests.unit.test_shared_http_server import answers

CURL = "Host: 127.0.0.1:4151\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n"
REFUSED = (403, b'{"message":"CROSS_SITE_REQUEST"}')
FRAME_DENY = {"Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY"}


class Transport(asyncio.Transport):
    """Keeps what the connection writes."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class Server:
    """A router whose handlers record what they served."""

    def __init__(self, allow_cross_site: bool = False) -> None:
        self.served: list[str] = []
        router = Router()
        router.add("POST", "/pub", self._record, OPEN, lambda: 100)
        router.add("POST", "/topic/delete", self._record, OPEN)
        router.add("PUT", "/config/:opt", self._record, OPEN, lambda: 100)
        router.add("GET", "/stats", self._record, OPEN)
        self.service = HTTPService(router, logging.getLogger("test.http"), allow_cross_site=allow_cross_site)

    def _record(self, request: Request) -> Response:
        self.served.append(f"{request.method} {request.path}")
        return Response(request.body or b"OK", headers=NSQ_V1)

    def exchange(self, data: bytes, byte_by_byte: bool = False) -> list[tuple[int, dict[str, str], bytes]]:
        transport = Transport()
        connection = self.service()
        connection.connection_made(transport)
        for piece in ([data[index:index + 1] for index in range(len(data))] if byte_by_byte else [data]):
            connection.data_received(piece)
        return answers(transport.written)


def request(method: str, path: str, headers: str = "", body: bytes = b"") -> bytes:
    return f"{method} {path} HTTP/1.1\r\n{CURL}{headers}Content-Length: {len(body)}\r\n\r\n".encode() + body


ATTACKS = [
    request("POST", "/topic/delete?topic=orders", "Origin: http://127.0.0.2:39999\r\n"),
    request("POST", "/topic/delete?topic=orders", "Sec-Fetch-Site: cross-site\r\n"),
    request("POST", "/pub?topic=orders", "Origin: http://127.0.0.2:39999\r\nSec-Fetch-Site: cross-site\r\n", b"x"),
    request("POST", "/pub?topic=orders", "sec-fetch-site: same-site\r\n", b"x"),
    request("POST", "/pub?topic=orders", "ORIGIN: null\r\n", b"x"),
    request("PUT", "/config/log_level", "Origin: http://127.0.0.2:39999\r\n", b"debug"),
    request("POST", "/nope", "Sec-Fetch-Site: cross-site\r\n"),
]


@pytest.mark.parametrize("byte_by_byte", [False, True], ids=["whole", "byte-by-byte"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_cross_site_requests_are_refused_before_their_handler_runs(attack: bytes, byte_by_byte: bool) -> None:
    server = Server()
    ((status, headers, body),) = server.exchange(attack, byte_by_byte)
    assert (status, body) == REFUSED
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert server.served == []


def test_the_refusal_is_logged_once_naming_method_path_and_source(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="test.http"):
        Server().exchange(request("POST", "/topic/delete%0Afake?topic=orders", "Origin: http://127.0.0.2:39999\r\n"))
    (line,) = caplog.messages
    assert 'POST "/topic/delete\\nfake" from "http://127.0.0.2:39999"' in line  # quoted: one line, whatever the path


@pytest.mark.parametrize("headers", [
    "",  # NSQ's clients, curl
    "Sec-Fetch-Site: same-origin\r\nOrigin: http://127.0.0.1:4151\r\n",
    "Sec-Fetch-Site: none\r\n",  # typed in the address bar
    "Origin: http://127.0.0.1:4151\r\n",  # an older browser, on nsqd's own origin
])
def test_requests_not_sent_for_another_site_are_served(headers: str) -> None:
    server = Server()
    data = request("POST", "/pub?topic=orders", headers, b"hello") + request("POST", "/topic/delete", headers)
    assert [(status, body) for status, _, body in server.exchange(data)] == [(200, b"hello"), (200, b"OK")]
    assert server.served == ["POST /pub", "POST /topic/delete"]


def test_a_refused_request_leaves_the_connection_serving_the_next() -> None:
    server = Server()
    data = request("POST", "/pub?topic=orders", "Sec-Fetch-Site: cross-site\r\n", b"evil") + \
        request("POST", "/pub?topic=orders", body=b"good")
    assert [(status, body) for status, _, body in server.exchange(data)] == [REFUSED, (200, b"good")]


def test_reads_are_served_and_forbid_framing() -> None:
    server = Server()
    ((status, headers, _),) = server.exchange(request("GET", "/stats", "Sec-Fetch-Site: cross-site\r\n"))
    assert status == 200 and FRAME_DENY.items() <= headers.items()
    # errors and redirects too: anything a frame could show
    for path in ("/nope", "/stats/"):
        ((_, headers, _),) = server.exchange(request("GET", path))
        assert FRAME_DENY.items() <= headers.items()


def test_answers_to_posts_are_what_they_were() -> None:
    data = request("POST", "/pub?topic=orders", body=b"hello")
    ((status, headers, body),) = Server().exchange(data)
    ((_, allowing_headers, _),) = Server(allow_cross_site=True).exchange(data)
    assert (status, body) == (200, b"hello")
    assert list(headers) == list(allowing_headers) == ["X-Nsq-Content-Type", "Date", "Content-Length", "Content-Type"]
    del headers["Date"], allowing_headers["Date"]  # the two may be a second apart
    assert headers == allowing_headers


def test_allowing_cross_site_is_nsqs_behaviour() -> None:
    server = Server(allow_cross_site=True)
    refused_otherwise = [attack for attack in ATTACKS if b"/nope" not in attack]
    assert [status for status, _, _ in server.exchange(b"".join(refused_otherwise))] == [200] * 6
    ((_, headers, _),) = server.exchange(request("GET", "/stats"))
    assert not FRAME_DENY.keys() & headers.keys()
