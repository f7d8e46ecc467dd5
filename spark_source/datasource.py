"""The ``snapview`` Python data source (read side). spark_sink extends it with writers."""

from __future__ import annotations

from collections.abc import MutableMapping

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from coordinator.process_clients import client_for
from kvstore.errors import InvalidArgument
from kvstore.table_info import TableInfo
from spark_source.options import SourceOptions
from spark_source.readers import ChangeReader, SnapshotReader
from spark_source.spark_types import table_struct
from spark_source.stream_reader import ChangeFeedStreamReader


class SnapviewDataSource(DataSource):
    """``format("snapview")``; see SourceOptions for the options.

    Batch: a snapshot (option ``at``, default latest) or net changes (``changes_from`` and
    ``changes_to``, adding ``_change_type`` and ``_commit_ts``). Streaming: the change feed, which
    needs ``.option("readChangeFeed", "true")`` (Delta's convention): Spark asks a data source for
    its schema without saying whether the read is a stream, so a stream must ask for the change
    columns explicitly."""

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        self.opts = SourceOptions.parse(options)
        self.read_change_feed = str(self.options.get("readChangeFeed", "false")).lower() == "true"

    @classmethod
    def name(cls) -> str:
        return "snapview"

    def _info(self) -> TableInfo:
        return client_for(self.opts.connection).describe_table(self.opts.table, refresh=True)

    def schema(self) -> StructType:
        with_changes = self.read_change_feed or self.opts.changes_from is not None
        return table_struct(self._info(), with_changes)

    def reader(self, schema: StructType) -> SnapshotReader | ChangeReader:
        info = self._info()
        if self.opts.changes_from is not None:
            return ChangeReader(self.opts, info)
        return SnapshotReader(self.opts, info, self.read_ts())

    def read_ts(self) -> int:
        """The snapshot's timestamp: ``at``; the table's read ts at ``barrier`` or at its newest
        barrier (``consistent``); else a fresh timestamp (the latest state)."""
        client = client_for(self.opts.connection)
        o = self.opts
        if o.barrier is not None or o.consistent:
            return client.snapshot([o.table], barrier=o.barrier or 0).read_ts(o.table)
        return o.at or client.tso()

    def streamReader(self, schema: StructType) -> ChangeFeedStreamReader:
        if not self.read_change_feed:
            raise InvalidArgument(
                f"table {self.opts.table!r}: a snapview stream is a change feed; add "
                ".option('readChangeFeed', 'true') (rows then carry _change_type and _commit_ts)"
            )
        return ChangeFeedStreamReader(self.opts, self._info())
