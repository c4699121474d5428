"""The sink's pure parts that need Spark's types: rows to per-topic groups, the driver's checks and totals (chunks
and the order of nodes are in test_pipeline_chunk_router.py)."""

from __future__ import annotations

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType  # noqa: E402

from nsqspark.chunk_router import SinkError  # noqa: E402
from nsqspark.options import OptionError, parse_options  # noqa: E402
from nsqspark.sink import NSQCommitMessage, SinkConfig, configure, grouped, total  # noqa: E402

BODY = StructField("body", BinaryType())
TOPIC = StructField("topic", StringType())
NODE = {"nsqd_tcp_address": "127.0.0.1:4150"}


def config(topic: str = "t", topic_column: str | None = None) -> SinkConfig:
    return SinkConfig(parse_options({**NODE, "topic": topic}, need_topic=bool(topic)), "body", topic_column)


def test_string_bodies_are_sent_as_utf8_and_rows_grouped_per_topic() -> None:
    first = pa.record_batch({"body": ["é", "b", "c"], "topic": ["x", None, "x"]})
    second = pa.record_batch({"body": ["d"], "topic": ["y"]})
    groups = list(grouped(config("fallback", "topic"), [first, second]))
    assert groups == [("x", ["é".encode(), b"c"]), ("fallback", [b"b"]), ("y", [b"d"])]


def test_without_a_topic_column_every_row_goes_to_the_option() -> None:
    batch = pa.record_batch({"body": pa.array([b"a", b"b"], pa.binary())})
    assert list(grouped(config("t"), [batch])) == [("t", [b"a", b"b"])]


@pytest.mark.parametrize(("second", "topic", "error"), [
    ({"body": ["c", None], "topic": ["x", "x"]}, "t", "row 3 of the partition has a null body"),
    ({"body": ["c", ""], "topic": ["x", "x"]}, "t", "row 3 of the partition has an empty body"),
    ({"body": ["c", "d"], "topic": ["x", "no spaces"]}, "t", "row 3 of the partition has an invalid topic name"),
    ({"body": ["c", "d"], "topic": ["x", None]}, "", "row 3 of the partition has a null topic and no topic option"),
])
def test_a_row_that_cannot_be_published_is_named(second: dict[str, list[str | None]], topic: str,
                                                 error: str) -> None:
    first = pa.record_batch({"body": ["a", "b"], "topic": ["x", "x"]})
    with pytest.raises(SinkError, match=error):
        list(grouped(config(topic, "topic"), [first, pa.record_batch(second)]))


def test_the_driver_finds_the_columns_and_reads_the_timeouts() -> None:
    schema = StructType([StructField("Topic", StringType()), StructField("BODY", StringType())])
    checked = configure({**NODE, "connect_timeout": "0.5"}, schema)
    assert (checked.body_column, checked.topic_column, checked.options.connect_timeout,
            checked.options.publish_timeout) == (
        "BODY", "Topic", 0.5, 30.0)
    assert configure({**NODE, "TOPIC": "t"}, StructType([BODY])).options.topic == "t"


@pytest.mark.parametrize(("options", "fields", "error"), [
    ({"topic": "t"}, [StructField("value", BinaryType())], "the rows need a body column"),
    ({"topic": "t"}, [StructField("body", IntegerType())], "the rows need a body column"),
    ({"topic": "t"}, [BODY, StructField("topic", IntegerType())], "column topic: must be a string"),
    ({}, [BODY], "give the topic option or a topic column"),
    ({"topic": "no spaces"}, [BODY, TOPIC], "option topic: invalid topic name"),
    ({"topic": "t", "connect_timeout": "soon"}, [BODY], "option connect_timeout: not a number"),
    ({"topic": "t", "publish_timeout": "0"}, [BODY], "option publish_timeout: must be > 0"),
])
def test_the_driver_refuses_what_no_task_could_publish(options: dict[str, str], fields: list[StructField],
                                                       error: str) -> None:
    with pytest.raises((SinkError, OptionError), match=error):
        configure({**NODE, **options}, StructType(fields))


def test_the_totals_add_up_the_tasks_that_finished() -> None:
    messages = [NSQCommitMessage(10, 2, 1, {"a": 6, "b": 4}), None, NSQCommitMessage(5, 1, 0, {"a": 5})]
    assert total(messages) == NSQCommitMessage(15, 3, 1, {"a": 11, "b": 4})
    assert str(total(messages)) == "15 messages in 3 chunks, 1 sent again (a 11, b 4)"
