"""Revisions: roll a root table back, apply a correction set, rebuild a view; each recorded.

A revision is a new transaction, never a rewrite of history: the revised table can be read AS OF
before and after it, and revised again. Every view downstream follows by its ordinary maintenance
(the revision is a change of its source like any other), so all of them reach it at one barrier,
the first issued at or above the revision's commit ts (``RevisionRecord.barrier``).

- **rollback** (``rollback``): the table's net change since the target (its change index over
  (target, now]) is written back as one Percolator transaction: every key that changed gets its
  value at the target again (or is deleted where it did not exist). The table is **fenced**
  first (``kvstore.actions.fence``): new writes into it are refused with TableFenced
  (UNAVAILABLE, which clients retry, so writers wait); transactions that locked keys of the table
  before the fence are waited for, and after ``DRAIN_GRACE_S`` rolled back (the revision wins;
  their commit fails as a conflict). The difference is prewritten in bounded steps under the
  revision's own primary; the primary's commit, the audit record's DONE and the fence's removal
  are one LMDB transaction. A crash leaves the revision wholly applied or not at all
  (``recover`` settles a rollback left RUNNING through its primary and lifts its fence).
- **corrections** (``begin_corrections``): an epoch transaction of the job ``revision/<id>``,
  whose rows the client or Spark's executors prewrite as secondaries; committing the epoch marks
  the record DONE in the same LMDB transaction (``on_epoch_commit``). Not fenced: a correction set
  writes given keys, and a concurrent writer of the same keys conflicts as in any transaction.
- **rebuild** (``request_rebuild``): the view's job finds the request when it opens its next
  epoch (``pending_rebuild``), recomputes the view there and names the request in the epoch's
  metadata; that commit marks the record DONE.

While a rollback runs, its target holds the GC safepoint (``holds``, kind ``revision``).

**Once its primary commits, a rollback has happened**, and ``rollback`` answers with its DONE
record whatever fails after (resolving the secondaries: readers resolve them too, the GC tick
settles them through ``settle_abandoned``, a restart through ``recover``). A rollback whose
outcome is not known when the call ends (its settling failed too) is answered with
RevisionOutcomeUnknown naming its id; the GC tick settles it. A client-chosen **revision key**
(``key``, kept in the record and indexed under ``rev-key/<key>``) makes ``rollback``
idempotent: a call repeating a key answers with that key's revision (waiting while it runs)
instead of running a second one, so a retry of a call whose answer was lost can never undo a
write acknowledged in between. A key whose revision was aborted is refused (FailedPrecondition
naming it): nothing of it applied, and running anew is the caller's choice, under a new key.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field, replace

from coordinator.errors import RevisionOutcomeUnknown, not_correctable, not_revisable
from coordinator.server.barriers import Barriers
from coordinator.server.epochs import EpochManager
from coordinator.server.gc import Hold
from coordinator.server.meta import (
    ABORTED as EPOCH_ABORTED,
)
from coordinator.server.meta import (
    COMMITTED,
    PREWRITE,
    REVISION_NEXT,
    REVISION_OPEN_PREFIX,
    REVISION_PREFIX,
    EpochRecord,
    epoch_primary_key,
    rebuild_key,
    revision_by_key_key,
    revision_key,
    revision_open_key,
)
from coordinator.server.registry import Registry
from coordinator.server.tso import TimestampOracle
from kvstore import actions
from kvstore.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SnapshotTooOld,
    TableNotFound,
    cut,
)
from kvstore.failpoints import fail_point
from kvstore.group_commit import WriteContext
from kvstore.mvcc.keys import table_prefix
from kvstore.mvcc.records import LockOp, Mutation, WriteKind
from kvstore.mvcc.timestamp import wall_text
from kvstore.results import COMMITTED as TXN_COMMITTED
from kvstore.results import LOCKED
from kvstore.storage import Reader
from kvstore.store import MAX_LOCK_TTL_MS, LocalStore
from kvstore.text import control_character

log = logging.getLogger("snapview.revisions")

ROLLBACK, CORRECTIONS, REBUILD = "rollback", "corrections", "rebuild"
RUNNING, DONE, ABORTED, DRY_RUN = "running", "done", "aborted", "dry_run"
CORRECTION_MODES = ("upsert", "delete")
REVISION_JOB_PREFIX = "revision/"
# How long a rollback waits for transactions that locked keys of its table before the fence to
# finish by themselves, before it rolls them back.
DRAIN_GRACE_S = 5.0
MAX_WHO_CHARS = 200
MAX_KEY_CHARS = 128
# How long a call repeating the key of a rollback still running waits for it to finish before
# answering RevisionOutcomeUnknown (UNAVAILABLE: the client asks again with the same key).
KEY_WAIT_S = 60.0
# A rollback's difference goes into the store in writes of at most this many rows.
PREWRITE_STEP = 2048
# A rollback's locks must not expire while the server writes them: only the server decides its
# fate (a crash: ``recover``), so they outlive any pause a reader could mistake for death.
ROLLBACK_TTL_MS = MAX_LOCK_TTL_MS
HOLD_KIND = "revision"  # the GC hold's kind (snapview leases, snapview_gc_hold_age_seconds)
ROOT = "root"


@dataclass(frozen=True)
class RevisionRecord:
    """One revision as recorded in ``meta`` (``rev/<id:8>``); the audit trail."""

    id: int
    table: str
    kind: str  # rollback | corrections | rebuild
    state: str  # running | done | aborted (dry_run: computed, never stored)
    who: str
    started_wall_ms: int
    ended_wall_ms: int = 0
    target_ts: int = 0  # rollback: the table's state it returns to
    target_barrier: int = 0  # rollback: the barrier asked for (0: a ts was)
    start_ts: int = 0
    commit_ts: int = 0
    restored: int = 0  # rows given their old value back (rollback) or upserted (corrections)
    removed: int = 0  # rows deleted
    mode: str = ""  # corrections: upsert | delete
    job: str = ""  # corrections: the epoch's job; rebuild: the view's job
    views: tuple[str, ...] = field(default_factory=tuple)  # downstream, upstream first
    error: str = ""
    barrier: int = 0  # rebuild: the barrier (epoch) whose version of the view recomputed it
    key: str = ""  # rollback: the client's revision key ("" if none)

    @property
    def rows(self) -> int:
        return self.restored + self.removed

    def to_json(self) -> bytes:
        return json.dumps({**asdict(self), "views": list(self.views)}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> RevisionRecord:
        d = json.loads(raw)
        return cls(**{**d, "views": tuple(d.get("views", ()))})


def revision_job(rid: int) -> str:
    return f"{REVISION_JOB_PREFIX}{rid}"


def rollback_primary_key(rid: int) -> bytes:
    """The primary of rollback ``rid``'s transaction: a status key of the system table."""
    return epoch_primary_key(f"rollback/{rid}", 1)


def _now_ms() -> int:
    return int(time.time() * 1000)


class RevisionManager:
    """Runs and records revisions (see the module docstring)."""

    def __init__(
        self,
        store: LocalStore,
        tso: TimestampOracle,
        registry: Registry,
        barriers: Barriers,
        epochs: EpochManager,
        drain_grace_s: float = DRAIN_GRACE_S,
    ) -> None:
        self.store, self.tso, self.registry = store, tso, registry
        self.barriers, self.epochs = barriers, epochs
        self.drain_grace_s = drain_grace_s
        self._mu = threading.Lock()  # one revision starts at a time (the fence check and id)
        # The rollbacks a call of this process is running: the GC tick leaves them alone, and a
        # call repeating one's key waits for it (``_running`` is notified as each ends).
        self._active: set[int] = set()
        self._running = threading.Condition()

    # ------------------------------------------------------------------ records

    @staticmethod
    def load(reader: Reader, rid: int) -> RevisionRecord | None:
        raw = reader.get("meta", revision_key(rid))
        return None if raw is None else RevisionRecord.from_json(raw)

    @staticmethod
    def _save(ctx: WriteContext, rec: RevisionRecord) -> None:
        ctx.buf.put("meta", revision_key(rec.id), rec.to_json())

    def get(self, rid: int) -> RevisionRecord:
        with self.store.storage.read_txn() as r:
            rec = self.load(r, rid)
        if rec is None:
            raise NotFound(f"revision {rid} does not exist")
        return self._settle_corrections(rec)

    def records(self, table: str = "", limit: int = 0) -> list[RevisionRecord]:
        """Recorded revisions, newest first (of ``table`` only when given); a correction set
        whose writer is gone is settled first (see ``_settle_corrections``)."""
        recs = [x for x in self.stored() if not table or x.table == table]
        return [self._settle_corrections(x) for x in recs[: limit or None]]

    def open_records(self) -> list[RevisionRecord]:
        """The revisions not finished yet (``rev-open/``): running, or a rollback committed whose
        secondaries may be left. GC ticks and restarts read these, not the whole history."""
        with self.store.storage.read_txn() as r:
            keys = [k for k, _ in r.iter_prefix("meta", REVISION_OPEN_PREFIX)]
            recs = [
                self.load(r, int.from_bytes(k[len(REVISION_OPEN_PREFIX) :], "big")) for k in keys
            ]
        return [x for x in recs if x is not None]

    @staticmethod
    def _finish(ctx: WriteContext, rid: int) -> None:
        ctx.buf.delete("meta", revision_open_key(rid))

    def stored(self) -> list[RevisionRecord]:
        """Every record as stored, newest first: one read, no settling (for the metrics)."""
        with self.store.storage.read_txn() as r:
            recs = [RevisionRecord.from_json(v) for _, v in r.iter_prefix("meta", REVISION_PREFIX)]
        return recs[::-1]

    def fenced(self) -> int:
        """How many tables a rollback fences right now."""
        with self.store.storage.read_txn() as r:
            return len(actions.fences(r))

    def barrier_of(self, rec: RevisionRecord) -> int:
        """The barrier at which the revision is visible everywhere: the first issued at or above
        its commit ts, or for a rebuild the barrier its view epoch was for (0 while there is
        none, or when it did not commit)."""
        if rec.state != DONE or not rec.commit_ts:
            return 0
        if rec.barrier:
            return rec.barrier  # a rebuild is the view's version at the barrier of its epoch
        got = self.barriers.issued_after(rec.commit_ts - 1, limit=1)
        return got[0] if got else 0

    def pending_rebuild(self, job: str) -> int:
        """The revision id of a rebuild requested of ``job``'s view and not yet done (0: none)."""
        with self.store.storage.read_txn() as r:
            raw = r.get("meta", rebuild_key(job))
        return int(raw) if raw else 0

    def holds(self) -> list[Hold]:
        """GC holds: the target of every rollback in progress, and the start of every correction
        set still being written (its prewrites are refused once the safepoint passes it)."""
        out = []
        for x in self.open_records():
            if x.state != RUNNING:
                continue
            if x.kind == ROLLBACK and x.target_ts:
                out.append(Hold(HOLD_KIND, f"revision {x.id} of {x.table}", x.target_ts))
            elif x.kind == CORRECTIONS:
                with self.store.storage.read_txn() as r:
                    ep = self.epochs.load_in(r, x.job, 1)
                # Its epoch is a hold with an owner: lapsed, it holds nothing (the GC tick
                # settles it, then settle_abandoned records the set ABORTED).
                if (
                    ep is not None
                    and ep.state == PREWRITE
                    and not self.epochs.open_hold(ep).lapsed(self.tso.physical_ms())
                ):
                    name = f"revision {x.id} of {x.table} (corrections)"
                    out.append(Hold(HOLD_KIND, name, ep.start_ts - 1))
        return out

    def _new_record(self, ctx: WriteContext, **fields) -> RevisionRecord:
        raw = ctx.reader.get("meta", REVISION_NEXT)
        rid = int(raw) if raw else 1
        ctx.buf.put("meta", REVISION_NEXT, str(rid + 1).encode())
        rec = RevisionRecord(id=rid, state=RUNNING, started_wall_ms=_now_ms(), **fields)
        self._save(ctx, rec)
        ctx.buf.put("meta", revision_open_key(rid), b"")
        return rec

    # ------------------------------------------------------------------ checks

    def _root_table(self, table: str, what: str) -> int:
        """The id of root table ``table``; refuses a missing table, a view or state table, and a
        table a view job writes (``what`` names the operation)."""
        if not isinstance(table, str) or not table:
            raise InvalidArgument(f"{what}: a table name is required")
        try:
            info = self.store.catalog.get(table)
        except TableNotFound:
            raise TableNotFound(table) from None
        writer = self.registry.topology().writer_of(table)
        if info.kind != ROOT or (writer is not None and writer.is_view):
            raise not_revisable(table, info.kind if info.kind != ROOT else "view")
        return info.id

    def _downstream(self, table: str) -> tuple[str, ...]:
        """The views downstream of ``table`` through view jobs only, upstream first: those that
        reach a revision at its barrier. A table a non-view job writes from it (a sink fed by a
        change stream) follows at its own pace, and so do the views over it: not included."""
        return tuple(self.registry.topology().downstream(table, views_only=True))

    def _check_who(self, who: str) -> str:
        _check_text("who", who, MAX_WHO_CHARS)
        return who or "unknown"

    def _target(self, table: str, to_ts: int, to_barrier: int) -> int:
        if bool(to_ts) == bool(to_barrier):
            raise InvalidArgument(f"table {table!r}: give exactly one of to_ts and to_barrier")
        if to_barrier:
            self._check_safepoint(table, to_barrier)  # pruned with everything below it
            if not self.barriers.is_issued(to_barrier):
                raise NotFound(
                    f"table {table!r}: barrier {to_barrier} ({wall_text(to_barrier)}) was never "
                    "issued, or was pruned (barriers are kept an hour with GC off); roll back to "
                    "a time instead (to_ts, or --to-ts with a date and time)"
                )
            target = to_barrier
        else:
            target = to_ts
        if target > self.tso.issued():
            raise InvalidArgument(
                f"table {table!r}: target ts {target} is in the future (the TSO has issued up "
                f"to {self.tso.issued()})"
            )
        self._check_safepoint(table, target)
        return target

    def _check_safepoint(self, table: str, target: int) -> None:
        sp = self.store.safepoint
        if target < sp:
            raise SnapshotTooOld(
                f"table {table!r}: cannot revise to ts {target} ({wall_text(target)}): it is "
                f"older than the GC safepoint {sp} ({wall_text(sp)}); its versions may be "
                "collected (serve --retention keeps more history)"
            )

    # ------------------------------------------------------------------ rollback

    def rollback(
        self,
        table: str,
        to_ts: int = 0,
        to_barrier: int = 0,
        dry_run: bool = False,
        who: str = "",
        key: str = "",
    ) -> RevisionRecord:
        """Make ``table`` equal to itself as of the target, in one new transaction.

        Guarantees: read at the returned ``commit_ts``, the table is exactly the table at the
        target; nothing of the revision is visible below it; and the record, the data and the
        fence's removal are written together. Once the primary committed the DONE record is
        returned, never an error; RevisionOutcomeUnknown (naming the id) when the outcome could
        not be settled. With ``key``, a call repeating it answers with that key's revision
        instead of running another (see the module docstring). A dry run writes nothing and
        returns the counts (state ``dry_run``, id 0; ``key`` is ignored)."""
        who = self._check_who(who)
        _check_text("key", key, MAX_KEY_CHARS)
        if key and not dry_run:
            known = self._by_key(key)
            if known is not None:
                return self._repeat(known, table, to_ts, to_barrier)
        table_id = self._root_table(table, "revise")
        target = self._target(table, to_ts, to_barrier)
        if dry_run:
            now = self.tso.now()
            restored = removed = 0
            if target < now:
                # Counted as the change is read: the difference is never held, only a window of
                # its keys; and one of the server's --max-heavy-calls slots (kvstore.heavy_calls).
                with self.store.heavy_calls.hold("Revise (dry run)"):
                    restored, removed = self.store.count_changes(table, target, now)
            return RevisionRecord(
                0,
                table,
                ROLLBACK,
                DRY_RUN,
                who,
                _now_ms(),
                _now_ms(),
                target_ts=target,
                target_barrier=to_barrier,
                restored=restored,
                removed=removed,
                views=self._downstream(table),
            )
        rec, fresh = self._begin_rollback(table, table_id, target, to_barrier, who, key)
        if not fresh:  # a concurrent call with the same key recorded it first
            return self._repeat(rec, table, to_ts, to_barrier)
        try:
            # The record holds the GC safepoint from here; one it passed already is refused.
            self._check_safepoint(table, target)
            self._drain(table, table_id)
            fail_point("revision.fenced")
            return self._apply_rollback(rec, table_id)
        except BaseException as e:
            self._abort(rec, table_id, f"{type(e).__name__}: {e}")
            try:
                after = self.get_raw(rec.id)
            except Exception:  # noqa: BLE001 - cannot even read it: the outcome is unknown
                after = rec
            if after.state == DONE:
                # Its primary committed (the failure came after, or the commit's write failed
                # after it was durable): the revision happened, and is answered as such.
                log.warning("revision %d: committed at %d despite %r", rec.id, after.commit_ts, e)
                return after
            if after.state == RUNNING:
                raise self._unknown(after, e) from e
            raise
        finally:
            with self._running:
                self._active.discard(rec.id)
                self._running.notify_all()

    def _by_key(self, key: str) -> RevisionRecord | None:
        with self.store.storage.read_txn() as r:
            raw = r.get("meta", revision_by_key_key(key))
            return None if raw is None else self.load(r, int(raw))

    def _repeat(
        self, rec: RevisionRecord, table: str, to_ts: int, to_barrier: int
    ) -> RevisionRecord:
        """The answer to a rollback call repeating the key of ``rec``: ``rec`` once it is done
        (waiting up to KEY_WAIT_S while a call of this process runs it; one nobody runs is
        settled now); FailedPrecondition if it was aborted; InvalidArgument if the call asks
        for another revision than the key's."""
        same_target = (
            rec.target_barrier == to_barrier
            if to_barrier
            else not rec.target_barrier and rec.target_ts == to_ts
        )
        if rec.kind != ROLLBACK or rec.table != table or not same_target:
            raise InvalidArgument(
                f"revision key {cut(rec.key)} is revision {rec.id} ({rec.kind} of "
                f"{rec.table!r} to ts {rec.target_ts}, barrier {rec.target_barrier}); a "
                f"different revision (of {table!r} to ts {to_ts}, barrier {to_barrier}) needs a "
                "different key"
            )
        deadline = time.monotonic() + KEY_WAIT_S
        with self._running:
            while rec.id in self._active and (left := deadline - time.monotonic()) > 0:
                self._running.wait(left)
        rec = self.get_raw(rec.id)
        if rec.state == RUNNING:
            self._settle_orphan(rec)
            rec = self.get_raw(rec.id)
        if rec.state == DONE:
            return rec
        if rec.state == ABORTED:
            raise FailedPrecondition(
                f"revision {rec.id} of {rec.table!r} (key {cut(rec.key)}) was aborted: "
                f"{rec.error}; nothing of it was applied. To run it again, use a new key"
            )
        raise self._unknown(rec, None)

    @staticmethod
    def _unknown(rec: RevisionRecord, cause: BaseException | None) -> RevisionOutcomeUnknown:
        why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        key = f"; `snapview revise ... --key {rec.key}` asks again" if rec.key else ""
        return RevisionOutcomeUnknown(
            f"revision {rec.id} of {rec.table!r}: its outcome is not known yet{why}; the "
            f"server settles it (applied wholly or not at all): `snapview revisions --table "
            f"{rec.table}` shows revision {rec.id}'s state{key}"
        )

    def _settle_orphan(self, rec: RevisionRecord) -> bool:
        """Settle rollback ``rec`` if no call of this process runs it: RUNNING, through its
        primary (``_settle_rollback``); DONE with its secondaries maybe left, by resolving
        them. Whether it settled one."""
        with self._mu:  # a rollback joins ``_active`` under it, in the write that records it
            if rec.id in self._active:
                return False
            rec = self.get_raw(rec.id)
            if rec.state == RUNNING:
                table_id: int | None
                try:
                    table_id = self.store.catalog.get(rec.table).id
                except TableNotFound:
                    table_id = None
                self._settle_rollback(rec, table_id, "its call ended before it was applied")
            else:
                self.store.resolve_locks(rec.start_ts, rec.commit_ts)
                self.store.run_write(lambda ctx: self._finish(ctx, rec.id))
            return True

    def _begin_rollback(
        self, table: str, table_id: int, target: int, to_barrier: int, who: str, key: str
    ) -> tuple[RevisionRecord, bool]:
        """Record the rollback RUNNING and fence its table, in one write: (record, True); or
        (the key's revision, False) when ``key`` was used already."""
        views = self._downstream(table)

        def act(ctx: WriteContext) -> tuple[RevisionRecord, bool]:
            if key:
                raw = ctx.reader.get("meta", revision_by_key_key(key))
                known = None if raw is None else self.load(ctx.reader, int(raw))
                if known is not None:
                    return known, False
            held = actions.fences(ctx.reader).get(table_prefix(table_id).hex())
            if held is not None:
                raise FailedPrecondition(
                    f"table {table!r} is being revised already (revision {held[1]}); wait for it "
                    "to finish (`snapview revisions`)"
                )
            rec = self._new_record(
                ctx,
                table=table,
                kind=ROLLBACK,
                who=who,
                target_ts=target,
                target_barrier=to_barrier,
                views=views,
                key=key,
            )
            if key:
                ctx.buf.put("meta", revision_by_key_key(key), str(rec.id).encode())
            actions.set_fence(ctx, table_id, table, rec.id)
            return rec, True

        with self._mu:
            rec, fresh = self.store.run_write(act)
            if fresh:
                with self._running:
                    self._active.add(rec.id)
        if fresh:
            log.info("revision %d: rolling %r back to %d (fenced)", rec.id, table, target)
        return rec, fresh

    def _drain(self, table: str, table_id: int) -> None:
        """Wait until no other transaction holds a lock in the table. With the fence up no new
        lock comes; the ones there are finished through their primaries: committed ones are
        committed, expired ones rolled back, and live ones after ``drain_grace_s`` rolled back
        by force (their owner's commit then fails)."""
        deadline = time.monotonic() + self.drain_grace_s
        prefix = table_prefix(table_id)
        while True:
            with self.store.storage.read_txn() as r:
                owners = {
                    (lock.primary, lock.start_ts)
                    for key, raw in r.iter_prefix("lock", prefix)
                    for lock in (r.parse_lock(key, raw),)
                }
            if not owners:
                return
            force = time.monotonic() >= deadline
            for primary, start_ts in sorted(owners, key=lambda o: o[1]):
                st = self.store.check_txn_status(primary, start_ts, rollback_if_not_exist=True)
                if st.status == LOCKED:
                    if not force:
                        continue
                    log.warning(
                        "revision of %r: rolling back txn %d, which held locks in the table "
                        "for longer than %.1fs",
                        table,
                        start_ts,
                        self.drain_grace_s,
                    )
                    self.store.run_write(
                        lambda ctx, p=primary, t=start_ts: actions.settle_txn(ctx, p, t)  # type: ignore[misc]
                    )
                else:
                    commit_ts = st.commit_ts if st.status == TXN_COMMITTED else 0
                    self.store.resolve_locks(start_ts, commit_ts)
            time.sleep(0.01)

    def _apply_rollback(self, rec: RevisionRecord, table_id: int) -> RevisionRecord:
        """Write the difference as one Percolator transaction whose primary is the revision's
        own status key: the primary, then the difference in writes of at most PREWRITE_STEP
        rows (the store's one writer is held for a step at a time, never for the whole
        revision; readers of the table at or above start_ts wait on its locks), then one write
        that commits the primary, records DONE and lifts the fence; the secondaries are
        resolved after it, in steps."""
        start_ts = self.tso.now()
        # Nothing commits into the table past the drain (the fence), so the change index read
        # at start_ts is the table's whole change since the target.
        changes = self.store.scan_changes(rec.table, rec.target_ts, start_ts)
        muts: list[Mutation] = [
            (LockOp.PUT, c.key, c.old) if c.old is not None else (LockOp.DELETE, c.key, b"")
            for c in changes
        ]
        restored = sum(m[0] is LockOp.PUT for m in muts)
        rec = self._update(rec, start_ts=start_ts, restored=restored, removed=len(muts) - restored)
        primary = rollback_primary_key(rec.id)
        size = len(muts) + 1
        self.store.run_write(
            lambda ctx: actions.prewrite(
                ctx, [(LockOp.PUT, primary, b"revision")], primary, start_ts, ROLLBACK_TTL_MS, size
            )
        )
        for lo in range(0, len(muts), PREWRITE_STEP):
            step = muts[lo : lo + PREWRITE_STEP]
            self.store.committer.run(
                lambda ctx, step=step: actions.prewrite(  # type: ignore[misc]
                    ctx, step, primary, start_ts, ROLLBACK_TTL_MS, size, rec.id
                ),
                len(step),
            )
        fail_point("revision.prewritten")
        commit_ts = self.tso.now()
        # A one-phase commit into the table that took its commit_ts before ours but has not run
        # yet would run after the fence is lifted and land below our commit: wait for every
        # such one to run (the fence refuses it) before the write that lifts the fence.
        self.store.wait_commits_below(commit_ts)

        def commit(ctx: WriteContext) -> RevisionRecord:
            actions.commit_key(ctx, primary, start_ts, commit_ts)
            actions.clear_fence(ctx, table_id)
            done = replace(rec, state=DONE, commit_ts=commit_ts, ended_wall_ms=_now_ms())
            self._save(ctx, done)
            return done

        done = self.store.run_write(commit)
        # The revision has happened: nothing that fails from here makes it an error. Its
        # secondaries are resolved by readers that meet them, by the GC tick
        # (``settle_abandoned``) and at a restart (``recover``), as Percolator's are.
        try:
            fail_point("revision.applied")
            self.store.resolve_locks(start_ts, commit_ts)  # readers finish them too, if first
            self.store.run_write(lambda ctx: self._finish(ctx, done.id))
        except Exception as e:  # noqa: BLE001 - settled later; the answer is the revision
            log.warning(
                "revision %d: committed at %d; resolving its secondaries failed (%s: %s), "
                "they are settled later",
                done.id,
                commit_ts,
                type(e).__name__,
                e,
            )
        log.info(
            "revision %d: %r rolled back to %d at %d (%d restored, %d removed)",
            done.id,
            done.table,
            done.target_ts,
            done.commit_ts,
            done.restored,
            done.removed,
        )
        return done

    def _update(self, rec: RevisionRecord, **fields) -> RevisionRecord:
        new = replace(rec, **fields)
        self.store.run_write(lambda ctx: self._save(ctx, new))
        return new

    def _settle_rollback(self, rec: RevisionRecord, table_id: int | None, error: str) -> None:
        """Finish a rollback that stopped part-way, through its primary: committed, it is
        recorded DONE and its secondaries resolved; otherwise its primary is rolled back (so it
        can never commit), then its locks, and it is recorded ABORTED. The fence goes either
        way. Idempotent: a crash inside it is settled again by ``recover``."""
        primary = rollback_primary_key(rec.id)
        if rec.start_ts:
            with self.store.storage.read_txn() as r:
                w = r.find_txn_write(primary, rec.start_ts)
            if w is not None and w[1].kind is not WriteKind.ROLLBACK:
                self.store.resolve_locks(rec.start_ts, w[0])
                self._close(rec, table_id, DONE, "", commit_ts=w[0])
                return
            self.store.run_write(lambda ctx: actions.rollback_key(ctx, primary, rec.start_ts))
            self.store.resolve_locks(rec.start_ts, 0)
        self._close(rec, table_id, ABORTED, error)

    def _close(
        self, rec: RevisionRecord, table_id: int | None, state: str, error: str, commit_ts: int = 0
    ) -> None:
        def act(ctx: WriteContext) -> None:
            now = self.load(ctx.reader, rec.id)
            if now is not None and now.state == RUNNING:
                closed = replace(now, state=state, error=error[:2000], ended_wall_ms=_now_ms())
                self._save(ctx, replace(closed, commit_ts=commit_ts) if commit_ts else closed)
            if table_id is not None:
                actions.clear_fence(ctx, table_id)
            actions.clear_fences_of(ctx, rec.id)  # its table's id may be gone (dropped)
            self._finish(ctx, rec.id)

        self.store.run_write(act)

    def _abort(self, rec: RevisionRecord, table_id: int | None, error: str) -> None:
        """Record ``rec`` ABORTED (if still RUNNING) and lift the fence of ``table_id``; a
        rollback that prewrote is first settled through its primary. Best effort: what fails
        here, ``recover`` settles at the next start."""
        try:
            if rec.kind == ROLLBACK:
                self._settle_rollback(self.get_raw(rec.id), table_id, error)
            else:
                self._close(rec, table_id, ABORTED, error)
        except Exception:  # noqa: BLE001 - recover() at the next start settles it
            log.exception("revision %d: could not record its abort", rec.id)

    # ------------------------------------------------------------------ corrections

    def begin_corrections(
        self, table: str, mode: str, who: str = "", lock_ttl_ms: int = 0
    ) -> tuple[RevisionRecord, EpochRecord]:
        """Record a correction set of ``table`` and open its epoch transaction: the caller
        prewrites the rows as secondaries of the epoch's primary and commits the epoch (job
        ``revision/<id>``, epoch 1) with ``{"rows": n}`` in its metadata."""
        who = self._check_who(who)
        if mode not in CORRECTION_MODES:
            raise InvalidArgument(
                f"table {table!r}: correction mode {cut(mode)} is not one of {CORRECTION_MODES}"
            )
        self._root_table(table, "revise")
        if self.store.catalog.get(table).hidden_row_id:
            raise not_correctable(table)
        views = self._downstream(table)

        def act(ctx: WriteContext) -> RevisionRecord:
            rid = int(ctx.reader.get("meta", REVISION_NEXT) or b"1")
            return self._new_record(
                ctx,
                table=table,
                kind=CORRECTIONS,
                who=who,
                mode=mode,
                job=revision_job(rid),
                views=views,
            )

        with self._mu:
            rec = self.store.run_write(act)
        try:
            epoch = self.epochs.open(rec.job, 1, lock_ttl_ms)
        except BaseException as e:
            self._abort(rec, None, f"{type(e).__name__}: {e}")
            raise
        return rec, epoch

    def _settle_corrections(self, rec: RevisionRecord) -> RevisionRecord:
        """A RUNNING correction set whose epoch was aborted (or whose writer died and whose
        lock expired) is recorded ABORTED; one still being written is left alone."""
        if rec.kind != CORRECTIONS or rec.state != RUNNING:
            return rec
        try:
            ep = self.epochs.get(rec.job, 1)
        except NotFound:
            return rec
        if ep.state == PREWRITE:
            st = self.store.check_txn_status(ep.primary_key, ep.start_ts, True)
            if st.status == LOCKED:
                return rec
            if st.status != TXN_COMMITTED:
                try:
                    ep = self.epochs.abort(rec.job, 1, ep.start_ts)
                except FailedPrecondition:
                    ep = self.epochs.get(rec.job, 1)
        if ep.state == COMMITTED:
            return self.get_raw(rec.id)
        if ep.state == EPOCH_ABORTED:
            self._abort(rec, None, "its epoch transaction was aborted")
            return self.get_raw(rec.id)
        return rec

    def settle_abandoned(self) -> int:
        """Record ABORTED every running correction set whose epoch is no longer open (its
        writer went away and the epoch's hold lapsed: ``EpochManager.settle_lapsed``, called
        by the GC tick just before), and settle every rollback left open that no call runs (a
        committed one's secondaries, one whose call failed before its outcome was known).
        Returns how many. A set still being written, a rollback still running, are left alone."""
        n = 0
        for rec in self.open_records():
            if rec.kind == ROLLBACK:
                n += self._settle_orphan(rec)
                continue
            if rec.kind != CORRECTIONS or rec.state != RUNNING:
                continue
            with self.store.storage.read_txn() as r:
                ep = self.epochs.load_in(r, rec.job, 1)
            if ep is not None and ep.state == EPOCH_ABORTED:
                self._settle_corrections(rec)
                n += 1
        return n

    def get_raw(self, rid: int) -> RevisionRecord:
        with self.store.storage.read_txn() as r:
            rec = self.load(r, rid)
        if rec is None:
            raise NotFound(f"revision {rid} does not exist")
        return rec

    # ------------------------------------------------------------------ rebuild

    def request_rebuild(self, view: str, who: str = "") -> RevisionRecord:
        """Ask ``view``'s job to recompute the view at its next barrier. A rebuild already
        pending for the view is returned instead of a second one."""
        who = self._check_who(who)
        self.store.catalog.get(view)  # TableNotFound names it
        writer = self.registry.topology().writer_of(view)
        if writer is None or not writer.is_view:
            raise FailedPrecondition(
                f"table {view!r} is not a view maintained by a registered view job; only views "
                "are rebuilt (revise a root table with `snapview revise`)"
            )
        views = self._downstream(view)

        def act(ctx: WriteContext) -> RevisionRecord:
            raw = ctx.reader.get("meta", rebuild_key(writer.job))
            if raw is not None:
                pending = self.load(ctx.reader, int(raw))
                if pending is not None and pending.state == RUNNING:
                    return pending
            rec = self._new_record(
                ctx, table=view, kind=REBUILD, who=who, job=writer.job, views=views
            )
            ctx.buf.put("meta", rebuild_key(writer.job), str(rec.id).encode())
            return rec

        with self._mu:
            return self.store.run_write(act)

    # ------------------------------------------------------------------ epoch hook

    def on_epoch_commit(self, ctx: WriteContext, rec: EpochRecord) -> None:
        """Inside an epoch's commit (one LMDB transaction with it): a correction set's epoch
        marks its revision DONE; a view epoch naming a pending rebuild marks that one DONE."""
        if rec.job.startswith(REVISION_JOB_PREFIX):
            tail = rec.job[len(REVISION_JOB_PREFIX) :]
            rev = self.load(ctx.reader, int(tail)) if tail.isdigit() else None
            # Only the epoch BeginCorrections opened for it (user jobs cannot take the name).
            if rev is None or rev.state != RUNNING or rev.kind != CORRECTIONS or rev.job != rec.job:
                return
            rows = _count(_metadata(rec).get("rows"))
            upsert = rev.mode == "upsert"
            self._save_done(
                ctx, rev, rec, restored=rows if upsert else 0, removed=0 if upsert else rows
            )
            return
        raw = ctx.reader.get("meta", rebuild_key(rec.job))
        if raw is None or _metadata(rec).get("rebuild") != int(raw):
            return
        rev = self.load(ctx.reader, int(raw))
        ctx.buf.delete("meta", rebuild_key(rec.job))
        if rev is not None and rev.state == RUNNING:
            rows = _count(_metadata(rec).get("mutations"))
            self._save_done(ctx, rev, rec, restored=rows, barrier=rec.epoch)

    def _save_done(
        self,
        ctx: WriteContext,
        rev: RevisionRecord,
        rec: EpochRecord,
        restored: int,
        removed: int = 0,
        barrier: int = 0,
    ) -> None:
        """Record ``rev`` DONE by the epoch ``rec`` committing it (in that commit's write); its
        secondaries are the epoch's, which the epoch protocol resolves."""
        done = replace(
            rev,
            state=DONE,
            start_ts=rec.start_ts,
            commit_ts=rec.commit_ts,
            restored=restored,
            removed=removed,
            barrier=barrier,
            ended_wall_ms=_now_ms(),
        )
        self._save(ctx, done)
        self._finish(ctx, rev.id)

    def on_job_gone(self, ctx: WriteContext, job: str) -> None:
        """Inside the write that unregisters ``job`` (its view dropped): a rebuild pending for
        it can never be done; it goes, recorded ABORTED, in the same transaction."""
        raw = ctx.reader.get("meta", rebuild_key(job))
        if raw is None:
            return
        ctx.buf.delete("meta", rebuild_key(job))
        rev = self.load(ctx.reader, int(raw))
        if rev is not None and rev.state == RUNNING:
            why = "its view's job was unregistered (the view was dropped) before the rebuild"
            self._save(ctx, replace(rev, state=ABORTED, error=why, ended_wall_ms=_now_ms()))
            self._finish(ctx, rev.id)

    # ------------------------------------------------------------------ restart

    def recover(self) -> int:
        """After a restart, every revision not finished (``open_records``): a rollback left
        RUNNING is settled through its primary (committed: DONE; else its locks are rolled back
        and it is ABORTED) and its fence lifted; a DONE rollback's secondaries are resolved (a
        crash may have come between its commit and their resolution); a correction set whose
        epoch never opened is ABORTED. Returns how many rollbacks were left RUNNING."""
        n = 0
        for rec in self.open_records():
            if rec.kind == ROLLBACK and rec.state == RUNNING:
                table_id: int | None
                try:
                    table_id = self.store.catalog.get(rec.table).id
                except TableNotFound:
                    table_id = None
                self._settle_rollback(
                    rec, table_id, "the server stopped before the revision was committed"
                )
                n += 1
            elif rec.kind == ROLLBACK:
                self.store.resolve_locks(rec.start_ts, rec.commit_ts)
                self.store.run_write(lambda ctx, rid=rec.id: self._finish(ctx, rid))  # type: ignore[misc]
            elif rec.kind == CORRECTIONS and rec.state == RUNNING:
                # A stop between the record's write and its epoch's open leaves no epoch.
                with self.store.storage.read_txn() as r:
                    opened = self.epochs.load_in(r, rec.job, 1) is not None
                if not opened:
                    self._close(rec, None, ABORTED, "the server stopped before it began")
        return n


def _check_text(name: str, value: str, limit: int) -> None:
    """Refuse a revision's label ``name`` (who, key) longer than ``limit`` characters or holding
    a control character (shown raw, it would act on the operator's terminal)."""
    if len(value) > limit:
        raise InvalidArgument(f"{name} {cut(value)} must be at most {limit} characters")
    bad = control_character(value)
    if bad is not None:
        raise InvalidArgument(
            f"{name} {cut(value)} contains the control character {bad}; only printable text is "
            "allowed"
        )


def _count(value: object) -> int:
    """A row count from an epoch's metadata; anything but a non-negative integer counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _metadata(rec: EpochRecord) -> dict:
    try:
        d = json.loads(rec.metadata) if rec.metadata else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}
