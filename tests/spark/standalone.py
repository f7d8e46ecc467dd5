"""A real Spark standalone cluster on 127.0.0.1 for tests: one master and N workers started from
the pip package's ``bin/spark-class``, as docs/cluster.md has a user start them; and who holds an
LMDB environment open (``lmdb_holders``), which tells a direct prewrite from a gRPC one.

Every process is started here and stopped here, by pid: ``stop()`` stops the workers (and any
executor of theirs still alive) and then the master, each with SIGTERM, then SIGKILL after a
bounded wait. Waits are bounded; a timeout raises with the tail of every daemon's log."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field


def spark_home() -> str:
    """The pip package's directory: it is a SPARK_HOME (bin/spark-class, jars/)."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc), children first."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(0), []):
            out.append(k)
            todo.append(k)
    return out


def _started(pid: int) -> str | None:
    """``pid``'s start time (clock ticks since boot), None if it is gone or a zombie: with the
    pid, it names one process even if the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if rest[0] in ("Z", "X") else rest[19]


def ancestors(pid: int) -> list[int]:
    """``pid``'s parent, its parent's parent, ... up to init."""
    out = []
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
        out.append(pid)
    return out


def lmdb_holders(lmdb_path: str) -> set[int]:
    """The pids that have the LMDB environment at ``lmdb_path`` open: LMDB holds a POSIX lock on
    its lock.mdb for as long as a process has the environment open, and /proc/locks lists it.
    Only ``snapview serve`` should, unless a process prewrites directly (kvstore.direct)."""
    st = os.stat(os.path.join(lmdb_path, "lock.mdb"))
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = set()
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            # "1: POSIX  ADVISORY  READ 4242 fe:00:2211887 0 0" ("->" marks a blocked waiter)
            if parts[1] == "->":
                parts = parts[1:]
            if len(parts) >= 6 and parts[1] == "POSIX" and parts[5] == dev:
                pids.add(int(parts[4]))
    return pids


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen
    log_path: str

    def tail(self, n: int = 3000) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f"--- {self.name} ({self.log_path}) ---\n{f.read()[-n:]}"
        except OSError as e:
            return f"--- {self.name}: no log ({e}) ---"


@dataclass
class StandaloneCluster:
    """``spark://127.0.0.1:PORT`` with ``workers`` workers of ``cores`` cores and ``memory``
    each; work dirs and logs under ``root``. ``start()`` returns once every worker registered
    (the master's JSON says so)."""

    root: str
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    daemon_memory: str = "256m"
    port: int = 0
    ui_port: int = 0
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        conf = os.path.join(self.root, "conf")  # empty: no user spark-defaults or spark-env
        os.makedirs(conf, exist_ok=True)
        return {
            **os.environ,
            "SPARK_HOME": spark_home(),
            "SPARK_CONF_DIR": conf,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_NO_DAEMONIZE": "1",
            # no REST submission server: it would bind port 6066 whatever --port says
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }

    def _spawn(self, name: str, *args: str) -> Daemon:
        log_path = os.path.join(self.root, f"{name}.log")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [os.path.join(spark_home(), "bin", "spark-class"), *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.root,
            )
        d = Daemon(name, proc, log_path)
        self.daemons.append(d)
        return d

    def logs(self) -> str:
        return "\n".join(d.tail() for d in self.daemons)

    def state(self) -> dict:
        """The master's JSON (workers, apps): GET http://127.0.0.1:UI_PORT/json/."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=2) as r:
            return json.loads(r.read())

    def _wait(self, what: str, cond, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [d.name for d in self.daemons if d.proc.poll() is not None]
            if dead:
                raise RuntimeError(
                    f"{', '.join(dead)} exited while waiting for {what}\n{self.logs()}"
                )
            try:
                v = cond()
            except OSError:  # the UI is not up yet
                v = None
            if v:
                return v
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.logs()}")

    def start(self, timeout: float = 60.0) -> StandaloneCluster:
        os.makedirs(self.root, exist_ok=True)
        self.port = self.port or free_port()
        self.ui_port = self.ui_port or free_port()
        try:
            self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1",
                "--port", str(self.port),
                "--webui-port", str(self.ui_port),
            )  # fmt: skip
            self._wait(
                "the master's web UI", lambda: self.state().get("status") == "ALIVE", timeout
            )
            for i in range(self.workers):
                work = os.path.join(self.root, f"work{i}")
                os.makedirs(work, exist_ok=True)
                self._spawn(
                    f"worker{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host", "127.0.0.1",
                    "--port", str(free_port()),
                    "--webui-port", str(free_port()),
                    "--cores", str(self.cores),
                    "--memory", self.memory,
                    "--work-dir", work,
                    self.url,
                )  # fmt: skip
            self._wait(
                f"{self.workers} workers to register",
                lambda: self.state().get("aliveworkers", 0) >= self.workers,
                timeout,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def worker_pids(self) -> list[int]:
        return [d.proc.pid for d in self.daemons if d.name.startswith("worker")]

    def stop(self, timeout: float = 15.0) -> None:
        """Workers first (with whatever executors they still run), then the master; SIGTERM, then
        SIGKILL for any that outlive ``timeout``."""
        order = [d for d in self.daemons if d.name != "master"]
        order += [d for d in self.daemons if d.name == "master"]
        for d in order:
            if d.proc.poll() is not None:
                continue
            # executors and their Python workers, which the worker should stop itself
            below = [(p, _started(p)) for p in children(d.proc.pid)]
            d.proc.send_signal(signal.SIGTERM)
            try:
                d.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                d.proc.kill()
                d.proc.wait()
            deadline = time.monotonic() + 5
            for pid, started in below:
                while started and _started(pid) == started and time.monotonic() < deadline:
                    time.sleep(0.05)
                if started and _started(pid) == started:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
