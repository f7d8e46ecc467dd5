"""Shared fixtures. Integration tests run a real ``snapview serve`` subprocess on 127.0.0.1."""

from __future__ import annotations

import inspect
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

# The Spark drivers tests start in processes of their own (view jobs killed and restarted, users'
# scripts, the chaos and lifecycle drivers) live for seconds to a minute: the JVM's C1 compiler
# alone and the serial collector start them faster on 2 cores (the kill-mid-epoch test, all of
# whose JVMs are such drivers: 98 s with the defaults, 84 s with these). This is the test
# process's environment, inherited by those children only; the session's own JVM, which lives
# for the whole run, keeps the JVM's defaults (the ``spark`` fixture).
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", SHORT_LIVED_JVM)


class Clock:
    """A strictly increasing hybrid timestamp source for stores without a TSO process."""

    def __init__(self) -> None:
        self._c = itertools.count(compose(int(time.time() * 1000), 0))

    def __call__(self) -> int:
        return next(self._c)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(
    script: str, *args: str, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """A user's script in a fresh process on this venv's Python, as a user runs it: without
    PYSPARK_PYTHON, the repository on PYTHONPATH, ``env`` on top (a value None unsets it);
    output captured as text."""
    full = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    full["PYTHONPATH"] = ROOT
    for k, v in (env or {}).items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    return subprocess.run(
        [sys.executable, script, *args], capture_output=True, text=True, timeout=timeout, env=full
    )


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


def serve(data_dir, *extra_args: str, env: dict | None = None) -> Iterator[EmbeddedServer]:
    """For fixtures (``yield from serve(...)``): a ``snapview serve`` on ``data_dir`` with
    ``extra_args`` (and ``env`` on top of ours), stopped in ``finally``."""
    srv = EmbeddedServer(str(data_dir), extra_args=list(extra_args), env=env).start()
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


def server_fixture(name: str, *extra_args: str, scope: str = "module", env: dict | None = None):
    """A fixture of a ``snapview serve`` with ``extra_args`` (and ``env`` on top of ours), so a
    module declares its server in one line; the fixture is named by what it is assigned to::

        views_server = server_fixture("views", "--barrier-interval", "200ms")
        vc = client_fixture("views_server")

    The data dir is a new directory ``name`` of ``tmp_path_factory`` for a module (or session)
    server, ``tmp_path / name`` for a function-scoped one (``scope="function"``). A server that
    needs files written before it starts (token files, certificates) and hands their paths to
    the tests keeps a fixture of its own around ``serve``."""
    doc = f"``snapview serve {' '.join(extra_args)}`` on a new data dir {name!r}."
    if scope == "function":

        def function_server(tmp_path):
            yield from serve(tmp_path / name, *extra_args, env=env)

        function_server.__doc__ = doc
        return pytest.fixture(function_server)

    def shared_server(tmp_path_factory):
        yield from serve(tmp_path_factory.mktemp(name), *extra_args, env=env)

    shared_server.__doc__ = doc
    return pytest.fixture(shared_server, scope=scope)


def client_fixture(server: str):
    """A fixture of a client of the server fixture named ``server``, one per test, closed after
    it (``c = client_fixture("srv")``). It asks for ``server`` by name, as a parameter would."""

    def client_of_server(**fixtures):
        yield from connected(fixtures[server])

    client_of_server.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(server, inspect.Parameter.KEYWORD_ONLY)]
    )
    client_of_server.__doc__ = f"A client of ``{server}``, closed after the test."
    return pytest.fixture(client_of_server)


server = server_fixture("serve")
client = client_fixture("server")


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

    ours = os.environ.get("SPARK_SUBMIT_OPTS") == SHORT_LIVED_JVM
    if ours:  # this JVM lives for the whole run: the JVM's defaults
        del os.environ["SPARK_SUBMIT_OPTS"]
    try:
        s = local_session(app_name="snapview-tests")
    finally:
        if ours:
            os.environ["SPARK_SUBMIT_OPTS"] = SHORT_LIVED_JVM
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
