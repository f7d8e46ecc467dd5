"""View jobs on a real Spark standalone cluster, as docs/cluster.md has a user run them: a master
and two workers from the pip package's spark-class on 127.0.0.1, ``snapview serve`` with TLS and
a token, and a driver (tests/spark/cluster_job.py, a subprocess) whose executors reach the store
over gRPC only (SNAPVIEW_DIRECT=off everywhere), as on hosts other than the server's.

Checked from here: the views equal Spark's batch result of their queries at every barrier
checked; the app ran on the master, with an executor launched by each worker, and every task ran
in a Python worker below a Worker's JVM, not in the driver; and no process but the server ever
had the store's LMDB environment open (sampled from /proc/locks every 20 ms throughout: a direct
prewrite keeps it open in the executor's Python worker)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from snapview.embedded import EmbeddedServer
from tests.conftest import self_signed_cert
from tests.spark.standalone import StandaloneCluster, children, lmdb_holders

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.cluster


class HolderSampler:
    """Every pid /proc/locks shows holding the LMDB environment, sampled in a thread."""

    def __init__(self, lmdb_path: str, every: float = 0.02) -> None:
        self.lmdb_path, self.every = lmdb_path, every
        self.pids: set[int] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.pids |= lmdb_holders(self.lmdb_path)
            self.samples += 1
            self._stop.wait(self.every)

    def __enter__(self) -> HolderSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def driver_env(port: int, **more: str) -> dict:
    """The environment of a driver subprocess: this interpreter for every Python worker, the
    server at ``port`` (``more``: its token and TLS settings), no direct LMDB access anywhere."""
    return {
        **os.environ,
        "PYTHONPATH": ROOT,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SNAPVIEW_ADDRESS": f"localhost:{port}",
        "SNAPVIEW_DIRECT": "off",
        **more,
    }


def run_driver(cmd: list[str], env: dict, log, timeout: float) -> tuple[str, int | None]:
    """(stdout, exit status) of the driver; on a timeout it and every process below it (its
    Spark JVM) are killed, by pid, and the status is None."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out, proc.returncode
    except subprocess.TimeoutExpired:
        below = children(proc.pid)
        proc.kill()
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out, _ = proc.communicate()
        return out, None


def test_view_jobs_on_a_standalone_cluster_over_grpc_with_tls_and_token(tmp_path):
    started = time.monotonic()
    cert, key = self_signed_cert(str(tmp_path))
    token = tmp_path / "token"
    token.write_text("cluster-s3cret\n")
    data = tmp_path / "data"
    srv = EmbeddedServer(
        str(data),
        extra_args=["--tls-cert", cert, "--tls-key", key, "--token-file", str(token)]
        + ["--barrier-interval", "200ms"],
    )
    cluster = StandaloneCluster(str(tmp_path / "cluster"), workers=2, cores=1, memory="1g")
    driver_log = tmp_path / "driver.log"
    try:
        srv.start()
        cluster.start(timeout=60)
        env = driver_env(srv.port, SNAPVIEW_TOKEN_FILE=str(token), SNAPVIEW_TLS_CA=cert)

        def failed(why: str) -> str:
            with open(driver_log, errors="replace") as f:
                tail = f.read()[-4000:]
            return f"{why}\n--- driver stderr ---\n{tail}\n{cluster.logs()}"

        with HolderSampler(str(data / "lmdb")) as holders, open(driver_log, "w") as log:
            stdout, code = run_driver(
                [sys.executable, "-m", "tests.spark.cluster_job", cluster.url], env, log, 170
            )
        assert code is not None, failed("the driver did not finish within 170 s")
        app_state = cluster.state()

        line = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        assert code == 0 and line, failed(f"driver exited {code}")
        res = json.loads(line[0][len("RESULT ") :])
        (tmp_path / "result.json").write_text(json.dumps(res, indent=1))

        # the views: equal to Spark's batch result at every barrier checked, no job failed
        assert "mismatch" not in res, failed(f"view differs from Spark: {res['mismatch']}")
        assert len(res["checked"]) == 3 and all(c["equal"] for c in res["checked"]), res
        assert res["failure"] == "", res["failure"]
        barriers = [c["barrier"] for c in res["checked"]]
        assert barriers == sorted(barriers) and len(set(barriers)) == 3, barriers
        assert [c["rows"] for c in res["checked"]] == [10, 11, 12], res["checked"]

        # the app ran at the master, with one executor launched by each worker
        apps = app_state["activeapps"] + app_state["completedapps"]
        assert res["app_id"] in [a["id"] for a in apps], apps
        for i in range(2):
            work = tmp_path / "cluster" / f"work{i}" / res["app_id"]
            assert work.is_dir() and os.listdir(work), failed(f"worker{i} ran no executor")
        assert len(res["executors"]) == 3, res["executors"]  # two executors and the driver

        # every task ran in a Python worker below a Worker's JVM, none in the driver, and every
        # one saw SNAPVIEW_DIRECT=off
        workers = set(cluster.worker_pids())
        executors = set()  # (worker, the executor JVM it launched)
        for pid, above, direct in res["tasks"]:
            assert pid != res["driver_pid"] and res["driver_pid"] not in above, res["tasks"]
            assert direct == "off", res["tasks"]
            at = [i for i, p in enumerate(above) if p in workers]
            assert at and at[0] > 0, f"task in pid {pid} is not below a worker {workers}: {above}"
            executors.add((above[at[0]], above[at[0] - 1]))
        assert len(executors) == 2 and len({w for w, _ in executors}) == 2, executors

        # no process but the server ever had the LMDB environment open: nothing prewrote directly
        assert holders.samples > 100, holders.samples
        assert srv.proc is not None and srv.proc.pid in holders.pids, holders.pids
        assert holders.pids == {srv.proc.pid}, failed(
            f"processes other than the server ({srv.proc.pid}) opened the store's LMDB "
            f"environment: {holders.pids - {srv.proc.pid}}"
        )
        took = time.monotonic() - started
        print(f"\nstandalone cluster test: {took:.1f} s; driver steps {res['steps']}")
        print(res["progress"]["text"])
    finally:
        cluster.stop()
        srv.stop()


@pytest.mark.timeout(2700)
def test_a_million_change_barrier_runs_on_the_executors_of_a_standalone_cluster(tmp_path):
    """One barrier of CLUSTER_CHANGES changed keys (default 1,000,000: every row of ``acc`` moved
    to another group) kept by a delta on the executors of a two-worker standalone cluster, over
    gRPC, beside a full recompute of the same view in the same run; both equal Spark's batch
    result at that barrier (tests/spark/cluster_big_delta.py). Prints both epochs' seconds."""
    data = tmp_path / "data"
    srv = EmbeddedServer(str(data), extra_args=["--barrier-interval", "1s"])
    cluster = StandaloneCluster(str(tmp_path / "cluster"), workers=2, cores=1, memory="1g")
    driver_log = tmp_path / "driver.log"
    try:
        srv.start()
        cluster.start(timeout=60)
        env = driver_env(srv.port)
        with open(driver_log, "w") as log:
            cmd = [sys.executable, "-m", "tests.spark.cluster_big_delta", cluster.url]
            stdout, code = run_driver(cmd, env, log, 2500)
        with open(driver_log, errors="replace") as f:
            tail = f.read()[-4000:]
        line = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        assert code == 0 and line, f"driver exited {code}\n{tail}\n{cluster.logs()}"
        res = json.loads(line[0][len("RESULT ") :])
        (tmp_path / "result.json").write_text(json.dumps(res, indent=1))
        ex, full = res["views"]["executors"], res["views"]["full"]
        assert ex["equal"] and full["equal"], res
        assert ex["path"] == "executors" and "on the executors" in ex["why"], ex
        assert ex["changes"] >= 2 * res["rows"], ex  # every key's two images were read
        print(
            f"\n{res['rows']:,} changed keys on a 2-worker cluster: delta on the executors "
            f"{ex['epoch_s']:.1f} s, full recompute {full['epoch_s']:.1f} s "
            f"({full['epoch_s'] / ex['epoch_s']:.2f}x); steps {res['steps']}"
        )
    finally:
        cluster.stop()
        srv.stop()
