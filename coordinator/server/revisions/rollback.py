"""Rollback: make a root table equal to itself as of a target, in one new transaction.

The table's net change since the target (its change index over (target, now]) is written back as
one Percolator transaction: every key that changed gets its value at the target again (or is
deleted where it did not exist). The table is **fenced** first (``kvstore.actions.fence``): new
writes into it are refused with TableFenced (UNAVAILABLE, which clients retry, so writers wait);
transactions that locked keys of the table before the fence are waited for, and after
``DRAIN_GRACE_S`` rolled back (the revision wins; their commit fails as a conflict). The
difference is prewritten in bounded steps under the revision's own primary; the primary's commit,
the audit record's DONE and the fence's removal are one LMDB transaction. A crash leaves the
revision wholly applied or not at all (``recover`` settles a rollback left RUNNING through its
primary and lifts its fence).

**Once its primary commits, a rollback has happened**, and ``rollback`` answers with its DONE
record whatever fails after (resolving the secondaries: readers resolve them too, the GC tick
settles them through ``settle_orphan``, a restart through ``recover``). A rollback whose outcome
is not known when the call ends (its settling failed too) is answered with
RevisionOutcomeUnknown naming its id; the GC tick settles it. A client-chosen **revision key**
(``key``, kept in the record and indexed under ``rev-key/<key>``) makes ``rollback``
idempotent: a call repeating a key answers with that key's revision (waiting while it runs)
instead of running a second one, so a retry of a call whose answer was lost can never undo a
write acknowledged in between. A key whose revision was aborted is refused (FailedPrecondition
naming it): nothing of it applied, and running anew is the caller's choice, under a new key.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from coordinator.errors import RevisionOutcomeUnknown
from coordinator.server.core import Core
from coordinator.server.meta import epoch_primary_key, revision_by_key_key
from coordinator.server.revisions.checks import check_text, check_who, downstream, root_table
from coordinator.server.revisions.records import (
    ABORTED,
    DONE,
    DRY_RUN,
    ROLLBACK,
    RUNNING,
    RevisionRecord,
    RevisionRecords,
    now_ms,
)
from kvstore import actions
from kvstore.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
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
from kvstore.store import MAX_LOCK_TTL_MS

log = logging.getLogger("snapview.revisions")

# How long a rollback waits for transactions that locked keys of its table before the fence to
# finish by themselves, before it rolls them back.
DRAIN_GRACE_S = 5.0
MAX_KEY_CHARS = 128
# How long a call repeating the key of a rollback still running waits for it to finish before
# answering RevisionOutcomeUnknown (UNAVAILABLE: the client asks again with the same key).
KEY_WAIT_S = 60.0
# A rollback's difference goes into the store in writes of at most this many rows.
PREWRITE_STEP = 2048
# A rollback's locks must not expire while the server writes them: only the server decides its
# fate (a crash: ``recover``), so they outlive any pause a reader could mistake for death.
ROLLBACK_TTL_MS = MAX_LOCK_TTL_MS


def rollback_primary_key(rid: int) -> bytes:
    """The primary of rollback ``rid``'s transaction: a status key of the system table."""
    return epoch_primary_key(f"rollback/{rid}", 1)


class Rollbacks:
    """Runs, settles and recovers rollbacks (see the module docstring)."""

    def __init__(
        self,
        core: Core,
        records: RevisionRecords,
        mu: threading.Lock,
        drain_grace_s: float = DRAIN_GRACE_S,
    ) -> None:
        self.store, self.tso, self.registry = core.store, core.tso, core.registry
        self.barriers, self.records = core.barriers, records
        self.drain_grace_s = drain_grace_s
        self._mu = mu  # one revision starts at a time (the fence check and id)
        # The rollbacks a call of this process is running: the GC tick leaves them alone, and a
        # call repeating one's key waits for it (``_running`` is notified as each ends).
        self._active: set[int] = set()
        self._running = threading.Condition()

    def fenced(self) -> int:
        """How many tables a rollback fences right now."""
        with self.store.storage.read_txn() as r:
            return len(actions.fences(r))

    # ------------------------------------------------------------------ checks

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
        self.store.check_not_collected(
            target,
            f"table {table!r}: cannot revise, the target",
            "its versions may be collected (serve --retention keeps more history)",
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
        who = check_who(who)
        check_text("key", key, MAX_KEY_CHARS)
        if key and not dry_run:
            known = self._by_key(key)
            if known is not None:
                return self._repeat(known, table, to_ts, to_barrier)
        table_id = root_table(self.store, self.registry, table, "revise")
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
                now_ms(),
                now_ms(),
                target_ts=target,
                target_barrier=to_barrier,
                restored=restored,
                removed=removed,
                views=downstream(self.registry, table),
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
                after = self.records.get_raw(rec.id)
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
            return None if raw is None else self.records.load(r, int(raw))

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
        rec = self.records.get_raw(rec.id)
        if rec.state == RUNNING:
            self.settle_orphan(rec)
            rec = self.records.get_raw(rec.id)
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

    def settle_orphan(self, rec: RevisionRecord) -> bool:
        """Settle rollback ``rec`` if no call of this process runs it (``_settle``): the GC tick
        for a rollback left open, and a call repeating the key of one nobody runs. Whether it
        settled one."""
        with self._mu:  # a rollback joins ``_active`` under it, in the write that records it
            if rec.id in self._active:
                return False
            self._settle(self.records.get_raw(rec.id), "its call ended before it was applied")
            return True

    def _begin_rollback(
        self, table: str, table_id: int, target: int, to_barrier: int, who: str, key: str
    ) -> tuple[RevisionRecord, bool]:
        """Record the rollback RUNNING and fence its table, in one write: (record, True); or
        (the key's revision, False) when ``key`` was used already."""
        views = downstream(self.registry, table)

        def act(ctx: WriteContext) -> tuple[RevisionRecord, bool]:
            if key:
                raw = ctx.reader.get("meta", revision_by_key_key(key))
                known = None if raw is None else self.records.load(ctx.reader, int(raw))
                if known is not None:
                    return known, False
            held = actions.fences(ctx.reader).get(table_prefix(table_id).hex())
            if held is not None:
                raise FailedPrecondition(
                    f"table {table!r} is being revised already (revision {held[1]}); wait for it "
                    "to finish (`snapview revisions`)"
                )
            rec = self.records.new_record(
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
        rec = self.records.update(
            rec, start_ts=start_ts, restored=restored, removed=len(muts) - restored
        )
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
            done = replace(rec, state=DONE, commit_ts=commit_ts, ended_wall_ms=now_ms())
            self.records.save(ctx, done)
            return done

        done = self.store.run_write(commit)
        # The revision has happened: nothing that fails from here makes it an error. Its
        # secondaries are resolved by readers that meet them, by the GC tick
        # (``settle_abandoned``) and at a restart (``recover``), as Percolator's are.
        try:
            fail_point("revision.applied")
            self.store.resolve_locks(start_ts, commit_ts)  # readers finish them too, if first
            self.store.run_write(lambda ctx: self.records.finish(ctx, done.id))
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
                self.records.close(rec, table_id, DONE, "", commit_ts=w[0])
                return
            self.store.run_write(lambda ctx: actions.rollback_key(ctx, primary, rec.start_ts))
            self.store.resolve_locks(rec.start_ts, 0)
        self.records.close(rec, table_id, ABORTED, error)

    def _abort(self, rec: RevisionRecord, table_id: int | None, error: str) -> None:
        """Record ``rec`` ABORTED (if still RUNNING) and lift the fence of ``table_id``; a
        rollback that prewrote is first settled through its primary. Best effort: what fails
        here, ``recover`` settles at the next start."""
        try:
            self._settle_rollback(self.records.get_raw(rec.id), table_id, error)
        except Exception:  # noqa: BLE001 - recover() at the next start settles it
            log.exception("revision %d: could not record its abort", rec.id)

    # ------------------------------------------------------------------ restart

    def recover(self, rec: RevisionRecord) -> bool:
        """After a restart, rollback ``rec`` not finished (``open_records``): left RUNNING, it is
        settled through its primary (committed: DONE; else its locks are rolled back and it is
        ABORTED) and its fence lifted; DONE, its secondaries are resolved (a crash may have come
        between its commit and their resolution). Whether it was left RUNNING."""
        running = rec.state == RUNNING
        self._settle(rec, "the server stopped before the revision was committed")
        return running

    def _settle(self, rec: RevisionRecord, error: str) -> None:
        """Settle rollback ``rec`` as read: RUNNING, through its primary (``_settle_rollback``,
        ``error`` recorded if it aborts); DONE with its secondaries maybe left, by resolving
        them."""
        if rec.state == RUNNING:
            table_id: int | None
            try:
                table_id = self.store.catalog.get(rec.table).id
            except TableNotFound:
                table_id = None
            self._settle_rollback(rec, table_id, error)
        else:
            self.store.resolve_locks(rec.start_ts, rec.commit_ts)
            self.store.run_write(lambda ctx: self.records.finish(ctx, rec.id))
