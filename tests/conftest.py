"""Shared fixtures. Integration tests run a real ``snapview serve`` subprocess on 127.0.0.1."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

import coordinator
from kvstore.mvcc.timestamp import compose
from kvstore.store import LocalStore
from snapview.embedded import EmbeddedServer
from snapview.local_spark import local_session


class Clock:
    """A strictly increasing hybrid timestamp source for stores without a TSO process."""

    def __init__(self) -> None:
        self._c = itertools.count(compose(int(time.time() * 1000), 0))

    def __call__(self) -> int:
        return next(self._c)


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m snapview.cli ARGS`` as a user runs it (``env`` on top of ours), captured."""
    return subprocess.run(
        [sys.executable, "-m", "snapview.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


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


def serve(data_dir, *extra_args: str) -> Iterator[EmbeddedServer]:
    """For fixtures (``yield from serve(...)``): a ``snapview serve`` on ``data_dir`` with
    ``extra_args``, stopped in ``finally``."""
    srv = EmbeddedServer(str(data_dir), extra_args=list(extra_args)).start()
    try:
        yield srv
    finally:
        srv.stop()


def connected(server: EmbeddedServer) -> Iterator[coordinator.Client]:
    """For fixtures: a client of ``server``, closed in ``finally``."""
    with coordinator.connect(server.address) as c:
        yield c


def wait_for(cond, timeout: float, what: str = "condition"):
    """``cond()``'s first truthy value, polled every 10 ms for up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory.mktemp("serve"))


@pytest.fixture
def client(server):
    yield from connected(server)


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
    import spark_sink

    s = local_session(app_name="snapview-tests")
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


def self_signed_cert(directory) -> tuple[str, str]:
    """(cert.pem, key.pem) in ``directory``: a self-signed certificate for localhost and
    127.0.0.1, its own CA."""
    import os.path
    import subprocess

    key, cert = os.path.join(directory, "key.pem"), os.path.join(directory, "cert.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", key, "-out", cert, "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    return cert, key
