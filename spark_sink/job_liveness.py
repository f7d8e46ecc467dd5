"""A job's liveness, reported to the coordinator (``snapview jobs``, ``snapview delay``).

A running job sends RUNNING every ``interval_s`` with a TTL of several intervals, so a job whose
driver died shows as LOST within that TTL; when it ends it says FAILED with its error or STOPPED.
Once the coordinator answers NOT_FOUND the job was unregistered (its table dropped, e.g. by
``snapview drop``): the reporter calls ``on_unregistered`` so the job stops itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from coordinator.client import Client
from coordinator.jobs import JobState
from kvstore.errors import NotFound, SnapviewError

log = logging.getLogger("snapview.liveness")
REPORT_INTERVAL_S = 2.0
TTL_INTERVALS = 5  # a RUNNING report holds for this many intervals


class JobReporter:
    """Reports ``job`` as RUNNING while ``is_active()`` holds; afterwards FAILED with
    ``error()`` (when it returns text) or STOPPED. ``close(state)`` sends the final report now."""

    def __init__(
        self,
        client: Client,
        job: str,
        is_active: Callable[[], bool],
        error: Callable[[], str],
        on_unregistered: Callable[[], None] | None = None,
        interval_s: float = REPORT_INTERVAL_S,
    ) -> None:
        self.client, self.job = client, job
        self._is_active, self._error = is_active, error
        self._on_unregistered = on_unregistered
        self.interval_s = interval_s
        self._done = threading.Event()
        self._final_sent = False
        self._mu = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"liveness-{job}", daemon=True)
        self._report(JobState.RUNNING)
        self._thread.start()

    def _report(self, state: JobState, error: str = "") -> bool:
        """One report; False once the job is unregistered (or the report cannot be sent)."""
        ttl = int(self.interval_s * TTL_INTERVALS * 1000)
        try:
            self.client.jobs.report_job(self.job, state, error, ttl)
            return True
        except NotFound:
            return False
        except SnapviewError as e:  # the server is away: the next report tries again
            log.debug("job %r: liveness report failed: %s", self.job, e)
            return True

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            if not self._is_active():
                err = self._error()
                self._final(JobState.FAILED if err else JobState.STOPPED, err)
                return
            if not self._report(JobState.RUNNING):
                log.warning("job %r was unregistered (its table dropped?); stopping", self.job)
                self._done.set()
                if self._on_unregistered is not None:
                    self._on_unregistered()
                return

    def _final(self, state: JobState, error: str = "") -> None:
        with self._mu:
            if self._final_sent:
                return
            self._final_sent = True
        self._report(state, error)

    def close(self, state: JobState = JobState.STOPPED, error: str = "") -> None:
        """Stop reporting and send the final report (once)."""
        self._done.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(self.interval_s + 5)
        self._final(state, error)
