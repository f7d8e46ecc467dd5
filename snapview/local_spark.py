"""The one local SparkSession recipe shared by the demo, examples, benchmarks, jobs and tests."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyspark is loaded when a session is asked for
    from pyspark.sql import SparkSession


def local_session(
    master: str = "local[2]", app_name: str = "snapview", shuffle_partitions: int = 2
) -> SparkSession:
    """A SparkSession (``getOrCreate``) on ``master``: Python workers run this interpreter, no UI
    and no console progress bars, session time zone UTC, Spark's own logs at ERROR."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
