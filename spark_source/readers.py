"""Batch readers: a snapshot at a timestamp, and the net changes between two timestamps.

Both are planned on the driver (the timestamp is fixed there, so every partition reads the same
snapshot) and read on executors, which reach the store over gRPC.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from coordinator.errors import LeaseNotFound
from coordinator.process_clients import client_for
from kvstore.table_info import TableInfo
from spark_source.arrow_rows import changes_to_arrow, snapshot_as_changes
from spark_source.key_ranges import KeyRange, full_range
from spark_source.options import SourceOptions


@dataclass
class RangePartition(InputPartition):
    ranges: list[tuple[bytes, bytes]]  # [start, end) key ranges read in order
    ts: int
    as_changes: bool = False  # emit rows as inserts at ts (a stream's initial snapshot)


@dataclass
class ChangePartition(InputPartition):
    from_ts: int
    to_ts: int


BATCH_LEASE_S = 0  # batch reads take no lease unless asked (leaseSeconds)


def take_batch_lease(opts: SourceOptions, ts: int) -> tuple[str, float]:
    """Driver side, when Spark plans the read: a reader lease on ``ts`` for a batch read with
    ``leaseSeconds`` > 0 (its id and when it was taken), else ("", 0). Not renewed here (the
    driver has no hook at the end of a read): partitions renew it (``renew_batch_lease``)."""
    ttl = BATCH_LEASE_S if opts.lease_s is None else opts.lease_s
    if ttl <= 0:
        return "", 0.0
    client = client_for(opts.connection)
    lease = client.lease(ts, ttl, holder=f"spark read of {opts.table}", renew=False)
    return lease.id, time.time()


def renew_batch_lease(opts: SourceOptions, lease: tuple[str, float]) -> None:
    """Executor side: keep the read's lease alive while partitions are being read (a partition
    that starts within the first third of the TTL leaves it alone: one write saved per
    partition of a short read). A lease that lapsed is no error here: if GC passed the read's
    timestamp, the read itself fails with SnapshotTooOld."""
    lease_id, taken = lease
    if not lease_id or time.time() - taken < (opts.lease_s or 0) / 3:
        return
    try:
        client_for(opts.connection).renew_lease(lease_id, opts.lease_s or 1)
    except LeaseNotFound:
        pass


def plan_ranges(
    opts: SourceOptions, ranges: list[KeyRange], ts: int, as_changes: bool = False
) -> list[RangePartition]:
    """Cut key ranges into partitions of about opts.rows_per_partition rows each."""
    client = client_for(opts.connection)
    parts: list[RangePartition] = []
    for r in ranges:
        bounds, _ = client.store.split_range(
            r.start, r.end, opts.rows_per_partition, opts.max_partitions
        )
        edges = [r.start, *bounds, r.end]
        parts += [
            RangePartition([(a, b)], ts, as_changes) for a, b in zip(edges, edges[1:], strict=False)
        ]
    return parts


def read_range(opts: SourceOptions, info: TableInfo, p: RangePartition) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches of one key range at p.ts (executor side)."""
    client = client_for(opts.connection)
    chunks = client.with_lock_wait(
        lambda: [c for a, b in p.ranges for c in client.store.scan(a, b, p.ts)]
    )
    for _, values in chunks:
        if p.as_changes:
            yield snapshot_as_changes(info, values, p.ts)
        else:
            yield info.row_codec.decode_arrow(values)


def read_changes(
    opts: SourceOptions, info: TableInfo, p: ChangePartition
) -> Iterator[pa.RecordBatch]:
    client = client_for(opts.connection)
    changes = client.with_lock_wait(
        lambda: client.store.scan_changes(info.name, p.from_ts, p.to_ts)
    )
    yield changes_to_arrow(info, changes)


class SnapshotReader(DataSourceReader):
    """``spark.read.format("snapview")``: the whole table as of one timestamp, in key-range
    partitions.

    No ``pushFilters``: Spark 4.3 plans a Python source's read (this reader's partitions and
    ``read``) once per loaded DataFrame and reuses that plan for every later query of it, and a
    query whose filters it pushes down plans anew and replaces the plan for all of them (every scan
    of the DataFrame in one query included). A reader narrowed by one query's filters would then
    return only those rows to every other query. So every plan covers the whole table, and Spark
    evaluates the filters."""

    def __init__(self, opts: SourceOptions, info: TableInfo, ts: int) -> None:
        self.opts, self.info, self.ts = opts, info, ts
        self.lease = take_batch_lease(opts, ts)

    def partitions(self) -> list[RangePartition]:
        return plan_ranges(self.opts, [full_range(self.info)], self.ts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)  # one of partitions()
        renew_batch_lease(self.opts, self.lease)
        return read_range(self.opts, self.info, partition)


class ChangeReader(DataSourceReader):
    """``.option("changes_from", t0).option("changes_to", t1)``: net changes in (t0, t1]."""

    def __init__(self, opts: SourceOptions, info: TableInfo) -> None:
        self.opts, self.info = opts, info
        self.lease = take_batch_lease(opts, opts.changes_from or 0)

    def partitions(self) -> list[ChangePartition]:
        o = self.opts
        # SourceOptions.parse sets both or neither; SnapviewDataSource.reader saw them set.
        assert o.changes_from is not None and o.changes_to is not None
        return [ChangePartition(o.changes_from, o.changes_to)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangePartition)  # one of partitions()
        renew_batch_lease(self.opts, self.lease)
        return read_changes(self.opts, self.info, partition)
