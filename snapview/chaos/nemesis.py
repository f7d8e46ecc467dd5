"""The nemesis: faults paired with their recoveries, applied to a running cluster.

    kill-server        kill -9 of snapview serve, then a restart on the same data dir and port
    kill-view-driver   kill -9 of the job driver (view jobs, or the append stream; its JVM too),
                       then a new driver
    kill-executor      kill -9 of one Spark executor (local-cluster masters only); Spark replaces it
    kill-writer        kill -9 of a transfer process, then a new one
    pause-server       SIGSTOP of the server for longer than a lock TTL, then SIGCONT
    failpoint          restart the server with a fail point armed (a panic at one protocol step),
                       wait for it to fire, restart it disarmed

Each fault's recovery time is the time until the probe job (a view, or the append stream)
commits an epoch again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import coordinator

if TYPE_CHECKING:
    import random

    from snapview.embedded import EmbeddedServer

FAULTS = (
    "kill-server",
    "kill-view-driver",
    "kill-executor",
    "kill-writer",
    "pause-server",
    "failpoint",
)
SERVER_FAILPOINTS = (
    "epoch.opened=panic",
    "epoch.commit.after_primary=panic",
    "epoch.commit.resolved=panic",
    "epoch.barrier.recorded=panic",
    "store.prewrite.start=20%panic",
    "store.prewrite.done=20%panic",
    "tso.window.persisted=panic",
    "barrier.issued=panic",
)
PAUSE_S = 4.0  # longer than the writers' 3 s lock TTL


@dataclass
class FaultRecord:
    kind: str
    detail: str
    at: float
    recovery_s: float | None  # None: not recovered within the bound


class Cluster:
    """The processes under test: the server, the view driver, the writers."""

    def __init__(
        self,
        server: EmbeddedServer,
        history_dir: str,
        work_dir: str,
        rate: float,
        accounts: int,
        seed: int,
        driver_args: list[str],
        probe_job: str,
    ) -> None:
        self.server = server
        self.driver_args = driver_args  # `python -m` arguments of the job driver, less STOP_FILE
        self.probe_job = probe_job  # the job whose next commit marks a recovery
        self.history_dir = history_dir
        self.work_dir = work_dir
        self.rate = rate
        self.accounts = accounts
        self.seed = seed
        self.view_driver: subprocess.Popen | None = None
        self.writers: dict[str, subprocess.Popen] = {}
        self._next_writer = 0
        self.stop_file = os.path.join(work_dir, "stop-views")
        self.tso_samples: list[tuple[str, int]] = []

    # ---------------------------------------------------------------- processes

    def start_view_driver(self, timeout: float = 180) -> None:
        if os.path.exists(self.stop_file):
            os.remove(self.stop_file)
        log = open(os.path.join(self.work_dir, "view-driver.log"), "ab")  # noqa: SIM115
        proc = self.view_driver = subprocess.Popen(
            [sys.executable, "-m", *self.driver_args, self.stop_file],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )
        log.close()
        assert proc.stdout is not None  # stdout=PIPE
        line = proc.stdout.readline().strip()
        if line != "STARTED":
            raise RuntimeError(f"view driver did not start: {line!r}")

    def kill_view_driver(self) -> None:
        if self.view_driver is not None and self.view_driver.poll() is None:
            os.killpg(self.view_driver.pid, signal.SIGKILL)
            self.view_driver.wait()

    def stop_view_driver(self) -> None:
        if self.view_driver is not None and self.view_driver.poll() is None:
            open(self.stop_file, "w").close()
            try:
                self.view_driver.wait(60)
            except subprocess.TimeoutExpired:
                self.kill_view_driver()

    def start_writer(self) -> str:
        self._next_writer += 1
        name = f"w{self._next_writer}"
        self.writers[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "snapview.chaos.workloads.bank",
                "writer",
                self.server.address,
                name,
                self.history_dir,
                str(self.seed * 1000 + self._next_writer),
                str(self.rate),
                str(self.accounts),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return name

    def kill_writers(self) -> None:
        for p in self.writers.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    def sample_tso(self, label: str) -> None:
        with coordinator.connect(self.server.address) as c:
            self.tso_samples.append((label, c.tso()))

    def server_alive(self) -> bool:
        return self.server.proc is not None and self.server.proc.poll() is None

    def supervise(self) -> list[str]:
        """Restart whatever died on its own (as a process supervisor would); what it did."""
        did = []
        if not self.server_alive():
            self.server.start()
            self.sample_tso("after an unplanned server restart")
            did.append("server")
        if self.view_driver is None or self.view_driver.poll() is not None:
            self.kill_view_driver()
            self.start_view_driver()
            did.append("view-driver")
        return did


def newest_commit(address: str, job: str) -> int:
    with coordinator.connect(
        address, retry=coordinator.RetryPolicy(max_attempts=2, max_elapsed_s=1)
    ) as c:
        try:
            return c.jobs.get_epoch(job).commit_ts
        except coordinator.SnapviewError:
            return 0


def wait_recovered(cluster: Cluster, since: int, t0: float, bound: float = 120) -> float | None:
    """Seconds from ``t0`` until the probe view commits an epoch newer than ``since``."""
    while time.monotonic() - t0 < bound:
        if newest_commit(cluster.server.address, cluster.probe_job) > since:
            return time.monotonic() - t0
        cluster.supervise()
        time.sleep(0.05)
    return None


class Nemesis:
    def __init__(self, cluster: Cluster, rng: random.Random, faults: list[str]) -> None:
        self.c = cluster
        self.rng = rng
        self.faults = faults
        self.records: list[FaultRecord] = []

    def step(self) -> FaultRecord:
        kind = self.rng.choice(self.faults)
        before = newest_commit(self.c.server.address, self.c.probe_job)
        t0 = time.monotonic()
        detail = getattr(self, "_" + kind.replace("-", "_"))()
        rec = FaultRecord(kind, detail, time.time(), wait_recovered(self.c, before, t0))
        self.records.append(rec)
        return rec

    def _kill_server(self) -> str:
        self.c.sample_tso("before kill-server")
        self.c.server.kill()
        self.c.server.start()
        self.c.sample_tso("after kill-server")
        return "kill -9 and restart"

    def _kill_view_driver(self) -> str:
        self.c.kill_view_driver()
        self.c.start_view_driver()
        return "kill -9 of the driver and its JVM, new driver"

    def _kill_executor(self) -> str:
        pids = executor_pids(self.c.view_driver.pid) if self.c.view_driver else []
        if not pids:
            return "no executor process (not a local-cluster master)"
        pid = self.rng.choice(pids)
        os.kill(pid, signal.SIGKILL)
        return f"kill -9 of executor pid {pid}"

    def _kill_writer(self) -> str:
        live = [n for n, p in self.c.writers.items() if p.poll() is None]
        name = self.rng.choice(live)
        self.c.writers[name].kill()
        self.c.writers[name].wait()
        new = self.c.start_writer()
        return f"kill -9 of writer {name}, new writer {new}"

    def _pause_server(self) -> str:
        proc = self.c.server.proc
        assert proc is not None  # the cluster's server is running
        pid = proc.pid
        os.kill(pid, signal.SIGSTOP)
        time.sleep(PAUSE_S)
        os.kill(pid, signal.SIGCONT)
        return f"SIGSTOP for {PAUSE_S:g}s (> lock TTL), SIGCONT"

    def _failpoint(self) -> str:
        spec = self.rng.choice(SERVER_FAILPOINTS)
        self.c.sample_tso("before failpoint")
        self.c.server.kill()
        self.c.server.env = {
            "SNAPVIEW_FAILPOINTS": spec,
            "SNAPVIEW_FAILPOINTS_SEED": str(self.rng.randrange(1 << 30)),
        }
        try:
            self.c.server.start()
            fired = self.c.server.wait_dead(20)
        except RuntimeError:
            fired = True  # it fired while the server started (TSO window, first barrier)
        if not fired:
            self.c.server.kill()
        self.c.server.env = None
        self.c.server.start()
        self.c.sample_tso("after failpoint")
        return f"{spec} ({'fired' if fired else 'did not fire in 20s'})"


def executor_pids(driver_pid: int) -> list[int]:
    """Spark executor JVMs below the driver (local-cluster mode)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if b"CoarseGrainedExecutorBackend" in cmd and os.getsid(int(pid)) == driver_pid:
                out.append(int(pid))
        except (OSError, ProcessLookupError):
            continue
    return out
