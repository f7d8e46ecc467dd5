"""``spark.readStream.format("snapview")``: a table's change feed as a stream.

Offsets are ``{"ts": T}``: everything committed at or below T has been emitted. The first batch
is a snapshot at the table's resolved ts, emitted as inserts; each later batch is the net change
in (previous T, new T], where the new T never passes the table's resolved ts (so no commit can
still land inside a batch already emitted). With ``maxRowsPerTrigger`` a batch ends early, at a
commit boundary. A restart resumes from Spark's checkpointed offset; without a checkpoint,
``resumeFromJob`` resumes after the last change that sink job committed (see EpochWriter).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from coordinator.client import Client
from kvstore.table_info import TableInfo
from spark_source.connection import client_for
from spark_source.key_ranges import full_range
from spark_source.options import SourceOptions
from spark_source.readers import (
    ChangePartition,
    RangePartition,
    plan_ranges,
    read_changes,
    read_range,
)


class ChangeFeedStreamReader(DataSourceStreamReader):
    def __init__(self, opts: SourceOptions, info: TableInfo) -> None:
        self.opts, self.info = opts, info

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
        if s == 0:
            return plan_ranges(self.opts, [full_range(self.info)], e, as_changes=True)
        return [ChangePartition(s, e)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            return read_range(self.opts, self.info, partition)
        assert isinstance(partition, ChangePartition)  # one of partitions()
        return read_changes(self.opts, self.info, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: offsets are timestamps, and the store keeps history until GC."""
