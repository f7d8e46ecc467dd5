"""Epoch transactions: one Percolator transaction per (job, epoch), coordinated here.

TiFlink's Coordinator interface. ``open`` takes a start_ts and prewrites the epoch's primary key
(a status key in snapview's system table that the coordinator owns); sinks prewrite their rows as
secondaries pointing at it; ``commit`` takes a commit_ts, commits the primary -- the moment of
truth -- and then resolves the secondaries with resolve_locks. Each step's state change is one
store action, so the epoch record and the primary never disagree:

    open:   [roll back a stale attempt] + prewrite primary + record PREWRITE   (one LMDB txn)
    commit: commit primary + record COMMITTED + job's last committed epoch
            [+ a view job's version at the barrier the epoch is]                 (one LMDB txn)
            then resolve secondaries, queued behind the answer (idempotent; readers do it
            too if they come first, and recover() after a crash)

``events`` (the server's metrics) hears of every attempt that commits or is aborted, once, after the
write that decided it is durable.

Every call is idempotent per (job, epoch). Reopening an epoch left in PREWRITE by a crashed
attempt rolls that attempt back and starts a fresh one. Epochs of a job are committed in
increasing order; an epoch below the last committed one can be looked at, not opened.

An open attempt is a hold with an owner (``coordinator.server.owned_holds``): opening, attaching
to and heartbeating it renew it; once it lapses (nobody renewed it for the hold TTL) it stops
holding the GC safepoint and the GC tick settles it through its primary (``settle_lapsed``), as
the next attempt's open would. ``release`` settles a job's open attempt on request (an operator's
``snapview jobs release``, a stopping stream writer).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from coordinator.server.barriers import Barriers
from coordinator.server.drops import refuse_if_dropped
from coordinator.server.meta import (
    ABORTED,
    COMMITTED,
    JOB_STATE_PREFIX,
    MAX_TEXT_BYTES,
    PREWRITE,
    RESOLVING_PREFIX,
    EpochRecord,
    check_job_name,
    check_label,
    epoch_key,
    epoch_primary_key,
    job_state_key,
    resolving_key,
    resolving_start_ts,
)
from coordinator.server.owned_holds import DEFAULT_HOLD_TTL_S, OwnedHold, OwnedHolds
from coordinator.server.tso import TimestampOracle
from kvstore import actions
from kvstore.errors import (
    Aborted,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    TxnLockNotFound,
    TxnRolledBack,
)
from kvstore.failpoints import armed, fail_point
from kvstore.group_commit import WriteContext
from kvstore.limits import RESOLVE_STEP
from kvstore.mvcc.records import LockOp
from kvstore.storage import Reader
from kvstore.store import DEFAULT_LOCK_TTL_MS, MAX_LOCK_TTL_MS, LocalStore

log = logging.getLogger("snapview.epochs")

MAX_RETIRED_OWNERS = 16  # per job: the writers whose late tasks open_batch refuses (_retire)


class EpochEvents(Protocol):
    """Told of each attempt's end once it is durable: ``committed`` once per committed attempt
    (an idempotent repeat of the commit is not told again), ``aborted`` once per attempt rolled
    back (by abort, by an expired TTL, or settled by the next open)."""

    def committed(self, rec: EpochRecord) -> None: ...

    def aborted(self, rec: EpochRecord) -> None: ...


AFTER_EPOCH_FIELD = "after_epoch"


def expected_previous(metadata: str) -> int | None:
    """The epoch a commit says it was computed after (``after_epoch`` in its metadata: a view's
    delta step), or None when it makes no such claim. The commit is refused unless that epoch is
    still the job's newest committed one (optimistic concurrency on the job's progress)."""
    if AFTER_EPOCH_FIELD not in metadata:
        return None
    try:
        value = json.loads(metadata).get(AFTER_EPOCH_FIELD)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class EpochManager:
    """``barriers`` (optional) makes a MaterializedView job's epochs barriers: opening an epoch
    that is not an issued barrier is refused, and committing one records the view's version at
    it in the same LMDB transaction as the primary's commit."""

    def __init__(
        self,
        store: LocalStore,
        tso: TimestampOracle,
        barriers: Barriers | None = None,
        events: EpochEvents | None = None,
        hold_ttl_ms: int = int(DEFAULT_HOLD_TTL_S * 1000),
    ) -> None:
        self.store = store
        self.tso = tso
        self.barriers = barriers
        self.events = events
        # Called inside an epoch's commit action, after the commit is built: their writes are
        # one LMDB transaction with it (RevisionManager.on_epoch_commit).
        self.commit_hooks: list[Callable[[WriteContext, EpochRecord], None]] = []
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # The open attempts' renewals, by (job, start_ts).
        self.open_holds: OwnedHolds[tuple[str, int]] = OwnedHolds(tso, hold_ttl_ms)

    def _job_lock(self, job: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(job, threading.Lock())

    def _tell(self, what: str, rec: EpochRecord) -> None:
        """Tell ``events`` of ``rec``; its failure is logged, never the caller's."""
        if self.events is None:
            return
        try:
            getattr(self.events, what)(rec)
        except Exception:  # noqa: BLE001 - an observer must not fail the protocol
            log.exception("epoch event %s of job %r failed", what, rec.job)

    # ------------------------------------------------------------------ state

    def _load(self, reader: Reader, job: str, epoch: int) -> EpochRecord | None:
        return self.load_in(reader, job, epoch)

    @staticmethod
    def load_in(reader: Reader, job: str, epoch: int) -> EpochRecord | None:
        """The record of (job, epoch) read through ``reader``, or None if never opened."""
        raw = reader.get("meta", epoch_key(job, epoch))
        return None if raw is None else EpochRecord.from_json(raw)

    def _job(self, reader: Reader, job: str) -> dict:
        return self.job_state_in(reader, job)

    @staticmethod
    def job_state_in(reader: Reader, job: str) -> dict:
        """The job's progress, ``{"last_committed", "open_epoch"}`` (zeros for a new job)."""
        raw = reader.get("meta", job_state_key(job))
        return json.loads(raw) if raw else {"last_committed": 0, "open_epoch": 0}

    @staticmethod
    def job_states_in(reader: Reader) -> dict[str, dict]:
        """Every job's progress, by job name."""
        return {
            k[len(JOB_STATE_PREFIX) :].decode(): json.loads(v)
            for k, v in reader.iter_prefix("meta", JOB_STATE_PREFIX)
        }

    @staticmethod
    def _save(ctx: WriteContext, info: EpochRecord, job_state: dict) -> None:
        ctx.buf.put("meta", epoch_key(info.job, info.epoch), info.to_json())
        ctx.buf.put("meta", job_state_key(info.job), json.dumps(job_state).encode())

    @staticmethod
    def _retire(job_state: dict, info: EpochRecord) -> dict:
        """The job's progress with ``info``'s owner retired if ``info`` ended ABORTED.

        An owner is one writer instance (a stream query's run, one ``save()``). Once an attempt
        it opened is rolled back (its driver aborted the write, its hold lapsed, another run took
        the batch over), anything of it still running is a zombie: a Spark task cancelled too
        late, a task of a stopped query. ``open_batch`` refuses those, so a zombie can neither
        reopen the aborted batch nor, by opening the job's next epoch, roll back the attempt of
        the writer that came after it. The last ``MAX_RETIRED_OWNERS`` per job are kept: zombies
        arrive within seconds of the abort, and the job state stays small. Every action that
        settles an attempt passes its job state through here, and saves that state."""
        if info.state != ABORTED or not info.owner:
            return job_state
        retired = [o for o in job_state.get("retired", []) if o != info.owner]
        retired.append(info.owner)
        return {**job_state, "retired": retired[-MAX_RETIRED_OWNERS:]}

    @staticmethod
    def _settle(ctx: WriteContext, info: EpochRecord) -> EpochRecord:
        """Decide a PREWRITE attempt's fate through its primary, never by guessing: a committed
        primary means the attempt committed (its secondaries are committed too); otherwise the
        primary is rolled back first (so it can never commit later) and then the secondaries."""
        commit_ts = actions.settle_txn(ctx, info.primary_key, info.start_ts)
        if commit_ts:
            return replace(info, state=COMMITTED, commit_ts=commit_ts)
        return replace(info, state=ABORTED)

    @staticmethod
    def _check(job: str, epoch: int) -> None:
        check_job_name(job)
        if not isinstance(epoch, int) or not 0 < epoch < 1 << 63:
            raise InvalidArgument(f"job {job!r}: epoch must be a positive integer, got {epoch!r}")

    def get(self, job: str, epoch: int = 0) -> EpochRecord:
        """The record of (job, epoch); epoch 0 means the job's newest epoch."""
        check_job_name(job)
        with self.store.storage.read_txn() as r:
            if epoch == 0:
                st = self._job(r, job)
                epoch = max(st["open_epoch"], st["last_committed"])
                if epoch == 0:
                    raise NotFound(f"job {job!r} has no epochs")
            info = self._load(r, job, epoch)
            if info is None:
                refuse_if_dropped(r, job, epoch)  # its epochs went with its table: say so
        if info is None:
            raise NotFound(f"job {job!r} epoch {epoch} was never opened")
        return info

    @staticmethod
    def last_committed_in(reader: Reader, job: str) -> int:
        """The job's newest committed epoch (0 if none), read through ``reader``."""
        raw = reader.get("meta", job_state_key(job))
        return int(json.loads(raw)["last_committed"]) if raw else 0

    def last_committed(self, job: str) -> int:
        """The job's newest committed epoch (0 if none): one lookup, for callers that poll."""
        with self.store.storage.read_txn() as r:
            return self._job(r, job)["last_committed"]

    def jobs(self) -> dict[str, dict]:
        with self.store.storage.read_txn() as r:
            return self.job_states_in(r)

    # ------------------------------------------------------------------ protocol

    def open_batch(self, job: str, batch: str, owner: str, ttl_ms: int = 0) -> EpochRecord:
        """Open the epoch for ``batch`` (auto epoch numbering, see OpenTransactionRequest).

        Returns the newest epoch of the job if it is tagged with ``batch`` and is COMMITTED (the
        caller skips the batch) or PREWRITE under the same ``owner`` (the caller attaches to it).
        Otherwise opens an attempt tagged (batch, owner): the same epoch again if it was this
        batch's (rolling the old attempt back), else the job's next epoch. Aborted for an
        ``owner`` retired by the roll-back of one of its attempts (see ``_retire``)."""
        self._check(job, 1)
        if not batch or not owner:
            raise InvalidArgument(f"job {job!r}: an auto epoch needs both batch and owner")
        check_label(job, "batch", batch)
        check_label(job, "owner", owner)
        with self._job_lock(job):
            with self.store.storage.read_txn() as r:
                st = self._job(r, job)
                newest = max(st["open_epoch"], st["last_committed"])
                info = self._load(r, job, newest) if newest else None
            if owner in st.get("retired", ()):
                raise Aborted(
                    f"job {job!r} batch {batch!r}: writer {owner!r} had an attempt rolled back "
                    "(its write was aborted, its hold lapsed or another run took over); a task "
                    "of that writer cannot open epochs any more: write again"
                )
            if info is not None and info.batch == batch:
                if info.state == COMMITTED or (info.state == PREWRITE and info.owner == owner):
                    if info.state == PREWRITE:  # a task attaching: the owner is alive
                        self.open_holds.renew((job, info.start_ts), owner, ttl_ms)
                    return info
                epoch = info.epoch
            else:
                epoch = newest + 1
            return self._open_locked(job, epoch, ttl_ms, batch, owner)

    def open(self, job: str, epoch: int, ttl_ms: int = 0) -> EpochRecord:
        """Open (job, epoch) for prewriting and return its attempt.

        A committed epoch is returned as is (state COMMITTED: the caller skips it). An attempt
        left in PREWRITE (this epoch, or another open epoch of the job) is rolled back first, so
        its half-written secondaries can never become visible."""
        self._check(job, epoch)
        with self._job_lock(job):
            return self._open_locked(job, epoch, ttl_ms, "", "")

    def _open_locked(
        self, job: str, epoch: int, ttl_ms: int, batch: str, owner: str
    ) -> EpochRecord:
        ttl_ms = ttl_ms or DEFAULT_LOCK_TTL_MS
        if not 0 < ttl_ms <= MAX_LOCK_TTL_MS:
            raise InvalidArgument(f"job {job!r}: lock_ttl_ms must be in (0, {MAX_LOCK_TTL_MS}]")
        start_ts = self.tso.now()
        key = epoch_primary_key(job, epoch)
        settled_aborted: list[EpochRecord] = []  # attempts this open rolled back

        def act(ctx: WriteContext) -> EpochRecord:
            settled_aborted.clear()  # the group may run the action again (after growing)
            refuse_if_dropped(ctx.reader, job, epoch)  # in the write: ordered with the drop
            info = self._load(ctx.reader, job, epoch)
            if info is not None and info.state == COMMITTED:
                return info
            if self.barriers is not None:
                self.barriers.check_open(ctx.reader, job, epoch)
            st = self._job(ctx.reader, job)
            if epoch < st["last_committed"]:
                raise FailedPrecondition(
                    f"job {job!r}: epoch {epoch} is out of order; the job already committed "
                    f"epoch {st['last_committed']}"
                )
            attempt = 1
            if st["open_epoch"] and st["open_epoch"] != epoch:
                stale = self._load(ctx.reader, job, st["open_epoch"])
                if stale is not None and stale.state == PREWRITE:
                    settled = self._settle(ctx, stale)
                    st = self._retire(st, settled)
                    if settled.state == COMMITTED:
                        st = {**st, "last_committed": max(st["last_committed"], stale.epoch)}
                    else:
                        settled_aborted.append(settled)
                    self._save(ctx, settled, {**st, "open_epoch": 0})
                    if epoch < st["last_committed"]:
                        raise FailedPrecondition(
                            f"job {job!r}: epoch {epoch} is out of order; the job already "
                            f"committed epoch {st['last_committed']}"
                        )
            if info is not None:
                attempt = info.attempt + 1
                if info.state == PREWRITE:
                    settled = self._settle(ctx, info)
                    st = self._retire(st, settled)
                    if settled.state == COMMITTED:
                        st = {
                            **st,
                            "last_committed": max(st["last_committed"], epoch),
                            "open_epoch": 0,
                        }
                        self._save(ctx, settled, st)
                        return settled
                    settled_aborted.append(settled)
            actions.prewrite(ctx, [(LockOp.PUT, key, b"epoch")], key, start_ts, ttl_ms, 1)
            new = EpochRecord(job, epoch, PREWRITE, start_ts, 0, attempt, batch=batch, owner=owner)
            self._save(ctx, new, {**st, "open_epoch": epoch})
            return new

        opened = self.store.run_write(act)
        if opened.state == PREWRITE:
            self.open_holds.renew((job, opened.start_ts), owner, ttl_ms)
        for rec in settled_aborted:
            self.open_holds.forget((job, rec.start_ts))
            self._tell("aborted", rec)
        fail_point("epoch.opened")
        return opened

    def commit(self, job: str, epoch: int, start_ts: int, metadata: str = "") -> EpochRecord:
        """Commit attempt ``start_ts`` of (job, epoch); idempotent for the same attempt."""
        self._check(job, epoch)
        check_label(job, "metadata", metadata, MAX_TEXT_BYTES)
        with self._job_lock(job):
            info = self.get(job, epoch)
            if info.start_ts != start_ts:
                raise FailedPrecondition(
                    f"job {job!r} epoch {epoch}: attempt start_ts={start_ts} is stale; the "
                    f"current attempt is start_ts={info.start_ts} ({info.state})"
                )
            if info.state == COMMITTED:
                return info
            if info.state == ABORTED:
                raise Aborted(
                    f"job {job!r} epoch {epoch}: attempt start_ts={start_ts} was "
                    "aborted; open the epoch again"
                )
            commit_ts = self.tso.now()

            after = expected_previous(metadata)

            def act(ctx: WriteContext) -> EpochRecord:
                refuse_if_dropped(ctx.reader, job, epoch)  # a drop since the get above
                last = self._job(ctx.reader, job)["last_committed"]
                if after is not None and after != last:
                    # The epoch is a change computed from epoch `after`'s state, and another
                    # run of the job (a stale cache, a second driver) committed past it: applying
                    # it would apply changes twice or skip some. Redone from what is committed.
                    raise Aborted(
                        f"job {job!r} epoch {epoch}: computed as the change after epoch {after}, "
                        f"but the job's newest committed epoch is {last}; open the epoch again"
                    )
                if self.barriers is not None:
                    # Before the primary commits: it looks at the epoch's indexed locks.
                    self.barriers.record_view_barrier(
                        ctx, job, epoch, start_ts, commit_ts, info.primary_key
                    )
                actions.commit_key(ctx, info.primary_key, start_ts, commit_ts)
                # Until the last step of _resolve_secondaries deletes it: a restart finishes
                # every epoch named here.
                ctx.buf.put("meta", resolving_key(start_ts), str(commit_ts).encode())
                done = replace(
                    info, state=COMMITTED, commit_ts=commit_ts, metadata=metadata or info.metadata
                )
                st = self._job(ctx.reader, job)
                self._save(
                    ctx,
                    done,
                    {**st, "last_committed": max(st["last_committed"], epoch), "open_epoch": 0},
                )
                for hook in self.commit_hooks:
                    hook(ctx, done)
                return done

            try:
                done = self.store.run_write(act)
            except (TxnRolledBack, TxnLockNotFound):
                # A reader found the primary's TTL expired and rolled the attempt back.
                self._mark_aborted(info)
                raise Aborted(
                    f"job {job!r} epoch {epoch}: attempt start_ts={start_ts} was rolled "
                    "back (its lock TTL ran out); open the epoch again"
                ) from None
        self.open_holds.forget((job, start_ts))
        self._tell("committed", done)
        fail_point("epoch.commit.after_primary")
        self._resolve_secondaries(start_ts, commit_ts)
        return done

    def _resolve_secondaries(self, start_ts: int, commit_ts: int) -> None:
        """Finish a committed epoch's secondaries behind the caller's back (TiKV commits
        secondaries asynchronously too), in writes of ``RESOLVE_STEP`` locks, each queued once
        the one before is durable. One write for all of them held the store's only writer for
        as long as they took (30 s for a load of 1.8M rows), and every barrier, TSO window and
        commit of the server waited behind it. Between steps other writes take their turn:
        one that meets a lock of this epoch (a prewrite of the same key, a read) resolves it
        through the primary, which decided the epoch already. The epoch's ``resolving/`` record,
        written with its commit, is deleted by the last step; a restart finishes every epoch
        that still has one (``recover``), however many a crash or a stop left mid-way. (The
        job's next epoch may commit before the steps end: finishing them inside that commit
        held the writer again, for 60 s and more after a view's first build of millions of
        state rows.) An epoch of at most ``RESOLVE_STEP`` locks is one step, queued before
        this returns, as before."""
        if armed("epoch.secondaries.left"):
            return  # planted: the owner has not reached them (readers resolve their keys)
        marker = resolving_key(start_ts)

        def step(ctx: WriteContext) -> tuple[int, bool]:
            n, more = actions.resolve_locks_step(ctx, start_ts, commit_ts, RESOLVE_STEP)
            if not more:
                ctx.buf.delete("meta", marker)
            return n, more

        def after(fut) -> None:
            if fut.exception() is not None:
                # Readers resolve only the keys in their way, so the rest goes to the store's
                # finisher (its resolving/ record stays for a restart to finish, idempotently).
                log.warning(
                    "resolving an epoch's secondaries failed (handed to the store's finisher; "
                    "a restart finishes them): %s",
                    fut.exception(),
                )
                self.store.finisher.submit(start_ts, commit_ts)
                return
            if not fut.result()[1]:
                fail_point("epoch.commit.resolved")
                return
            try:
                self.store.committer.submit(step, RESOLVE_STEP).add_done_callback(after)
            except RuntimeError:  # the store is closing: recover() finishes at the next start
                log.info("epoch start_ts=%d: secondaries left to the next start", start_ts)

        self.store.committer.submit(step, RESOLVE_STEP).add_done_callback(after)

    def _mark_aborted(self, info: EpochRecord) -> EpochRecord:
        def act(ctx: WriteContext) -> EpochRecord:
            refuse_if_dropped(ctx.reader, info.job, info.epoch)  # never bring its record back
            settled = self._settle(ctx, info)
            st = self._retire(self._job(ctx.reader, info.job), settled)
            if st["open_epoch"] == info.epoch:
                st = {**st, "open_epoch": 0}
            if settled.state == COMMITTED:
                st = {**st, "last_committed": max(st["last_committed"], info.epoch)}
            self._save(ctx, settled, st)
            return settled

        settled = self.store.run_write(act)
        self.open_holds.forget((info.job, info.start_ts))
        if settled.state == ABORTED:
            self._tell("aborted", settled)
        return settled

    def abort(self, job: str, epoch: int, start_ts: int) -> EpochRecord:
        """Roll back attempt ``start_ts`` of (job, epoch); idempotent."""
        self._check(job, epoch)
        with self._job_lock(job):
            info = self.get(job, epoch)
            if info.state == COMMITTED:
                raise FailedPrecondition(f"job {job!r} epoch {epoch} is already committed")
            if info.start_ts != start_ts or info.state == ABORTED:
                return replace(info, state=ABORTED) if info.start_ts == start_ts else info
            settled = self._mark_aborted(info)
            if settled.state == COMMITTED:
                raise FailedPrecondition(f"job {job!r} epoch {epoch} is already committed")
            return settled

    def heartbeat(self, job: str, epoch: int, start_ts: int, ttl_ms: int) -> EpochRecord:
        """Keep attempt ``start_ts``'s primary lock alive for ``ttl_ms`` more."""
        self._check(job, epoch)
        info = self.get(job, epoch)
        if info.start_ts != start_ts or info.state != PREWRITE:
            raise FailedPrecondition(
                f"job {job!r} epoch {epoch}: attempt start_ts={start_ts} "
                f"is not open (current: {info.start_ts}, {info.state})"
            )
        # Renewed first: a lapse settled from here on finds it renewed (settle_lapsed looks
        # again under the job's lock) or makes the store call below fail.
        self.open_holds.renew((job, start_ts), info.owner, ttl_ms)
        try:
            self.store.txn_heartbeat(info.primary_key, start_ts, ttl_ms or DEFAULT_LOCK_TTL_MS)
        except (TxnRolledBack, TxnLockNotFound):
            self._mark_aborted(info)
            raise Aborted(
                f"job {job!r} epoch {epoch}: attempt start_ts={start_ts} was rolled "
                "back; open the epoch again"
            ) from None
        return info

    # ------------------------------------------------------------------ holds with an owner

    def open_hold(self, info: EpochRecord) -> OwnedHold:
        """The hold of open attempt ``info``: its owner, TTL and last renewal."""
        return self.open_holds.get((info.job, info.start_ts))

    def settle_lapsed(self) -> list[EpochRecord]:
        """Settle every open attempt whose hold lapsed (its owner stopped renewing it), through
        its primary as the next attempt's open would: a committed primary means the epoch is
        committed, anything else is rolled back and the epoch recorded ABORTED. Returns the
        attempts settled. Called by the GC tick, before it computes the holds."""
        with self.store.storage.read_txn() as r:
            opened = [
                info
                for job, st in self.job_states_in(r).items()
                if st["open_epoch"]
                and (info := self._load(r, job, st["open_epoch"])) is not None
                and info.state == PREWRITE
            ]
        self.open_holds.retain({(x.job, x.start_ts) for x in opened})
        out = []
        for info in opened:
            if not self.open_holds.lapsed((info.job, info.start_ts)):
                continue
            with self._job_lock(info.job):
                now = self.get(info.job, info.epoch)  # re-read under the job's lock
                if now.start_ts != info.start_ts or now.state != PREWRITE:
                    continue
                if not self.open_holds.lapsed((info.job, info.start_ts)):
                    continue  # renewed meanwhile
                hold = self.open_hold(info)
                settled = self._mark_aborted(now)
            log.warning(
                "job %r epoch %d: attempt start_ts=%d was not renewed for %.0fs (its hold TTL);"
                " settled through its primary: %s",
                info.job,
                info.epoch,
                info.start_ts,
                hold.ttl_ms / 1000,
                settled.state,
            )
            out.append(settled)
        return out

    def release(self, job: str, owner: str = "") -> EpochRecord | None:
        """Settle ``job``'s open attempt now, through its primary (committed stays committed,
        anything else is rolled back): it holds nothing afterwards. With ``owner``, only an
        attempt that owner opened (a stopping writer releasing its own). Returns the attempt
        as settled, or None if the job had no open attempt (of ``owner``). NotFound for a job
        that never opened an epoch."""
        check_job_name(job)
        if owner:
            check_label(job, "owner", owner)
        with self._job_lock(job):
            with self.store.storage.read_txn() as r:
                if r.get("meta", job_state_key(job)) is None:
                    raise NotFound(f"job {job!r} has no epochs")
                st = self._job(r, job)
                info = self._load(r, job, st["open_epoch"]) if st["open_epoch"] else None
            if info is None or info.state != PREWRITE or (owner and info.owner != owner):
                return None
            return self._mark_aborted(info)

    def recover(self) -> int:
        """After a restart, finish the secondaries of every committed epoch whose resolution a
        crash or a stop cut short (each has a ``resolving/`` record), and of each job's last
        committed epoch (a data dir written before those records). Returns keys resolved."""
        n = 0
        with self.store.storage.read_txn() as r:
            left = [
                (resolving_start_ts(k), int(v)) for k, v in r.iter_prefix("meta", RESOLVING_PREFIX)
            ]
        for start_ts, commit_ts in left:
            n += self.store.resolve_locks(start_ts, commit_ts)
            key = resolving_key(start_ts)

            def done(ctx: WriteContext, key: bytes = key) -> None:
                ctx.buf.delete("meta", key)

            self.store.run_write(done)
        for job, st in self.jobs().items():
            if st["last_committed"]:
                info = self.get(job, st["last_committed"])
                n += self.store.resolve_locks(info.start_ts, info.commit_ts)
        return n
