"""Shared fixtures. Integration tests run a real ``snapview serve`` subprocess on 127.0.0.1."""

from __future__ import annotations

import itertools
import time

import pytest

import coordinator
from coordinator.embedded import EmbeddedServer
from kvstore.mvcc.timestamp import compose
from kvstore.store import LocalStore


class Clock:
    """A strictly increasing hybrid timestamp source for stores without a TSO process."""

    def __init__(self) -> None:
        self._c = itertools.count(compose(int(time.time() * 1000), 0))

    def __call__(self) -> int:
        return next(self._c)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path, clock):
    s = LocalStore(str(tmp_path / "lmdb"), clock=clock, sync=False)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = EmbeddedServer(str(tmp_path_factory.mktemp("serve"))).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server):
    c = coordinator.connect(server.address)
    try:
        yield c
    finally:
        c.close()


_names = itertools.count()


@pytest.fixture
def table_name(request) -> str:
    """A table name unique within the module's server."""
    return (
        f"t{next(_names)}_{request.node.name[:20]}".replace("[", "_")
        .replace("]", "_")
        .replace("-", "_")
    )


@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the whole run (local[2]), with format("snapview") registered."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_sink

    s = (
        SparkSession.builder.master("local[2]")
        .appName("snapview-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    spark_sink.register(s)
    try:
        yield s
    finally:
        s.stop()


def snapview_reader(spark, address: str, table: str, **options):
    r = spark.read.format("snapview").option("coordinator", address).option("table", table)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()
