"""``spark.readStream.format("snapview")``: a table's change feed as a stream.

Offsets are ``{"ts": T}``: everything committed at or below T has been emitted. The first batch
is a snapshot at the table's resolved ts, emitted as inserts; each later batch is the net change
in (previous T, new T], where the new T never passes the table's resolved ts (so no commit can
still land inside a batch already emitted). With ``maxRowsPerTrigger`` a batch ends early, at a
commit boundary. A restart resumes from Spark's checkpointed offset; without a checkpoint,
``resumeFromJob`` resumes after the last change that sink job committed (see EpochWriter).

The stream holds a reader lease (``leaseSeconds``, default 600 s) on its committed offset, so
GC never collects the changes it has yet to read, however far behind it falls: the lease is
renewed in the background by the driver's Python source process, and moved forward when Spark
commits an offset (Spark commits a batch's offsets as it starts the next batch, so the lease
trails by one batch). When the query stops, Spark ends that process without calling ``stop()``
(PySpark 4.3), so the lease lapses one TTL after the query ends: choose ``leaseSeconds`` as how
long a stopped stream may stay away and still resume from its checkpoint. (``stop()`` runs only
when that process finds Spark gone first; it then releases the lease and ends the process
quietly, see ``spark_source.hangup``.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from coordinator.client import Client
from coordinator.errors import LeaseNotFound
from coordinator.lease import Lease
from coordinator.process_clients import client_for
from kvstore.table_info import TableInfo
from spark_source.hangup import end_if_spark_hung_up
from spark_source.key_ranges import full_range
from spark_source.options import SourceOptions
from spark_source.readers import (
    ChangePartition,
    RangePartition,
    plan_ranges,
    read_changes,
    read_range,
)

STREAM_LEASE_S = 600


class ChangeFeedStreamReader(DataSourceStreamReader):
    def __init__(self, opts: SourceOptions, info: TableInfo) -> None:
        self.opts, self.info = opts, info
        self._lease: Lease | None = None  # driver side only (not pickled to executors)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_lease": None}

    def _hold(self, ts: int) -> None:
        """Hold the lease on ``ts`` (taken on first use, moved forward after)."""
        ttl = STREAM_LEASE_S if self.opts.lease_s is None else self.opts.lease_s
        if ttl <= 0 or ts <= 0:
            return
        if self._lease is not None and self._lease.lost is None:
            if ts > self._lease.ts:
                try:
                    self._lease.move_to(ts)
                    return
                except LeaseNotFound:
                    self._lease = None
            else:
                return
        self._lease = self._client().lease(ts, ttl, holder=f"change feed of {self.info.name}")

    def _client(self) -> Client:
        return client_for(self.opts.connection)

    def initialOffset(self) -> dict:
        if self.opts.resume_from_job:
            meta = self._client().jobs.last_committed_metadata(self.opts.resume_from_job)
            ts = meta.feed if meta is not None else None
            if ts is not None:
                return {"ts": ts}
        return {"ts": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_rows_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Up to the resolved ts; with ReadMaxRows, about that many changes (never splitting a
        commit); unchanged while the table has no new change. The snapshot batch is whole."""
        s = int(start["ts"])
        resolved = self._client().resolved_ts(self.info.name)
        if s == 0:
            return {"ts": max(resolved, 1)}
        if resolved <= s:
            return start
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else 1 << 62
        end, n = self._client().store.change_boundary(self.info.name, s, resolved, max_rows)
        # No change yet: keep the offset, so an idle table makes no (empty) micro-batches.
        return {"ts": end} if n else start

    def reportLatestOffset(self) -> dict:
        return {"ts": self._client().resolved_ts(self.info.name)}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        s, e = int(start["ts"]), int(end["ts"])
        if s >= e:
            return []
        self._hold(s or e)
        if s == 0:
            return plan_ranges(self.opts, [full_range(self.info)], e, as_changes=True)
        return [ChangePartition(s, e)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            return read_range(self.opts, self.info, partition)
        assert isinstance(partition, ChangePartition)  # one of partitions()
        return read_changes(self.opts, self.info, partition)

    def commit(self, end: dict) -> None:
        """Everything up to ``end`` is consumed: the lease moves there."""
        self._hold(int(end["ts"]))

    def stop(self) -> None:
        """Release the lease (when Spark calls it; see the module docstring), then end the
        process quietly if Spark has hung up on it."""
        try:
            if self._lease is not None:
                self._lease.release()
                self._lease = None
        finally:
            end_if_spark_hung_up()
