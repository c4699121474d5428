"""The pure pieces of a job's progress reporting: batches counted once from repeated progress reports, and the
progress line."""

from __future__ import annotations

from typing import Any

from services.pipeline.progress import BatchCounter, Sample


def report(batch: int, rows: int, ms: int = 500) -> dict[str, Any]:
    return {"batchId": batch, "numInputRows": rows, "durationMs": {"triggerExecution": ms}}


def test_batches_are_counted_once_across_overlapping_reports() -> None:
    counter = BatchCounter()
    counter.add([report(0, 10), report(1, 20)])
    counter.add([report(1, 20), report(2, 0), report(3, 30)])
    assert counter.rows == 60
    assert counter.last == report(3, 30)
    counter.add([report(3, 30), report(4, 0)])  # an empty batch after it: the last one that read stays
    assert counter.rows == 60 and counter.last == report(3, 30)


def test_the_seen_batches_are_bounded() -> None:
    counter = BatchCounter()
    for first in range(0, 20_000, 100):
        counter.add([report(batch, 1) for batch in range(first, first + 100)])
    assert counter.rows == 20_000
    counter.add([report(19_999, 1)])  # still known: the latest ones are kept
    assert counter.rows == 20_000


def test_the_progress_line() -> None:
    sample = Sample(rows_per_second=41_234.4, rows=1_234_567, batch_id=7, batch_rows=50_000, batch_seconds=1.234,
                    backlog=250_000)
    assert sample.line("nsq_to_parquet") == ("nsq_to_parquet: 41,234 msg/s, 1,234,567 in all; backlog in nsqd "
                                             "250,000; last batch 50,000 messages in 1.23s")
    assert Sample(0.0, 0).line("job") == "job: 0 msg/s, 0 in all; backlog in nsqd unknown; no batch yet"

