"""What the walk runs against: one real ``snapview serve`` on a fresh data dir, long-lived clients
kept across everything the walk does to the server, and (made on first use) a SparkSession."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import coordinator
from snapview.embedded import EmbeddedServer

# A short retention and GC interval, so GC runs (and can be seen to advance) within a walk; a
# 1 MiB map so the LMDB map grows under the walk's writes (item 3).
SERVER_ARGS = (
    "--barrier-interval",
    "200ms",
    "--retention",
    "2s",
    "--gc-interval",
    "500ms",
    "--map-size-mb",
    "1",
)
RETENTION_S = 2.0
N_CLIENTS = 3


class Violation(AssertionError):
    """An invariant the walk found broken: ``invariant`` names which (the failure's signature
    for shrinking), the message says how."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"{invariant}: {message}")
        self.invariant = invariant


@dataclass
class World:
    """The server, its data dir, the long-lived clients and the Spark session of one walk."""

    env: dict[str, str] = field(default_factory=dict)  # for the server (fail points)
    spark_factory: Callable[[], object] | None = None
    root: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="snapview-lifecycle-"))
    server: EmbeddedServer | None = None
    clients: list = field(default_factory=list)
    _spark: object = None

    @property
    def data_dir(self) -> str:
        return os.path.join(self.root, "data")

    @property
    def address(self) -> str:
        assert self.server is not None
        return self.server.address

    def start(self) -> World:
        self.server = EmbeddedServer(self.data_dir, extra_args=list(SERVER_ARGS), env=self.env)
        self.server.start()
        self.clients = [coordinator.connect(self.server.address) for _ in range(N_CLIENTS)]
        return self

    def client(self, i: int = 0):
        return self.clients[i % len(self.clients)]

    @property
    def spark(self):
        if self._spark is None:
            if self.spark_factory is None:
                raise RuntimeError("this walk has no SparkSession (spark ops are off)")
            self._spark = self.spark_factory()
        # Ops run in watchdog threads. Spark looks a Python data source up in the calling
        # thread's active session, and a thread other than the session's creator has none:
        # writeStream.format("snapview") then fails with DATA_SOURCE_NOT_FOUND (found by this
        # walk; reported with issue 24). Set it for this thread, as a threaded driver must.
        s = self._spark
        s._jvm.org.apache.spark.sql.SparkSession.setActiveSession(s._jsparkSession)  # type: ignore[attr-defined]
        return s

    def path(self, *parts: str) -> str:
        p = os.path.join(self.root, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def close(self, keep: bool = False) -> None:
        for c in self.clients:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing after a failure: best effort
                pass
        if self.server is not None:
            self.server.stop()
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)
