"""NSQ as a PySpark data source named ``nsq``: read a channel and write topics, batch and streaming.

``register(spark)`` once per session, then ``spark.readStream.format("nsq")``, ``spark.read.format("nsq")``,
``df.write.format("nsq")`` and ``df.writeStream.format("nsq")``, with the options in ``options``. To consume in
batches (FIN after the write succeeded), ``read_batch`` and ``drain``. Rows read have the columns of ``SCHEMA``.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from .batch_reader import NSQBatch, drain, read_batch
from .datasource import NSQDataSource
from .message_rows import SCHEMA
from .options import OptionError

__all__ = ["SCHEMA", "NSQBatch", "NSQDataSource", "OptionError", "drain", "read_batch", "register"]


def register(spark: SparkSession) -> SparkSession:
    """Makes ``format("nsq")`` known to ``spark`` (and to the Python workers it starts); returns ``spark``."""
    spark.dataSource.register(NSQDataSource)
    return spark
