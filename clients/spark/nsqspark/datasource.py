"""The ``nsq`` data source for PySpark: ``register(spark)`` (or ``spark.dataSource.register(NSQDataSource)``), then
``spark.readStream.format("nsq")``, ``spark.read.format("nsq")``, ``df.write.format("nsq")`` and
``df.writeStream.format("nsq")``. Options are in ``options``, the schema of the rows read in ``message_rows``; the
readers and writers in their own modules.

Rows read carry the message as nsqd delivered it; rows written need a ``body`` column (binary or string) and may
have a ``topic`` column naming each row's topic (else the ``topic`` option).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .batch_reader import NSQBatchReader
from .message_rows import SCHEMA
from .sink import NSQStreamWriter, NSQWriter
from .stream_reader import NSQStreamReader


class NSQDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return NSQBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return NSQStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return NSQWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return NSQStreamWriter(self.options, schema)
