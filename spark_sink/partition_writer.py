"""The executor side of an epoch: prewrite one Spark partition's rows as secondaries of the
epoch's primary. Idempotent: a retried task prewrites the same keys under the same start_ts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from kvstore.catalog import TableInfo
from kvstore.failpoints import fail_point
from spark_sink.arrow_encoding import ArrowEncoder
from spark_source.connection import client_for
from spark_source.options import CHANGE_TYPE, COMMIT_TS

PREWRITE_CHUNK = 8192


@dataclass(frozen=True)
class EpochTarget:
    """What a task needs to prewrite into one epoch (pickled to executors)."""

    coordinator: str
    token: str | None
    info: TableInfo
    mode: str
    job: str
    epoch: int
    start_ts: int
    primary: bytes
    ttl_ms: int


class Heartbeat:
    """Keeps an epoch's primary lock alive while work on it goes on (every ttl/3)."""

    def __init__(self, target: EpochTarget):
        self.target = target
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="epoch-heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        t = self.target
        client = client_for(t.coordinator, t.token)
        while not self._stop.wait(t.ttl_ms / 3000):
            try:
                client.heartbeat_transaction(t.job, t.epoch, t.start_ts, t.ttl_ms)
            except Exception:  # noqa: BLE001 - the commit will tell whether the epoch survived
                return


def strip_feed_columns(batch: pa.RecordBatch, info: TableInfo) -> tuple[pa.RecordBatch, int]:
    """Drop the change-feed columns a table does not have; returns (batch, max _commit_ts)."""
    high = -1
    names = batch.schema.names
    if COMMIT_TS in names and batch.num_rows:
        m = pc.max(batch.column(COMMIT_TS)).as_py()
        high = -1 if m is None else m
    table_cols = {c.name for c in info.table_schema.columns}
    drop = [i for i, n in enumerate(names) if n in (CHANGE_TYPE, COMMIT_TS) and n not in table_cols]
    for i in reversed(drop):
        batch = batch.remove_column(i)
    return batch, high


def write_batches(
    target: EpochTarget, batches: Iterator[pa.RecordBatch], partition: int
) -> tuple[int, int]:
    """Prewrite every row of ``batches``; returns (rows, highest _commit_ts seen or -1)."""
    client = client_for(target.coordinator, target.token)
    enc = ArrowEncoder(target.info)
    rows, high, index, chunks = 0, -1, 0, 0
    with Heartbeat(target):
        for batch in batches:
            batch, h = strip_feed_columns(batch, target.info)
            high = max(high, h)
            for start in range(0, batch.num_rows, PREWRITE_CHUNK):
                part = batch.slice(start, PREWRITE_CHUNK)
                muts = enc.mutations(part, target.mode, target.epoch, partition, index)
                index += part.num_rows
                client.prewrite(muts, target.primary, target.start_ts, target.ttl_ms)
                rows += part.num_rows
                chunks += 1
                if chunks == 1:
                    fail_point("sink.prewrite.mid")
    return rows, high
