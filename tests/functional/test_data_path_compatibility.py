"""A data directory written by an earlier nsqd (``data/data_path_1_3_0``, by nsqd 1.3.0 of this project, before its
queues had recorders) starts and keeps every message: what a topic held with no channel, a channel's queued and
deferred messages, its dead letters (the queue named ``t:dead:c`` on disk) and its own attempts limit.

It was written by: /topic/create t, /channel/create t c, /channel/dead_letter attempts=1; /pub held "held 1",
"held 2" (no channel); /pub t "dead", delivered and requeued (parked at its next delivery); /pub t "queued 1",
"queued 2"; /pub t?defer=600000 "deferred" (ten minutes); then SIGTERM.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

from harness.processes import start_nsqd
from harness.wire import WireClient

WRITTEN = Path(__file__).parent / "data" / "data_path_1_3_0"


async def test_a_data_directory_written_earlier_starts_with_every_message(tmp_path: Path) -> None:
    data_path = tmp_path / "data"
    shutil.copytree(WRITTEN, data_path)
    nsqd = start_nsqd(data_path=data_path)
    try:
        stats = nsqd.channel_stats("t", "c")
        # the deferred message was due ten minutes after it was written: by now, mostly, it is
        assert stats["depth"] + stats["deferred_count"] == 3
        assert (stats["dead_letter_depth"], stats["max_attempts"]) == (1, 1)
        status, _, body = nsqd.http("GET", "/channel/peek?topic=t&channel=c&queue=dead")
        assert status == 200
        assert [base64.b64decode(m["body"]) for m in json.loads(body)["messages"]] == [b"dead"]

        consumer = await WireClient.connect(nsqd.tcp_address)
        await consumer.subscribe("t", "c", rdy=10)
        due = [b"deferred"] if stats["deferred_count"] == 0 else []
        assert sorted(m.body for m in await consumer.read_messages(2 + len(due))) == due + [b"queued 1", b"queued 2"]
        assert json.loads(nsqd.http("POST", "/channel/replay?topic=t&channel=c")[2]) == {"replayed": 1}
        assert (await consumer.read_message()).body == b"dead"
        await consumer.close()

        held = await WireClient.connect(nsqd.tcp_address)
        await held.subscribe("held", "c", rdy=10)
        assert [m.body for m in await held.read_messages(2)] == [b"held 1", b"held 2"]
        await held.close()
    finally:
        nsqd.stop()
