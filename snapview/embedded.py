"""Start and stop a ``snapview serve`` subprocess: the embedded default, used by the demo, the
benchmarks and the integration tests alike."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from kvstore.private_files import make_private_dirs

READY_PREFIX = "snapview serving on "
METRICS_PREFIX = "metrics="


class EmbeddedServer:
    """A ``snapview serve`` child process on 127.0.0.1.

    ``start()`` returns once the server prints its ready line; ``kill()`` is kill -9;
    ``restart()`` starts a new process on the same data dir and port. With ``metrics_port``
    (0: a free one) the server serves Prometheus metrics at ``metrics_address``."""

    def __init__(
        self,
        data_dir: str | None = None,
        port: int = 0,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        log_path: str | None = None,
        metrics_port: int | None = None,
    ) -> None:
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="snapview-")
        self.port = port
        self.extra_args = list(extra_args)
        self.env = env
        self.log_path = log_path or os.path.join(self.data_dir, "serve.log")
        self.metrics_port = metrics_port
        self.metrics_address: str | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> EmbeddedServer:
        cmd = [
            sys.executable,
            "-m",
            "snapview.cli",
            "serve",
            "--data-dir",
            self.data_dir,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *([] if self.metrics_port is None else ["--metrics-port", str(self.metrics_port)]),
            *self.extra_args,
        ]
        env = {**os.environ, **(self.env or {})}
        # The server refuses a data dir others can read: make it as the server would (0700).
        make_private_dirs(self.data_dir)
        # The log names tables and jobs: the server's user's alone, as the data dir is.
        log = os.fdopen(os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
        proc = self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log, env=env, text=True
        )
        log.close()
        line: list[str] = []

        def read_ready() -> None:
            assert proc.stdout is not None  # stdout=PIPE
            for ln in proc.stdout:
                if ln.startswith(READY_PREFIX):
                    line.append(ln)
                    return

        t = threading.Thread(target=read_ready, daemon=True)
        t.start()
        t.join(timeout)
        if not line:
            self.kill()
            with open(self.log_path, errors="replace") as f:
                tail = f.read()[-2000:]
            raise RuntimeError(f"snapview serve did not start within {timeout}s:\n{tail}")
        words = line[0][len(READY_PREFIX) :].split()
        self.port = int(words[0].rsplit(":", 1)[1])
        urls = [w[len(METRICS_PREFIX) :] for w in words[1:] if w.startswith(METRICS_PREFIX)]
        self.metrics_address = urls[0] if urls else None
        if self.metrics_address and self.metrics_port == 0:
            # A restart binds the same metrics port again, as it does the gRPC port.
            self.metrics_port = int(self.metrics_address.rsplit(":", 1)[1].split("/")[0])
        return self

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def restart(self, timeout: float = 30.0) -> EmbeddedServer:
        self.stop()
        return self.start(timeout)

    def wait_dead(self, timeout: float = 10.0) -> bool:
        proc = self.proc
        assert proc is not None, "the server was never started"
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return proc.poll() is not None

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
