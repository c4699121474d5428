from __future__ import annotations

from harness.processes import NSQDProcess
from harness.wire import WireClient


async def test_publish_then_consume(nsqd: NSQDProcess) -> None:
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("smoke", "ch", rdy=5)
    producer = await WireClient.connect(nsqd.tcp_address)
    await producer.command(b"PUB", b"smoke", body=b"hello")
    assert (await producer.read_frame()).data == b"OK"
    message = await consumer.read_message()
    assert message.body == b"hello" and message.attempts == 1
    await consumer.command(b"FIN", message.id)
    await consumer.close()
    await producer.close()
