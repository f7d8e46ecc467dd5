"""What a standalone example needs: a ``snapview serve`` on a temporary dir and a SparkSession."""

from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@contextlib.contextmanager
def local_stack(barrier_interval: str = "500ms"):
    """Yield (spark, address): an embedded server and a local[2] SparkSession, both stopped
    on exit."""
    from pyspark.sql import SparkSession

    from coordinator.embedded import EmbeddedServer

    srv = EmbeddedServer(extra_args=["--barrier-interval", barrier_interval]).start()
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark, srv.address
    finally:
        spark.stop()
        srv.stop()
