"""A bare protocol-V2 client for tests: raw bytes out, decoded frames in (asyncio streams), compressed after
``compress`` as nsqd's clients do once IDENTIFY negotiated snappy or deflate."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nsqclient.protocol.compression import Codec
from nsqclient.protocol.frames import (
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    Frame,
    FrameDecoder,
    Message,
    decode_message,
    encode_command,
)


class WireClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._decoder = FrameDecoder()
        self._frames: list[Frame] = []
        self._codec: Codec | None = None
        self.heartbeats = 0

    @classmethod
    async def connect(cls, address: tuple[str, int], magic: bytes = MAGIC_V2) -> WireClient:
        reader, writer = await asyncio.open_connection(*address)
        writer.write(magic)
        return cls(reader, writer)

    @property
    def compressing(self) -> bool:
        return self._codec is not None

    def send(self, data: bytes) -> None:
        self.writer.write(data if self._codec is None else self._codec.compress(data))

    async def send_in_pieces(self, data: bytes, size: int) -> None:
        """``data`` as one write sends it (compressed whole, when compressing), put on the wire ``size`` bytes at a
        time."""
        wire = data if self._codec is None else self._codec.compress(data)
        for start in range(0, len(wire), size):
            self.writer.write(wire[start:start + size])
            await self.writer.drain()

    async def compress(self, codec: Codec, **identify: Any) -> dict[str, Any]:
        """IDENTIFY asking for ``codec``'s compression; then every byte both ways is compressed, from nsqd's OK on.
        Returns the IDENTIFY answer."""
        await self.command(b"IDENTIFY", body=json.dumps({**identify, codec.name: True}).encode())
        frames: list[Frame] = []
        while not frames:  # the answer alone: what follows it is compressed
            frames = self._decoder.feed(await self._read(), limit=1)
        self._codec = codec
        self._frames += self._decoder.feed(b"".join(codec.decompress(self._decoder.take_buffer())))
        frame = await self.read_frame()
        assert frame == Frame(FRAME_TYPE_RESPONSE, b"OK"), frame
        answer: dict[str, Any] = json.loads(frames[0].data)
        return answer

    async def _read(self, timeout: float = 5) -> bytes:
        data = await asyncio.wait_for(self.reader.read(65536), timeout)
        if not data:
            raise ConnectionError("connection closed by nsqd")
        return data if self._codec is None else b"".join(self._codec.decompress(data))

    async def command(self, name: bytes, *params: bytes, body: bytes | None = None) -> None:
        self.send(encode_command(name, *params, body=body))
        await self.writer.drain()

    async def identify(self, **fields: Any) -> Frame:
        await self.command(b"IDENTIFY", body=json.dumps(fields).encode())
        return await self.read_frame()

    async def subscribe(self, topic: str, channel: str, rdy: int = 1, **identify: Any) -> None:
        if identify:
            await self.identify(**identify)
        await self.command(b"SUB", topic.encode(), channel.encode())
        frame = await self.read_frame()
        assert frame == Frame(FRAME_TYPE_RESPONSE, b"OK"), frame
        await self.command(b"RDY", str(rdy).encode())

    async def read_frame(self, timeout: float = 5, skip_heartbeats: bool = True) -> Frame:
        while True:
            while not self._frames:
                self._frames += self._decoder.feed(await self._read(timeout))
            frame = self._frames.pop(0)
            if skip_heartbeats and frame == Frame(FRAME_TYPE_RESPONSE, HEARTBEAT):
                self.heartbeats += 1
                continue
            return frame

    async def read_message(self, timeout: float = 5) -> Message:
        frame = await self.read_frame(timeout)
        assert frame.frame_type == FRAME_TYPE_MESSAGE, frame
        return decode_message(frame.data)

    async def read_messages(self, count: int, timeout: float = 5) -> list[Message]:
        return [await self.read_message(timeout) for _ in range(count)]

    async def expect_nothing(self, wait: float) -> None:
        """Asserts no frame (other than heartbeats) arrives within ``wait`` seconds."""
        try:
            frame = await self.read_frame(timeout=wait)
        except asyncio.TimeoutError:
            return
        raise AssertionError(f"unexpected frame {frame}")

    async def closed(self, timeout: float = 5) -> bool:
        """True once nsqd has closed the connection (frames still buffered are skipped)."""
        try:
            while True:
                await self.read_frame(timeout, skip_heartbeats=True)
        except ConnectionError:
            await self.close()
            return True

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
