"""The ``snapview`` data source with its writers (spark_sink.register installs this one)."""

from __future__ import annotations

from pyspark.sql.types import StructType

from spark_sink.stream_writer import SnapviewStreamWriter
from spark_source.datasource import SnapviewDataSource


class SnapviewSinkDataSource(SnapviewDataSource):
    """``format("snapview")`` for reads and for ``writeStream`` (options mode, job, table)."""

    def streamWriter(self, schema: StructType, overwrite: bool) -> SnapviewStreamWriter:
        from spark_sink.arrow_encoding import ArrowEncoder

        info = self._info()
        ArrowEncoder(info).check_sink([f.name for f in schema.fields], self.opts.mode)
        return SnapviewStreamWriter(self.opts, info)
