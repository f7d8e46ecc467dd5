"""A stream source with pyspark's own wrapper and no stop() of ours: the planted fault of
test_source_hangup (importable, so the runner process can unpickle it by reference)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader


class PlainReader(SimpleDataSourceStreamReader):
    def initialOffset(self) -> dict:
        return {"n": 0}

    def read(self, start: dict):
        return iter([]), start


class PlainDataSource(DataSource):
    def simpleStreamReader(self, schema) -> PlainReader:
        return PlainReader()
