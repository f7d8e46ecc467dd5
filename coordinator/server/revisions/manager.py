"""RevisionManager: the one object the server holds for revisions (the service's calls, the
epoch commit and unregister hooks, the GC's holds and tick, the restart), each handed to the
module of its kind."""

from __future__ import annotations

import threading

from coordinator.server.core import Core
from coordinator.server.epochs import EpochManager
from coordinator.server.gc import Hold
from coordinator.server.meta import EpochRecord
from coordinator.server.revisions.corrections import Corrections
from coordinator.server.revisions.holds import revision_holds
from coordinator.server.revisions.rebuild import Rebuilds
from coordinator.server.revisions.records import (
    CORRECTIONS,
    DONE,
    REVISION_JOB_PREFIX,
    ROLLBACK,
    RevisionRecord,
    RevisionRecords,
)
from coordinator.server.revisions.rollback import DRAIN_GRACE_S, Rollbacks
from kvstore.group_commit import WriteContext
from kvstore.storage import Reader


class RevisionManager:
    """Runs and records revisions (see the package docstring)."""

    def __init__(
        self,
        core: Core,
        epochs: EpochManager,
        drain_grace_s: float = DRAIN_GRACE_S,
    ) -> None:
        store, registry = core.store, core.registry
        self.store, self.tso, self.registry = store, core.tso, registry
        self.barriers, self.epochs = core.barriers, epochs
        mu = threading.Lock()  # one revision starts at a time (the fence check and id)
        self.record_store = RevisionRecords(store)
        self.rollbacks = Rollbacks(core, self.record_store, mu, drain_grace_s)
        self.corrections = Corrections(store, registry, epochs, self.record_store, mu)
        self.rebuilds = Rebuilds(store, registry, self.record_store, mu)
        # The calls that are one kind's alone, served by its object as they are.
        self.get_raw = self.record_store.get_raw
        self.open_records = self.record_store.open_records
        self.stored = self.record_store.stored
        self.fenced = self.rollbacks.fenced
        self.rollback = self.rollbacks.rollback
        self.begin_corrections = self.corrections.begin
        self.request_rebuild = self.rebuilds.request
        self.pending_rebuild = self.rebuilds.pending
        self.on_job_gone = self.rebuilds.on_job_gone

    # ------------------------------------------------------------------ records

    @staticmethod
    def load(reader: Reader, rid: int) -> RevisionRecord | None:
        return RevisionRecords.load(reader, rid)

    def get(self, rid: int) -> RevisionRecord:
        return self.corrections.settle(self.record_store.get_raw(rid))

    def records(self, table: str = "", limit: int = 0) -> list[RevisionRecord]:
        """Recorded revisions, newest first (of ``table`` only when given); a correction set
        whose writer is gone is settled first (see ``Corrections.settle``)."""
        recs = [x for x in self.stored() if not table or x.table == table]
        return [self.corrections.settle(x) for x in recs[: limit or None]]

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

    def holds(self) -> list[Hold]:
        return revision_holds(self.record_store, self.epochs, self.tso)

    # ------------------------------------------------------------------ hooks

    def on_epoch_commit(self, ctx: WriteContext, rec: EpochRecord) -> None:
        """Inside an epoch's commit (one LMDB transaction with it): a correction set's epoch
        marks its revision DONE; a view epoch naming a pending rebuild marks that one DONE."""
        if rec.job.startswith(REVISION_JOB_PREFIX):
            self.corrections.on_epoch_commit(ctx, rec)
        else:
            self.rebuilds.on_epoch_commit(ctx, rec)

    def settle_abandoned(self) -> int:
        """Record ABORTED every running correction set whose epoch is no longer open (its
        writer went away and the epoch's hold lapsed: ``EpochManager.settle_lapsed``, called
        by the GC tick just before), and settle every rollback left open that no call runs (a
        committed one's secondaries, one whose call failed before its outcome was known).
        Returns how many. A set still being written, a rollback still running, are left alone."""
        n = 0
        for rec in self.open_records():
            if rec.kind == ROLLBACK:
                n += self.rollbacks.settle_orphan(rec)
            elif rec.kind == CORRECTIONS:
                n += self.corrections.settle_abandoned(rec)
        return n

    # ------------------------------------------------------------------ restart

    def recover(self) -> int:
        """After a restart, every revision not finished (``open_records``): a rollback left
        RUNNING is settled through its primary (committed: DONE; else its locks are rolled back
        and it is ABORTED) and its fence lifted; a DONE rollback's secondaries are resolved (a
        crash may have come between its commit and their resolution); a correction set whose
        epoch never opened is ABORTED. Returns how many rollbacks were left RUNNING."""
        n = 0
        for rec in self.open_records():
            if rec.kind == ROLLBACK:
                n += self.rollbacks.recover(rec)
            elif rec.kind == CORRECTIONS:
                self.corrections.recover(rec)
        return n
