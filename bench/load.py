"""Load generators: plain blocking sockets in worker processes, so the generator is not the bottleneck.

Each function runs in its own process and returns how many messages it moved in its time window.
"""

from __future__ import annotations

import re
import selectors
import socket
import struct
import time
from collections import deque
from typing import cast

from nsqclient.protocol.frames import MAGIC_V2, encode_command, encode_mpub

_OK_FRAME = struct.pack(">ii", 6, 0) + b"OK"
_HEADER = struct.Struct(">ii")


def connect(address: tuple[str, int]) -> socket.socket:
    sock = socket.create_connection(address)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.sendall(MAGIC_V2)
    return sock


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed by server")
        data += chunk
    return data


def _expect_ok(sock: socket.socket) -> None:
    """Reads frames up to the next OK, answering heartbeats on the way."""
    while True:
        size, frame_type = _HEADER.unpack(_read_exactly(sock, 8))
        data = _read_exactly(sock, size - 4)
        if frame_type == 0 and data == b"OK":
            return
        if frame_type == 0 and data == b"_heartbeat_":
            sock.sendall(b"NOP\n")
            continue
        raise RuntimeError(f"unexpected reply {frame_type} {data!r}")


def publish(address: tuple[str, int], topic: str, batch: int, size: int, start_at: float,
            duration: float, command: bytes = b"", pause: float = 0.0, window: int = 1) -> tuple[int, list[float]]:
    """PUB (batch 1) or MPUB (batch > 1, or ``command=b"MPUB"``), each waiting for its OK, until
    ``start_at + duration``: messages acknowledged, and every round trip in seconds. ``pause``: seconds spent
    spinning after each OK before the next request, as a slower client (or a client on a slower core) sends.
    ``window``: requests sent before their OKs are read, as a client publishing asynchronously keeps them (pynsq's
    ``Writer``, go-nsq's ``PublishAsync``); each round trip runs from its request to its OK."""
    sock = connect(address)
    body = b"x" * size
    frame = encode_mpub(topic.encode(), [body] * batch) if batch > 1 or command == b"MPUB" else \
        encode_command(b"PUB", topic.encode(), body=body)
    count = 0
    round_trips = []
    in_flight: deque[float] = deque()
    clock = time.perf_counter
    time.sleep(max(0.0, start_at - time.time()))
    end = clock() + (start_at + duration - time.time())
    while True:
        sent = clock()
        while sent < end and len(in_flight) < window:
            sock.sendall(frame)
            in_flight.append(sent)
            sent = clock()
        if not in_flight:
            break
        _expect_ok(sock)
        answered = clock()
        round_trips.append(answered - in_flight.popleft())
        count += batch
        while pause and clock() - answered < pause:
            pass
    sock.close()
    return count, round_trips


def consume(address: tuple[str, int], topic: str, channel: str, rdy: int, expected: int,
            timeout: float) -> tuple[int, float]:
    """SUB with RDY ``rdy``, FIN every message; returns (messages, seconds from first to last)."""
    sock = connect(address)
    sock.sendall(encode_command(b"SUB", topic.encode(), channel.encode()) + b"RDY %d\n" % rdy)
    pending = b""
    received = 0
    first = last = 0.0
    deadline = time.time() + timeout
    unpack = _HEADER.unpack_from
    while received < expected and time.time() < deadline:
        data = sock.recv(1 << 20)
        if not data:
            break
        data = pending + data if pending else data
        pos, end, fins, heartbeats = 0, len(data), [], 0
        while end - pos >= 8:
            size, frame_type = unpack(data, pos)
            if end - pos - 4 < size:
                break
            if frame_type == 2:
                fins.append(b"FIN " + data[pos + 18:pos + 34] + b"\n")
            elif data[pos + 8:pos + 4 + size] == b"_heartbeat_":
                heartbeats += 1
            pos += 4 + size
        pending = data[pos:]
        if heartbeats:
            sock.sendall(b"NOP\n" * heartbeats)
        if fins:
            if not first:
                first = time.time()
            received += len(fins)
            last = time.time()
            sock.sendall(b"".join(fins))
    sock.close()
    return received, last - first


def probe(address: tuple[str, int], start_at: float, duration: float) -> list[float]:
    """PUB round trips on a topic of its own every 10 ms while the load runs: how long nsqd keeps other clients
    waiting (seconds each)."""
    sock = connect(address)
    frame = encode_command(b"PUB", b"probe", body=b"x" * 200)
    time.sleep(max(0.0, start_at - time.time()))
    latencies = []
    end = start_at + duration
    while time.time() < end:
        sent = time.perf_counter()
        sock.sendall(frame)
        _expect_ok(sock)
        latencies.append(time.perf_counter() - sent)
        time.sleep(0.01)
    sock.close()
    return latencies


_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length: *(\d+)", re.IGNORECASE)


def http_publish(address: tuple[str, int], path: str, size: int, connections: int, start_at: float,
                 duration: float, headers: tuple[str, ...] = ()) -> tuple[int, list[float]]:
    """``POST path`` with a ``size``-byte body (and ``headers``, ``"Name: value"`` each) over ``connections``
    keep-alive connections, each waiting for its answer before the next request (as wrk does); returns the 200s
    received and every round trip in seconds. For machines without wrk."""
    extra = "".join(f"{header}\r\n" for header in headers)
    request = (f"POST {path} HTTP/1.1\r\nHost: {address[0]}:{address[1]}\r\n{extra}Content-Length: {size}\r\n\r\n"
               ).encode() + b"x" * size
    selector = selectors.DefaultSelector()
    socks = [socket.create_connection(address) for _ in range(connections)]
    for sock in socks:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        selector.register(sock, selectors.EVENT_READ, [b"", 0.0])  # [unparsed answer bytes, time the request went]
    clock = time.perf_counter
    time.sleep(max(0.0, start_at - time.time()))
    end = clock() + (start_at + duration - time.time())
    for sock in socks:
        selector.get_key(sock).data[1] = clock()
        sock.sendall(request)
    count, round_trips = 0, []
    while clock() < end:
        for key, _ in selector.select(1.0):
            sock, state = cast(socket.socket, key.fileobj), key.data  # what was registered above
            state[0] += sock.recv(65536)
            while (head_end := state[0].find(b"\r\n\r\n")) >= 0:
                length = _CONTENT_LENGTH.search(state[0], 0, head_end)
                answer_end = head_end + 4 + (int(length.group(1)) if length else 0)
                if len(state[0]) < answer_end:
                    break
                if state[0].startswith(b"HTTP/1.1 200 "):
                    count += 1
                state[0] = state[0][answer_end:]
                now = clock()
                round_trips.append(now - state[1])
                state[1] = now
                sock.sendall(request)
    for sock in socks:
        sock.close()
    return count, round_trips
