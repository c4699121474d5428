"""shared/http_server.py on a real loopback socket: keep-alive, pipelining, bodies and their limits,
100-continue, malformed input, and httprouter's answers. The client side is raw bytes, so what is checked is exactly
what goes over the wire."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator

import pytest

from shared.http_auth import OPEN
from shared.http_router import NSQ_V1, Request, Response, Router, json_response, parse_query
from shared.http_server import HTTPService
from shared.http_conventions import HTTPError

LIMIT = 100


def echo(request: Request) -> Response:
    if request.body is None:
        raise HTTPError(413, "MSG_TOO_BIG")
    return Response(request.body, headers=NSQ_V1)


def sized(request: Request) -> Response:
    if request.body is None:
        raise HTTPError(413, "MSG_TOO_BIG")
    return Response(str(len(request.body)).encode())


async def slow(request: Request) -> Response:
    await asyncio.sleep(0.05)
    return Response(b"slow")


def query(request: Request) -> Response:
    return json_response(repr(sorted(request.query.items())))


def crash(request: Request) -> Response:
    raise RuntimeError("boom")


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, int]]:
    router = Router()
    router.add("GET", "/ping", lambda request: Response(b"OK"), OPEN)
    router.add("POST", "/echo", echo, OPEN, lambda: LIMIT)
    router.add("POST", "/sized", sized, OPEN, lambda: LIMIT)
    router.add("GET", "/slow", slow, OPEN)
    router.add("GET", "/query", query, OPEN)
    router.add("GET", "/crash", crash, OPEN)
    router.add("GET", "/config/:opt", lambda request: Response(request.route_params["opt"].encode()), OPEN)
    service = HTTPService(router, logging.getLogger("test.http"))
    listener = await asyncio.get_running_loop().create_server(service, "127.0.0.1", 0)
    yield listener.sockets[0].getsockname()[:2]
    listener.close()
    service.close_connections()
    await listener.wait_closed()


async def exchange(address: tuple[str, int], data: bytes, until_closed: bool = False) -> bytes:
    """Sends ``data`` and returns what comes back: everything until the server closes, or the answers the requests
    in ``data`` ask for (one per request line) when ``until_closed`` is False."""
    reader, writer = await asyncio.open_connection(*address)
    writer.write(data)
    await writer.drain()
    received = b""
    expected = len(re.findall(rb"^(GET|POST|PUT|OPTIONS|HEAD|DELETE) ", data, re.MULTILINE))
    while True:
        chunk = await asyncio.wait_for(reader.read(65536), 5)
        received += chunk
        if not chunk or (not until_closed and _complete_answers(received) >= expected):
            break
    writer.close()
    return received


def _complete_answers(data: bytes) -> int:
    count = 0
    while True:
        head, separator, rest = data.partition(b"\r\n\r\n")
        if not separator:
            return count
        length = re.search(rb"Content-Length: (\d+)", head)
        size = int(length.group(1)) if length else 0
        if len(rest) < size:
            return count
        count += 1
        data = rest[size:]


def answers(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Status, headers and body of each answer in ``data``."""
    parsed = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode().split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines)
        size = int(headers.get("Content-Length", "0"))
        parsed.append((int(status_line.split()[1]), headers, rest[:size]))
        data = rest[size:]
    return parsed


def post(path: str, body: bytes, *headers: str) -> bytes:
    head = "".join(f"{header}\r\n" for header in headers)
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


async def test_keep_alive_and_go_s_headers(server: tuple[str, int]) -> None:
    data = await exchange(server, b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n" + post("/echo", b"hello"))
    (status, headers, body), (echo_status, echo_headers, echo_body) = answers(data)
    assert (status, body) == (200, b"OK")
    # Go's order (the handler's headers sorted, then Date...); text/plain is sniffed; a GET's answer forbids framing
    assert list(headers) == ["Content-Security-Policy", "X-Frame-Options", "Date", "Content-Length", "Content-Type"]
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert (echo_status, echo_body) == (200, b"hello")
    assert list(echo_headers) == ["X-Nsq-Content-Type", "Date", "Content-Length", "Content-Type"]


async def test_pipelined_requests_are_answered_in_order_behind_an_async_handler(server: tuple[str, int]) -> None:
    data = await exchange(server, b"GET /slow HTTP/1.1\r\n\r\n" + post("/echo", b"second") +
                          b"GET /ping HTTP/1.1\r\n\r\n")
    assert [body for _, _, body in answers(data)] == [b"slow", b"second", b"OK"]


async def test_requests_split_across_reads(server: tuple[str, int]) -> None:
    request = post("/echo", b"a body in pieces")
    reader, writer = await asyncio.open_connection(*server)
    for index in range(len(request)):
        writer.write(request[index:index + 1])
        await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"a body in pieces"), 5)
    writer.close()
    assert answers(answer)[0][2] == b"a body in pieces"


async def test_chunked_body(server: tuple[str, int]) -> None:
    request = (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    assert answers(await exchange(server, request))[0][2] == b"hello world"


async def test_body_at_the_limit_is_read(server: tuple[str, int]) -> None:
    assert answers(await exchange(server, post("/sized", b"x" * LIMIT)))[0][:3:2] == (200, b"100")


@pytest.mark.parametrize("request_bytes", [
    post("/sized", b"x" * (LIMIT + 1)),
    # announced within the limit by no Content-Length at all: found out while the chunks arrive
    b"POST /sized HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + b"40\r\n" + b"x" * 64 + b"\r\n" + b"40\r\n" +
    b"x" * 64 + b"\r\n0\r\n\r\n",
], ids=["content-length", "chunked"])
async def test_body_over_the_limit_is_refused_without_being_read(server: tuple[str, int],
                                                                 request_bytes: bytes) -> None:
    # the client goes on sending after the answer: the answer must still arrive whole, then the connection ends
    reader, writer = await asyncio.open_connection(*server)
    writer.write(request_bytes + b"y" * 200_000)
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    ((status, headers, body),) = answers(data)
    assert (status, body) == (413, b'{"message":"MSG_TOO_BIG"}')
    assert headers["Connection"] == "close"


async def test_expect_100_continue(server: tuple[str, int]) -> None:
    reader, writer = await asyncio.open_connection(*server)
    writer.write(b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"hi")
    answer = await asyncio.wait_for(reader.readuntil(b"hi"), 5)
    writer.close()
    assert answers(answer)[0][2] == b"hi"


async def test_expect_100_continue_over_the_limit_is_refused_at_once(server: tuple[str, int]) -> None:
    request = b"POST /sized HTTP/1.1\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n"
    ((status, _, _),) = answers(await exchange(server, request, until_closed=True))
    assert status == 413


@pytest.mark.parametrize("request_bytes", [
    b"GET /ping HTTP/1.0\r\n\r\n",
    b"GET /ping HTTP/1.1\r\nConnection: close\r\n\r\n",
])
async def test_the_connection_closes_when_the_client_asks(server: tuple[str, int], request_bytes: bytes) -> None:
    ((status, headers, body),) = answers(await exchange(server, request_bytes, until_closed=True))
    assert (status, body, headers["Connection"]) == (200, b"OK", "close")


async def test_http_1_0_keep_alive(server: tuple[str, int]) -> None:
    data = await exchange(server, b"GET /ping HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" * 2)
    assert [status for status, _, _ in answers(data)] == [200, 200]


async def test_malformed_request_is_go_s_400_and_closes(server: tuple[str, int]) -> None:
    data = await exchange(server, b"GET /ping HTTP/1.1\r\nBad Header\r\n\r\n", until_closed=True)
    assert data.startswith(b"HTTP/1.1 400 Bad Request\r\n") and data.endswith(b"\r\n\r\n400 Bad Request")


async def test_headers_over_a_megabyte_are_refused(server: tuple[str, int]) -> None:
    request = b"GET /ping HTTP/1.1\r\n" + b"X-Filler: " + b"a" * (1 << 20) + b"\r\n\r\n"
    data = await exchange(server, request, until_closed=True)
    assert data.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")


async def test_router_answers_as_httprouter(server: tuple[str, int]) -> None:
    data = await exchange(server, b"GET /nope HTTP/1.1\r\n\r\n"
                                  b"POST /ping HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
                                  b"OPTIONS /echo HTTP/1.1\r\n\r\n"
                                  b"GET /ping/?a=1 HTTP/1.1\r\n\r\n"
                                  b"POST /echo/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
                                  b"GET /config/log%5Flevel HTTP/1.1\r\n\r\n"
                                  b"GET /crash HTTP/1.1\r\n\r\n")
    not_found, not_allowed, options, get_redirect, post_redirect, config, crashed = answers(data)
    assert (not_found[0], not_found[2]) == (404, b'{"message":"NOT_FOUND"}')
    assert (not_allowed[0], not_allowed[1]["Allow"], not_allowed[2]) == (405, "GET, OPTIONS",
                                                                          b'{"message":"METHOD_NOT_ALLOWED"}')
    assert (options[0], options[1]["Allow"], options[2]) == (200, "OPTIONS, POST", b"")
    assert (get_redirect[0], get_redirect[1]["Location"]) == (301, "/ping?a=1")
    assert (post_redirect[0], post_redirect[1]["Location"]) == (307, "/echo")
    assert config[2] == b"log_level"
    assert (crashed[0], crashed[2]) == (500, b'{"message":"INTERNAL_ERROR"}')


async def test_an_answer_to_head_has_no_body(server: tuple[str, int]) -> None:
    # httprouter has no implicit HEAD: a 405, whose body is not sent, so the next answer is read right
    data = await exchange(server, b"HEAD /ping HTTP/1.1\r\n\r\nGET /ping HTTP/1.1\r\nConnection: close\r\n\r\n",
                          until_closed=True)
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405 ") and b"Content-Length: 32" in head
    assert answers(rest)[0][::2] == (200, b"OK")


def test_query_parameters_as_go_reads_them() -> None:
    assert parse_query("topic=t") == {"topic": "t"}
    assert parse_query("") == {}
    assert parse_query("topic=a&topic=b&channel=") == {"topic": "a", "channel": ""}
    assert parse_query("topic=a%2Fb+c&x") == {"topic": "a/b c", "x": ""}
