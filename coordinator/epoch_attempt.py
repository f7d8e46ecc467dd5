"""EpochAttempt: one attempt at one epoch of a job, from open to commit or abort.

Every writer of snapview epochs goes through this class, so the protocol is written once:

    attempt = EpochAttempt.open(client, job, epoch, ttl_ms=..., batch=..., owner=...)
    if attempt.committed:                   # a replay of a committed epoch: skip it
        return
    target = attempt.target(coordinator, token, table_info, mode, direct)
    with attempt.running():                 # heartbeats; any exception aborts, then re-raises
        ...tasks prewrite into target...
        attempt.commit(metadata)            # the moment of truth

Its users: ``spark_sink.EpochWriter`` (foreachBatch: the driver opens, executors prewrite, the
driver commits), ``spark_sink.stream_writer`` (``format("snapview")``: tasks open or attach to the
batch's attempt, the driver commits or aborts it through ``EpochAttempt.of``), the view
strategies (``spark_sink.view_epoch``: epoch = barrier) and correction sets
(``coordinator.revisions`` from a pyarrow table, ``spark_sink.revision`` from a DataFrame: the
epoch of job ``revision/<id>``). Nothing here needs Spark: an ``EpochTarget`` is plain data a
task unpickles, and ``Heartbeat`` is a thread of this process.

What a job commits with an epoch is ``coordinator.jobs.EpochMetadata``; ``feed_metadata`` builds
a sink's (its batch, its rows and the change-feed high-water it consumed up to).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from coordinator.client import Client
from coordinator.connection import ConnectionSettings
from coordinator.jobs import FEED, EpochInfo, EpochMetadata, EpochState
from coordinator.process_clients import client_for
from kvstore.errors import SnapviewError
from kvstore.table_info import TableInfo

# (data dir, instance id, LMDB path, map size) of the server: lets executors on its host prewrite
# into its LMDB environment directly (they do only if they see the same files).
DirectInfo = tuple[str, str, str, int]


@dataclass(frozen=True)
class EpochTarget:
    """What a task needs to prewrite into one epoch (pickled to executors)."""

    coordinator: str | ConnectionSettings
    token: str | None
    info: TableInfo
    mode: str
    job: str
    epoch: int
    start_ts: int
    primary: bytes
    ttl_ms: int
    direct: DirectInfo | None = None


class Heartbeat:
    """Keeps an epoch attempt's primary lock alive while work on it goes on (every ttl/3):
    ``with Heartbeat(client, job, epoch, start_ts, ttl_ms):``, or in a task
    ``with Heartbeat.of(target):``. A failed heartbeat ends it quietly: the commit says whether
    the attempt survived."""

    def __init__(self, client: Client, job: str, epoch: int, start_ts: int, ttl_ms: int) -> None:
        self.client = client
        self.job, self.epoch, self.start_ts, self.ttl_ms = job, epoch, start_ts, ttl_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="epoch-heartbeat", daemon=True)

    @classmethod
    def of(cls, target: EpochTarget) -> Heartbeat:
        """The heartbeat of ``target``'s attempt, through this process's client of its server."""
        client = client_for(target.coordinator, target.token)
        return cls(client, target.job, target.epoch, target.start_ts, target.ttl_ms)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop beating; waits up to 5 s for a heartbeat under way to end."""
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                self.client.jobs.heartbeat_transaction(
                    self.job, self.epoch, self.start_ts, self.ttl_ms
                )
            except Exception:  # noqa: BLE001 - the commit will tell whether the epoch survived
                return


class EpochAttempt:
    """One attempt at (job, epoch). Not thread-safe; one per epoch attempt, on the driver."""

    def __init__(self, client: Client, info: EpochInfo, ttl_ms: int) -> None:
        self.client = client
        self.info = info  # as opened; after commit(), as committed
        self.ttl_ms = ttl_ms

    @classmethod
    def open(
        cls,
        client: Client,
        job: str,
        epoch: int = 0,
        *,
        ttl_ms: int,
        batch: str = "",
        owner: str = "",
    ) -> EpochAttempt:
        """Open (job, epoch), or with ``epoch`` 0 the epoch for ``batch`` under ``owner`` (see
        JobClient.open_transaction). An attempt of this epoch left in PREWRITE by a crashed run
        is rolled back first; a committed epoch comes back with ``committed`` set."""
        info = client.jobs.open_transaction(job, epoch, ttl_ms, batch=batch, owner=owner)
        return cls(client, info, ttl_ms)

    @classmethod
    def of(cls, client: Client, job: str, epoch: int, start_ts: int, ttl_ms: int) -> EpochAttempt:
        """The attempt ``start_ts`` of (job, epoch), opened elsewhere (by a task): to commit or
        abort it."""
        return cls(client, EpochInfo(job, epoch, EpochState.PREWRITE, start_ts), ttl_ms)

    # The attempt's key, as opened (an attempt never changes it).
    job = property(lambda self: self.info.job, doc="The job (``info.job``).")
    epoch = property(lambda self: self.info.epoch, doc="The epoch (``info.epoch``).")
    start_ts = property(lambda self: self.info.start_ts, doc="The attempt's start_ts.")

    @property
    def committed(self) -> bool:
        """The epoch is committed (by this attempt, or before it was opened: skip it)."""
        return self.info.committed

    def target(
        self,
        coordinator: str | ConnectionSettings,
        token: str | None,
        table: TableInfo,
        mode: str,
        direct: DirectInfo | None = None,
    ) -> EpochTarget:
        """What a task needs to prewrite ``table``'s rows into this attempt (picklable)."""
        return EpochTarget(
            coordinator=coordinator,
            token=token,
            info=table,
            mode=mode,
            job=self.job,
            epoch=self.epoch,
            start_ts=self.start_ts,
            primary=self.info.primary_key,
            ttl_ms=self.ttl_ms,
            direct=direct,
        )

    def heartbeat(self) -> Heartbeat:
        """A heartbeat of this attempt (not started: ``with attempt.heartbeat():``)."""
        return Heartbeat(self.client, self.job, self.epoch, self.start_ts, self.ttl_ms)

    @contextmanager
    def running(self) -> Iterator[EpochAttempt]:
        """Keep the attempt's primary lock alive while the body runs; if the body raises
        (anything, KeyboardInterrupt included), abort the attempt and re-raise, so nothing of
        it can become visible."""
        try:
            with self.heartbeat():
                yield self
        except BaseException:
            self.abort()
            raise

    def commit(self, metadata: EpochMetadata) -> EpochInfo:
        """Commit the attempt with ``metadata``; returns the committed epoch. Raises Aborted if
        the attempt was rolled back meanwhile (its locks expired and a reader rolled it back, or
        a newer attempt took over)."""
        self.info = self.client.jobs.commit_transaction(
            self.job, self.epoch, self.start_ts, metadata.to_json()
        )
        return self.info

    def abort(self) -> None:
        """Roll the attempt back, best effort: if the coordinator cannot be told, the locks
        expire and readers roll the attempt back through its primary."""
        try:
            self.client.jobs.abort_transaction(self.job, self.epoch, self.start_ts)
        except SnapviewError:
            pass


class OpeningAttempt:
    """An epoch opened in a thread of its own while the caller works on: a view's epoch computes
    its delta (reads only) while OpenTransaction waits its turn at the server's writer (behind
    the previous epoch's secondaries, say). From the moment the attempt is open it is kept alive
    (a Heartbeat every ttl/3), so a long computation never lets its lock or hold lapse.

    The caller either takes the attempt over (``result()``, then ``attempt.running()``,
    which heartbeats from then on) or drops it (``abandon()``: the attempt, if it opened, is
    aborted, so nothing of it can become visible). Either way the thread is joined."""

    def __init__(
        self,
        client: Client,
        job: str,
        epoch: int,
        *,
        ttl_ms: int,
    ) -> None:
        self._attempt: EpochAttempt | None = None
        self._error: BaseException | None = None
        self._beat: Heartbeat | None = None
        self._thread = threading.Thread(
            target=self._open,
            args=(client, job, epoch, ttl_ms),
            name="snapview-epoch-open",
            daemon=True,
        )
        self._thread.start()

    def _open(self, client: Client, job: str, epoch: int, ttl_ms: int) -> None:
        try:
            attempt = EpochAttempt.open(client, job, epoch, ttl_ms=ttl_ms)
            if not attempt.committed:
                self._beat = attempt.heartbeat()
                self._beat.__enter__()
            self._attempt = attempt
        except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
            self._error = e

    def wait(self) -> None:
        """Wait for the open to finish (the attempt stays alive: the early heartbeat goes on)."""
        self._thread.join()

    def result(self) -> EpochAttempt:
        """The opened attempt (waits for the open); raises what the open raised. The early
        heartbeat stops here: the caller's ``running()`` heartbeats from now on."""
        self._thread.join()
        self._stop_beating()
        if self._error is not None:
            raise self._error
        assert self._attempt is not None
        return self._attempt

    def abandon(self) -> None:
        """Drop the attempt: wait for the open, then abort it if it opened (best effort)."""
        self._thread.join()
        self._stop_beating()
        if self._attempt is not None and not self._attempt.committed:
            self._attempt.abort()

    def _stop_beating(self) -> None:
        if self._beat is not None:
            self._beat.__exit__(None, None, None)
            self._beat = None


class _Unknown(enum.Enum):
    UNKNOWN = "unknown"


UNKNOWN = _Unknown.UNKNOWN  # feed_metadata's ``prev`` when the previous epoch's high-water is
# not known


def feed_metadata(
    client: Client,
    job: str,
    batch: str | int,
    rows: int,
    high: int,
    prev: int | None | _Unknown = UNKNOWN,
) -> EpochMetadata:
    """What a sink commits with an epoch: its batch, its row count, and the feed high-water:
    ``high`` if the batch saw feed rows (``high`` >= 0), else the previous epoch's carried
    forward (``prev`` when the caller knows it, None for none, else read from the job's newest
    committed epoch), so a stream restarted without its checkpoint resumes at the right
    change."""
    if high < 0:
        if prev is UNKNOWN:
            last = client.jobs.last_committed_metadata(job)
            prev = last.feed if last is not None else None
        sources = {FEED: prev} if prev is not None else {}
    else:
        sources = {FEED: high}
    return EpochMetadata(sources=sources, fields={"batch": batch, "rows": rows})
