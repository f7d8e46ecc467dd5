"""``snapview views run FILE``: view jobs as a long-lived service, not "as long as my driver".

FILE is a Python file that defines ``views(spark, address)`` returning the views to maintain:
built ``MaterializedView`` objects (``builder ... .build()``), or builders, which are built here.
The service starts every one on a local SparkSession, then watches them:

* a job whose query stopped with an error is restarted, after a back-off that doubles from 1 s
  up to 60 s (reset once it runs for a minute); it resumes at the coordinator's record, so no
  barrier is skipped or done twice; its liveness shows FAILED with the error meanwhile;
* a job whose view was dropped (``snapview drop``) is not restarted;
* SIGTERM or SIGINT stops every job cleanly (each after the barrier in progress) and the service
  exits 0.

It logs one line per start, failure, restart and stop. A `spark-submit` of a small driver that
calls ``serve(...)`` does the same on a cluster.
"""

from __future__ import annotations

import logging
import runpy
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_sink.materialized_view import MaterializedView, ViewJob

log = logging.getLogger("snapview.views")
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0
HEALTHY_AFTER_S = 60.0


@dataclass
class _Watched:
    view: MaterializedView
    job: ViewJob | None = None
    started: float = 0.0
    backoff: float = FIRST_BACKOFF_S
    retry_at: float = 0.0
    restarts: int = 0
    dropped: bool = False
    last_error: str = field(default="")


def load_views(path: str, spark: SparkSession, address: str) -> list[MaterializedView]:
    """Run FILE and call its ``views(spark, address)``; builders are built."""
    ns = runpy.run_path(path, run_name="snapview_views")
    fn = ns.get("views")
    if not callable(fn):
        raise ValueError(f"{path}: defines no views(spark, address) function")
    out = []
    for v in fn(spark, address):
        out.append(v.build() if hasattr(v, "build") else v)
    if not out:
        raise ValueError(f"{path}: views() returned no views")
    return out


def serve(
    views: list[MaterializedView],
    stop: threading.Event,
    poll_s: float = 0.5,
    on_event: Callable[[str], None] | None = None,
    first_backoff_s: float = FIRST_BACKOFF_S,
) -> dict[str, int]:
    """Run ``views`` until ``stop`` is set, restarting failed jobs; returns restarts per view
    target. Every job is stopped cleanly before it returns."""
    say = on_event or (lambda msg: log.warning("%s", msg))
    watched = [_Watched(v, backoff=first_backoff_s) for v in views]
    try:
        while not stop.is_set():
            now = time.monotonic()
            for w in watched:
                _step(w, now, say)
            stop.wait(poll_s)
    finally:
        for w in watched:
            if w.job is not None:
                w.job.stop()
                say(f"view {w.view.target}: stopped")
    return {w.view.target: w.restarts for w in watched}


def _step(w: _Watched, now: float, say: Callable[[str], None]) -> None:
    if w.dropped:
        return
    if w.job is not None and w.job.is_active():  # active, or riding out a transient failure
        if now - w.started > HEALTHY_AFTER_S:
            w.backoff = min(w.backoff, FIRST_BACKOFF_S)
        return
    if w.job is not None:  # it stopped by itself
        err = w.job.failure_text()
        w.job.stop()  # reports FAILED (with the error) or STOPPED, frees its checkpoint
        w.job = None
        if _was_dropped(w.view):
            w.dropped = True
            say(f"view {w.view.target}: its job was unregistered (dropped); not restarting")
            return
        w.last_error = err or "stopped"
        w.retry_at = now + w.backoff
        say(f"view {w.view.target}: failed ({w.last_error}); restarting in {w.backoff:.0f} s")
        w.backoff = min(w.backoff * 2, MAX_BACKOFF_S)
        return
    if now < w.retry_at:
        return
    first = w.started == 0.0
    try:
        w.job = w.view.start()
    except Exception as e:  # noqa: BLE001 - a service keeps trying; the error is logged
        w.retry_at = now + w.backoff
        say(f"view {w.view.target}: cannot start ({type(e).__name__}: {e}); retrying")
        w.backoff = min(w.backoff * 2, MAX_BACKOFF_S)
        return
    w.started = now
    if not first:
        w.restarts += 1
    say(f"view {w.view.target}: {'started' if first else 'restarted'} (job {w.view.job})")


def _was_dropped(view: MaterializedView) -> bool:
    from coordinator.process_clients import client_for

    client = client_for(view.coordinator, view.token)
    return view.job not in {j.job for j in client.jobs.list_jobs()}


def run_file(path: str, address: str, master: str = "local[2]") -> int:
    """The ``views run`` verb: load FILE's views, serve them until SIGTERM/SIGINT; exit code."""
    from snapview.local_spark import local_session

    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        log.warning("signal %d: stopping the views", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    spark = local_session(master, app_name="snapview-views")
    try:
        views = load_views(path, spark, address)
        restarts = serve(views, stop, on_event=lambda m: print(m, flush=True))
        print(f"stopped {len(views)} view(s); restarts: {restarts}", flush=True)
        return 0
    finally:
        spark.stop()
