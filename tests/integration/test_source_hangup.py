"""Spark's stream source runner, when the JVM hangs up on it, ends quietly (spark_source.hangup).

Each test runs pyspark's real ``python_streaming_source_runner`` module in a child process, with
this test standing in for the JVM over the local TCP socket the runner connects to (after the
same shared-secret handshake Spark uses): it sends the
runner's start-up (python version, files, the pickled data source, its schema), waits for the
runner to report its reader made, then hangs up: a plain close (the runner's next read sees
EOF) or a reset (SO_LINGER 0, as when Spark interrupts its stream thread mid-call). The CI
failure this answers: a three-part traceback on a user's console after ``job.stop()``.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys

import pytest
from pyspark.serializers import CloudPickleSerializer

from spark_source.barrier_source import SCHEMA, BarrierDataSource
from spark_source.datasource import SnapviewDataSource
from tests.integration.plain_stream_source import PlainDataSource

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
SECRET = "hangup-test-secret"


def _utf8(s: str) -> bytes:
    b = s.encode()
    return struct.pack("!i", len(b)) + b


def _read_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        assert chunk, "the runner closed its socket during start-up"
        buf += chunk
    return buf


def _read_int(conn: socket.socket) -> int:
    return struct.unpack("!i", _read_exact(conn, 4))[0]


def run_runner(tmp_path, source, schema_json: str, reset: bool) -> subprocess.CompletedProcess:
    """Start the runner on ``source``, let it make its reader, hang up; its finished process."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(60)
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "PYTHON_WORKER_FACTORY_PORT": str(srv.getsockname()[1]),
        "PYTHON_WORKER_FACTORY_SECRET": SECRET,
    }
    env.pop("PYTHON_WORKER_FACTORY_SOCK_PATH", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", RUNNER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        conn, _ = srv.accept()
        conn.settimeout(60)
        assert _read_exact(conn, _read_int(conn)) == SECRET.encode()
        conn.sendall(_utf8("ok"))
        _read_int(conn)  # the runner's pid
        pickled = CloudPickleSerializer().dumps(source)
        conn.sendall(
            _utf8("{}.{}".format(*sys.version_info[:2]))  # the driver's python version
            + _utf8(str(tmp_path))  # spark files dir
            + struct.pack("!i", 0)  # no python includes
            + struct.pack("!i", len(pickled))
            + pickled
            + _utf8(schema_json)
            + struct.pack("!i", 1024)  # max arrow batch size
        )
        assert _read_int(conn) == 0, "the runner could not make its reader"
        if reset:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        srv.close()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
def test_the_barrier_stream_ends_quietly_when_spark_hangs_up(tmp_path, server, reset):
    source = BarrierDataSource({"job": "some_view", "address": server.address})
    done = run_runner(tmp_path, source, SCHEMA.json(), reset)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_the_change_feed_ends_quietly_when_spark_hangs_up(tmp_path, server, client):
    client.create_table("hangup_feed", "id BIGINT, v BIGINT", primary_key=["id"])
    opts = {"table": "hangup_feed", "address": server.address, "readChangeFeed": "true"}
    source = SnapviewDataSource(opts)
    done = run_runner(tmp_path, source, source.schema().json(), reset=True)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_a_reader_without_the_hook_prints_the_traceback(tmp_path):
    """The fault the tests above must catch: pyspark's own behaviour, with no stop() of ours."""
    done = run_runner(tmp_path, PlainDataSource({}), SCHEMA.json(), reset=True)
    assert done.returncode != 0
    assert "Traceback" in done.stderr and "ConnectionResetError" in done.stderr
