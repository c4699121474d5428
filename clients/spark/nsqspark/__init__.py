"""NSQ as a PySpark data source named ``nsq``: read a channel and write topics, batch and streaming.

``register(spark)`` once per session, then ``spark.readStream.format("nsq")``, ``spark.read.format("nsq")``,
``df.write.format("nsq")`` and ``df.writeStream.format("nsq")``, with the options in ``options``. To consume in
batches (FIN after the write succeeded), ``read_batch`` and ``drain``. Rows read have the columns of ``SCHEMA``.

The names below are loaded on first use, so that ``nsqspark.options`` and the other modules without Spark in them
import without PySpark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__
    from pyspark.sql import SparkSession

    from .batch_reader import NSQBatch as NSQBatch, drain as drain, read_batch as read_batch
    from .datasource import NSQDataSource as NSQDataSource
    from .message_rows import SCHEMA as SCHEMA
    from .options import OptionError as OptionError

__all__ = ["SCHEMA", "NSQBatch", "NSQDataSource", "OptionError", "drain", "read_batch", "register"]
_MODULE_OF = {"NSQBatch": "batch_reader", "drain": "batch_reader", "read_batch": "batch_reader",
              "NSQDataSource": "datasource", "SCHEMA": "message_rows", "OptionError": "options"}

if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name is an error there, not Any
    def __getattr__(name: str) -> Any:
        module = _MODULE_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value  # found directly from now on
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def register(spark: SparkSession) -> SparkSession:
    """Makes ``format("nsq")`` known to ``spark`` (and to the Python workers it starts); returns ``spark``."""
    from .datasource import NSQDataSource

    spark.dataSource.register(NSQDataSource)
    return spark
