"""``df.writeStream.format("snapview")``: the same exactly-once epochs as EpochWriter, driven by
Spark's data source writer protocol.

Spark gives the writer no hook before a batch's tasks start, so the tasks open the epoch: each
asks the coordinator for the epoch of the batch's key under this writer's owner id. The first
opens it, the rest (and retried tasks) attach to the same attempt; an attempt left by a crashed
run (another owner) is rolled back and reopened. The driver then commits the epoch.
``EpochTaskWriter`` is that protocol, shared with the batch writer (spark_sink.batch_writer);
the stream's key is (query id, batch id).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from coordinator.client import Client
from coordinator.epoch_attempt import EpochAttempt, feed_metadata
from coordinator.jobs import EpochInfo, EpochState
from coordinator.process_clients import client_for
from kvstore.errors import FailedPrecondition, SnapviewError
from kvstore.table_info import TableInfo
from spark_sink.epoch_writer import DEFAULT_TTL_MS, QUERY_ID_PROPERTY
from spark_sink.partition_writer import direct_info, task_context, write_batches
from spark_source.options import SourceOptions

BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class EpochMessage(WriterCommitMessage):
    epoch: int
    start_ts: int
    rows: int
    high: int
    skipped: bool = False


class EpochTaskWriter:
    """The tasks-open, driver-commits epoch protocol of ``format("snapview")``'s writers.

    Every task opens (or attaches to) the epoch of ``batch_key()`` under this writer's owner id
    and prewrites its partition into it; the driver commits the one attempt the tasks wrote
    into (``commit_epoch``). A subclass supplies the key and Spark's commit/abort methods."""

    def __init__(self, opts: SourceOptions, info: TableInfo) -> None:
        self.opts, self.info = opts, info
        self.job = opts.job or info.name
        self.owner = uuid.uuid4().hex  # one per writer instance: a restarted query gets another
        # One writer per table: a second job writing it is refused here, before any epoch.
        self._client().jobs.register_job(self.job, info.name, [], kind="sink")

    def _client(self) -> Client:
        return client_for(self.opts.connection)

    def batch_key(self) -> str:
        """The key of the epoch this task writes into (called in the task)."""
        raise NotImplementedError

    def write(self, iterator: Iterator[pa.RecordBatch]) -> EpochMessage:
        tc = task_context()
        batch = self.batch_key()
        client = self._client()
        attempt = EpochAttempt.open(
            client, self.job, ttl_ms=DEFAULT_TTL_MS, batch=batch, owner=self.owner
        )
        if attempt.committed:
            for _ in iterator:
                pass
            return EpochMessage(attempt.epoch, attempt.start_ts, 0, -1, skipped=True)
        target = attempt.target(
            self.opts.connection,
            None,
            self.info,
            self.opts.mode,
            direct_info(client),
        )
        rows, high = write_batches(target, iterator, tc.partitionId())
        return EpochMessage(attempt.epoch, attempt.start_ts, rows, high)

    def commit_epoch(self, messages: list[WriterCommitMessage | None], batch: str | int) -> None:
        """Commit the attempt the tasks wrote into (nothing if every task skipped a committed
        epoch, or there were no tasks). Tasks that wrote into different attempts (the first was
        rolled back under them) fail the commit: the caller's abort then rolls them back."""
        done = [m for m in messages if isinstance(m, EpochMessage) and not m.skipped]
        if not done:
            return
        attempts = {(m.epoch, m.start_ts) for m in done}
        if len(attempts) != 1:
            raise FailedPrecondition(
                f"job {self.job!r} batch {batch}: tasks wrote into "
                f"different epoch attempts {sorted(attempts)}"
            )
        epoch, start_ts = attempts.pop()
        client = self._client()
        rows, high = sum(m.rows for m in done), max(m.high for m in done)
        meta = feed_metadata(client, self.job, batch, rows, high)
        EpochAttempt.of(client, self.job, epoch, start_ts, DEFAULT_TTL_MS).commit(meta)

    def abort_epoch(
        self, messages: list[WriterCommitMessage | None], ours: Callable[[EpochInfo], bool]
    ) -> None:
        """Roll back, best effort, the attempts the tasks reported and the job's open epoch if
        ``ours`` says it is this write's: a task stopped mid-write (a failed task, ``q.stop()``)
        reports nothing, yet it may have opened the epoch. The server then retires the
        attempt's owner, so a task of this write still running (Spark cancels tasks
        asynchronously) cannot open the epoch again, nor roll back the next write's attempt
        by opening the job's next one (coordinator.server.epochs ``_retire``). What cannot be
        told here (a driver killed, the server away) lapses after the server's ``--epoch-ttl``
        without heartbeats."""
        client = self._client()
        attempts = {(m.epoch, m.start_ts) for m in messages if isinstance(m, EpochMessage)}
        try:
            newest = client.jobs.get_epoch(self.job, 0)
        except SnapviewError:  # no epoch, or the server is away: the hold lapses by itself
            newest = None
        if newest is not None and newest.state is EpochState.PREWRITE and ours(newest):
            attempts.add((newest.epoch, newest.start_ts))
        for epoch, start_ts in attempts:
            EpochAttempt.of(client, self.job, epoch, start_ts, DEFAULT_TTL_MS).abort()


class SnapviewStreamWriter(EpochTaskWriter, DataSourceStreamArrowWriter):
    def batch_key(self) -> str:
        tc = task_context()
        return f"{tc.getLocalProperty(QUERY_ID_PROPERTY)}:{tc.getLocalProperty(BATCH_ID_PROPERTY)}"

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.commit_epoch(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Roll the batch's epoch back (``abort_epoch``). Spark may call this on a writer of its
        own (another ``owner``), so the open epoch is recognised by its batch id."""
        self.abort_epoch(messages, lambda e: e.batch.rpartition(":")[2] == str(batchId))
