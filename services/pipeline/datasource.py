"""The ``nsq`` data source for PySpark: ``spark.dataSource.register(NSQDataSource)``, then
``spark.readStream.format("nsq")``, ``spark.read.format("nsq")``, ``df.write.format("nsq")`` and
``df.writeStream.format("nsq")``. Options are in ``options``; the readers and writers in their own modules.

Rows read carry the message as nsqd delivered it; rows written need a ``body`` column (binary or string) and may
have a ``topic`` column naming each row's topic (else the ``topic`` option).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType, TimestampType

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )

SCHEMA = StructType([
    StructField("message_id", StringType(), nullable=False),
    StructField("body", BinaryType(), nullable=False),
    StructField("timestamp", TimestampType(), nullable=False),
    StructField("attempts", IntegerType(), nullable=False),
    StructField("nsqd_address", StringType(), nullable=False),
    StructField("topic", StringType(), nullable=False),
])


class NSQDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from .batch_reader import NSQBatchReader

        return NSQBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream_reader import NSQStreamReader

        return NSQStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import NSQWriter

        return NSQWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import NSQStreamWriter

        return NSQStreamWriter(self.options, schema)
