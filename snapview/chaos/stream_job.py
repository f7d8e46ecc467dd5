"""A streaming query for crash tests: JSON files -> EpochWriter (append), one file per batch.

    python -m snapview.chaos.stream_job ADDRESS INPUT_DIR CHECKPOINT TABLE [MASTER]

Runs until every file is processed, prints ``DONE``, exits 0. The tests kill it (kill -9 of its
whole process group, JVM included) at fail points and start it again on the same checkpoint.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from snapview.local_spark import local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery


def start_append_stream(
    spark: SparkSession,
    address: str,
    table: str,
    input_dir: str,
    checkpoint: str,
    files_per_batch: int,
    **trigger: str,
) -> StreamingQuery:
    """JSON files of (id, v) under ``input_dir`` -> EpochWriter in append mode, in two
    partitions per batch; ``trigger`` as for DataStreamWriter.trigger (none: as fast as it can)."""
    from spark_sink import EpochWriter

    w = (
        spark.readStream.schema("id BIGINT, v STRING")
        .option("maxFilesPerTrigger", files_per_batch)
        .json(input_dir)
        .repartition(2)
        .writeStream.foreachBatch(EpochWriter(address, table=table, mode="append"))
        .option("checkpointLocation", checkpoint)
    )
    return (w.trigger(**trigger) if trigger else w).start()


def main() -> int:
    address, input_dir, checkpoint, table = sys.argv[1:5]
    master = sys.argv[5] if len(sys.argv) > 5 else "local[2]"
    spark = local_session(master)
    q = start_append_stream(spark, address, table, input_dir, checkpoint, files_per_batch=1)
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    print("DONE", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
