"""EpochWriter: exactly-once writes from Structured Streaming's foreachBatch.

Each micro-batch is one store transaction (an epoch of the job, default job name = the table):

1. the driver asks the coordinator for the epoch of this batch, named by the query id and batch
   id. A batch already committed is skipped; one left in PREWRITE by a crashed run is rolled back
   and redone (a fresh attempt); otherwise the job's next epoch opens;
2. executors prewrite their partitions as secondaries of the epoch's primary, thousands of
   mutations per call, while a heartbeat keeps the primary alive;
3. the driver commits through the coordinator. The commit records, with the epoch, the highest
   ``_commit_ts`` of a snapview change feed in the batch, so a stream restarted without its
   checkpoint can resume there (``.option("resumeFromJob", job)`` on the source).

Any failure before the commit aborts the attempt: nothing of the batch becomes visible.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame

from coordinator.connection import ConnectionSettings
from coordinator.jobs import EpochInfo
from kvstore.errors import SnapviewError
from kvstore.failpoints import fail_point
from spark_sink.arrow_encoding import ArrowEncoder
from spark_sink.epoch_attempt import UNKNOWN, EpochAttempt, feed_metadata
from spark_sink.partition_writer import (
    DirectInfo,
    EpochTarget,
    direct_info,
    task_context,
    write_batches,
)
from spark_source.connection import client_for

DEFAULT_TTL_MS = 20_000
MODES = ("upsert", "delete", "append")
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def _partition_fn(
    target: EpochTarget,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows, high = write_batches(target, batches, task_context().partitionId())
        yield pa.RecordBatch.from_pydict({"rows": [rows], "high": [high]})

    return run


class EpochWriter:
    """``df.writeStream.foreachBatch(EpochWriter(conn, table="t", mode="upsert"))``.

    ``conn`` is a ``coordinator.ConnectionSettings`` (address, token or token file, TLS CA), or an
    address with ``token=`` beside it (the older form).

    ``mode``: upsert (by primary key), delete (the rows name keys to delete), append (tables
    created with ``primary_key=[]``; rows get deterministic hidden ids). ``job`` defaults to the
    table name, and the job is registered as the table's one writer on the first batch: another
    job writing the same table is refused with SecondWriter. ``lock_ttl_ms`` is how long the epoch's locks outlive a dead
    writer before readers roll them back (a live writer heartbeats). With ``direct`` (default),
    executors that share the server's host and data dir prewrite into its LMDB environment
    themselves (see kvstore.direct); others, and anything the direct path hands back, use gRPC."""

    def __init__(
        self,
        coordinator: str | ConnectionSettings,
        table: str,
        mode: str = "upsert",
        job: str | None = None,
        lock_ttl_ms: int = DEFAULT_TTL_MS,
        token: str | None = None,
        direct: bool = True,
    ) -> None:
        if mode not in MODES:
            raise SnapviewError(f"table {table!r}: mode {mode!r} is not one of {MODES}")
        self.coordinator, self.table, self.mode = coordinator, table, mode
        self.job = job or table
        self.lock_ttl_ms = lock_ttl_ms
        self.token = token
        self.direct = direct  # executors on the server's host may prewrite into LMDB directly
        self._direct_info: DirectInfo | None = None
        self._registered = False
        self.last_epoch: EpochInfo | None = None  # the newest batch this writer handled
        # (epoch, feed high-water) of the last epoch this writer committed: the next epoch
        # carries the high-water forward without reading it back from the coordinator.
        self._carried: tuple[int, int | None] | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        client = client_for(self.coordinator, self.token)
        info = client.describe_table(self.table, refresh=True)
        ArrowEncoder(info).check_sink(df.columns, self.mode)
        if not self._registered:
            client.jobs.register_job(self.job, self.table, [], kind="sink")
            self._registered = True
        qid = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY) or "batch"
        batch = f"{qid}:{batch_id}"
        attempt = EpochAttempt.open(
            client, self.job, ttl_ms=self.lock_ttl_ms, batch=batch, owner=uuid.uuid4().hex
        )
        self.last_epoch = attempt.info
        if attempt.committed:
            return  # replayed after its commit: skip, exactly once
        if self.direct and self._direct_info is None:
            self._direct_info = direct_info(client)
        direct = self._direct_info if self.direct else None
        target = attempt.target(self.coordinator, self.token, info, self.mode, direct)
        with attempt.running(target):
            out = df.mapInArrow(_partition_fn(target), "rows long, high long").collect()
            fail_point("sink.before_commit")
            high = max([r["high"] for r in out], default=-1)
            carried = self._carried
            prev = carried[1] if carried and carried[0] == attempt.epoch - 1 else UNKNOWN
            rows = sum(r["rows"] for r in out)
            meta = feed_metadata(client, self.job, batch, rows, high, prev)
            self.last_epoch = attempt.commit(meta)
            self._carried = (attempt.epoch, meta.feed)
