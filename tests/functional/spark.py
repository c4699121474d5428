"""Spark for the pipeline's tests: one local Spark session for every test that needs one (starting a JVM costs
seconds), with the ``nsq`` data source registered, and a standalone cluster (harness.spark_cluster) for a test
module. Spark's Python workers run this interpreter, so they import the project as the tests do."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.processes import ROOT
from harness.spark_cluster import SparkCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    pytest.importorskip("pyspark")
    from services.pipeline.session import spark_session

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    warehouse = Path(tmp_path_factory.mktemp("spark"))
    session = spark_session("local[2]", "nsq-tests", {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.warehouse.dir": str(warehouse / "warehouse"),
        "spark.local.dir": str(warehouse / "local"),
        "spark.driver.memory": "1g",
    })
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    pytest.importorskip("pyspark")
    cluster = SparkCluster(Path(tmp_path_factory.mktemp("spark-cluster")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
