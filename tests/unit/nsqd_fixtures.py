"""Real nsqd objects for unit tests, with a transport that records bytes instead of a socket."""

from __future__ import annotations

from typing import Any

from nsqclient.protocol.frames import FRAME_TYPE_MESSAGE, FrameDecoder, Message, decode_message
from services.nsqd.client import Client, ClientDefaults
from services.nsqd.options import Options
from shared.protocol.session_v2 import ClientState, Limits, SessionV2


class RecordingTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self._decoder = FrameDecoder()

    def write(self, data: Any) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1234)

    def messages(self) -> list[Message]:
        frames = self._decoder.feed(bytes(self.written))
        self.written.clear()
        return [decode_message(f.data) for f in frames if f.frame_type == FRAME_TYPE_MESSAGE]


def make_client(client_id: int = 1, ready: int = 1, msg_timeout: float = 60.0) -> tuple[Client, RecordingTransport]:
    transport = RecordingTransport()
    session = SessionV2(Limits(1 << 20, 5 << 20, 2500, 3_600_000, tls_required=False, auth_enabled=False))
    session.state = ClientState.SUBSCRIBED
    client = Client(client_id, transport, f"127.0.0.1:{1000 + client_id}",  # type: ignore[arg-type]
                    lambda c: c.flush(), transport.close, ClientDefaults(30.0, msg_timeout, 16 * 1024, 0.25), session)
    client.set_ready(ready)
    return client, transport


def options(**overrides: Any) -> Options:
    opts = Options(**overrides)
    opts.validate()
    return opts
