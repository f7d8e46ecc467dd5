"""``df.write.format("snapview").mode("append").save()``: one DataFrame as one epoch of the
table's job, exactly once, through Spark's batch writer protocol.

The same protocol as the stream writer (``EpochTaskWriter``): each task opens or attaches to the
epoch of this write's key, ``save:`` and an id drawn when Spark plans the write (so every
``save()`` is its own epoch, as a one-off ``EpochWriter.load`` is), and prewrites its partition;
the driver commits the one attempt when every task succeeded. A failed job is aborted
(``EpochTaskWriter.abort_epoch``): the attempts the tasks reported, and the job's newest epoch
if it is this write's and still open (a task that failed reports nothing), are rolled back, so
nothing of the write becomes visible, and a task of it Spark has not stopped yet cannot open
an epoch again.
"""

from __future__ import annotations

import uuid

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from kvstore.table_info import TableInfo
from spark_sink.stream_writer import EpochTaskWriter
from spark_source.options import SourceOptions


class SnapviewBatchWriter(EpochTaskWriter, DataSourceArrowWriter):
    """The batch writer of ``format("snapview")``: the options ``mode`` (upsert, delete,
    append), ``job`` (default: the table's name) and the connection options, as the stream
    sink's. Made once per ``save()``, on the driver, and pickled to the tasks."""

    def __init__(self, opts: SourceOptions, info: TableInfo) -> None:
        super().__init__(opts, info)
        self.batch = f"save:{uuid.uuid4().hex}"

    def batch_key(self) -> str:
        return self.batch

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.commit_epoch(messages, self.batch)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.abort_epoch(messages, lambda e: e.batch == self.batch and e.owner == self.owner)
