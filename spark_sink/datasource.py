"""The ``snapview`` data source with its writers (spark_sink.register installs this one)."""

from __future__ import annotations

from pyspark.sql.types import StructType

from kvstore.errors import InvalidArgument
from kvstore.table_info import TableInfo
from spark_sink.batch_writer import SnapviewBatchWriter
from spark_sink.stream_writer import SnapviewStreamWriter
from spark_source.datasource import SnapviewDataSource


class SnapviewSinkDataSource(SnapviewDataSource):
    """``format("snapview")`` for reads, for ``write`` (``.mode("append")``) and for
    ``writeStream`` (options mode, job, table)."""

    def _sink_info(self, schema: StructType) -> TableInfo:
        from spark_sink.arrow_encoding import ArrowEncoder

        info = self._info()
        ArrowEncoder(info).check_sink([f.name for f in schema.fields], self.opts.mode)
        return info

    def streamWriter(self, schema: StructType, overwrite: bool) -> SnapviewStreamWriter:
        return SnapviewStreamWriter(self.opts, self._sink_info(schema))

    def writer(self, schema: StructType, overwrite: bool) -> SnapviewBatchWriter:
        """One ``save()`` as one epoch. Spark's ``mode("append")`` adds the DataFrame as the
        option ``mode`` says (upsert by key, delete the keys named, append to an append-only
        table); ``mode("overwrite")`` is refused: the sink cannot replace a table's contents in
        one epoch, and a replace that is not one transaction would show readers a half-empty
        table."""
        if overwrite:
            raise InvalidArgument(
                f"table {self.opts.table!r}: snapview cannot overwrite a table in one epoch; "
                'write with .mode("append") and the option mode (upsert, the default: replace '
                "rows by primary key; delete: remove the keys named; append: add rows to an "
                "append-only table)"
            )
        return SnapviewBatchWriter(self.opts, self._sink_info(schema))
