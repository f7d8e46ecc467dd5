"""TxnFinisher: finishes, in the background, decided transactions that readers resolved only
where their locks stood in the way.

A reader (or a prewrite) that meets a lock of a committed or rolled-back transaction resolves
the keys in its way and goes on (``kvstore.lock_resolution``); it never waits for the whole
transaction, which may hold millions of locks. The rest must still be finished by someone: a
lock left on a key nobody reads would hold its table's resolved_ts below the transaction's
start_ts for good, and streams and barriers with it. An epoch's or a revision's transaction
(its primary is in the system table) has an owner in the server that finishes it and a record
that a restart finishes it from. A client's transaction has no such owner once its client is
gone, so the store hands it to this finisher (and so does an epoch whose own resolution
failed). One whose keys nobody reads any more is found by ``StaleLocks``, through the table's
resolved_ts.

One thread, started on the first submission; transactions are finished one at a time, in
writes of RESOLVE_STEP locks (other writes take the writer between steps), in the order they
came. At most ``MAX_PENDING`` wait: beyond that a submission is dropped, which loses nothing
(the next reader that meets one of its locks submits it again). Nothing is persisted: after a
restart the same holds.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from kvstore import actions
from kvstore.actions.txn_guard import is_server_owned
from kvstore.group_commit import GroupCommitter, WriteContext
from kvstore.limits import RESOLVE_STEP
from kvstore.lock_resolution import txn_fate
from kvstore.mvcc.timestamp import physical_ms

if TYPE_CHECKING:
    from kvstore.store import LocalStore

log = logging.getLogger(__name__)

MAX_PENDING = 64  # transactions waiting to be finished; more are dropped (and resubmitted)
STALE_LOCK_MS = 10_000  # a table's oldest lock older than this is looked at through its primary
# The same for a transaction the server owns (an epoch's, a revision's), whose owner resolves
# it in steps (13M locks take minutes): only a lock this old is taken from its owner (after a
# failed resolution step, which the owner does not retry before a restart).
STALE_OWNED_MS = 600_000
RECHECK_S = 5.0  # how often one transaction's primary is asked again while its lock stays
MAX_CHECKED = 256  # transactions remembered as recently asked about (then forgotten at once)


class TxnFinisher:
    """Finishes submitted transactions through ``committer``; ``close`` stops it between steps."""

    def __init__(self, committer: GroupCommitter) -> None:
        self._committer = committer
        self._pending: dict[int, int] = {}  # start_ts -> commit_ts (0: rolled back), in order
        self._active = 0  # the start_ts being finished
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.finished = 0  # transactions finished (for tests and metrics)

    def submit(self, start_ts: int, commit_ts: int) -> bool:
        """Queue txn ``start_ts`` (decided: committed at ``commit_ts``, or rolled back when 0) to
        have every lock it still holds resolved. False when it was already queued or being
        finished, the queue is full, or the finisher is closed. The caller must know the fate
        from the primary: this trusts ``commit_ts``."""
        with self._cond:
            if self._closed or start_ts == self._active or start_ts in self._pending:
                return False
            if len(self._pending) >= MAX_PENDING:
                return False
            self._pending[start_ts] = commit_ts
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="snapview-txn-finisher", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return True

    def pending(self) -> int:
        """Transactions queued or being finished."""
        with self._cond:
            return len(self._pending) + (1 if self._active else 0)

    def close(self) -> None:
        """Stop after the step in progress (the rest of a transaction stays for its readers and
        the next submission) and wait for the thread."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                start_ts = next(iter(self._pending))
                commit_ts = self._pending.pop(start_ts)
                self._active = start_ts
            try:
                self._finish(start_ts, commit_ts)
            except Exception as e:  # a reader meeting its locks submits it again
                log.warning("finishing txn start_ts=%d failed: %s", start_ts, e)
            with self._cond:
                self._active = 0

    def _finish(self, start_ts: int, commit_ts: int) -> None:
        def step(ctx: WriteContext) -> tuple[int, bool]:
            return actions.resolve_locks_step(ctx, start_ts, commit_ts, RESOLVE_STEP)

        more = True
        while more:
            with self._cond:
                if self._closed:
                    return
            _, more = self._committer.run(step, RESOLVE_STEP)
        with self._cond:
            self.finished += 1


class StaleLocks:
    """The other way a decided transaction gets finished: nobody reads its keys any more (its
    client is gone, and a restart dropped the finisher's queue), yet its oldest lock holds its
    table's resolved_ts, and every barrier of a view over that table, below its start_ts.

    ``LocalStore.resolved_ts`` hands each table's oldest lock here. One older than
    STALE_LOCK_MS is looked at through its primary, at most once per RECHECK_S per transaction:
    a committed or rolled-back client transaction (a primary whose TTL ran out is rolled back
    first, as any reader meeting its locks would) goes to the finisher. A live one is left
    alone, and so is one the server owns (an epoch's, a revision's: their owners and
    ``settle_lapsed`` finish those) until its lock is STALE_OWNED_MS old."""

    def __init__(self, store: LocalStore) -> None:
        self._store = store
        self._asked: dict[int, float] = {}  # start_ts -> monotonic time last asked
        self._mu = threading.Lock()

    def settle(self, start_ts: int, key: bytes) -> bool:
        """Look at txn ``start_ts`` (holding a lock on ``key``) if its lock is stale; True if it
        was handed to the finisher."""
        store = self._store
        now_ms = store.lock_clock_ms()
        if now_ms - physical_ms(start_ts) < STALE_LOCK_MS:
            return False
        with self._mu:
            t = time.monotonic()
            if t - self._asked.get(start_ts, -RECHECK_S) < RECHECK_S:
                return False
            if len(self._asked) >= MAX_CHECKED:
                self._asked.clear()
            self._asked[start_ts] = t
        with store.storage.read_txn() as r:
            lock = r.get_lock(key)
        if lock is None or lock.start_ts != start_ts:
            return False
        if is_server_owned(lock.primary) and now_ms - physical_ms(start_ts) < STALE_OWNED_MS:
            return False
        commit_ts = txn_fate(store, lock.primary, start_ts, lock.ttl_ms)
        return commit_ts is not None and store.finisher.submit(start_ts, commit_ts)
