"""Corrections: a correction set of a root table, given rows upserted or given keys deleted.

An epoch transaction of the job ``revision/<id>``, whose rows the client or Spark's executors
prewrite as secondaries; committing the epoch marks the record DONE in the same LMDB transaction
(``on_epoch_commit``). Not fenced: a correction set writes given keys, and a concurrent writer of
the same keys conflicts as in any transaction. One whose epoch was aborted, or whose writer went
away, is recorded ABORTED when next read (``settle``), by the GC tick (``settle_abandoned``) or
at a restart (``recover``).
"""

from __future__ import annotations

import logging
import threading

from coordinator.errors import not_correctable
from coordinator.server.epochs import EpochManager
from coordinator.server.meta import ABORTED as EPOCH_ABORTED
from coordinator.server.meta import COMMITTED, PREWRITE, REVISION_NEXT, EpochRecord
from coordinator.server.registry import Registry
from coordinator.server.revisions.checks import check_who, downstream, root_table
from coordinator.server.revisions.records import (
    ABORTED,
    CORRECTIONS,
    REVISION_JOB_PREFIX,
    RUNNING,
    RevisionRecord,
    RevisionRecords,
    epoch_count,
    epoch_metadata,
    revision_job,
)
from kvstore.errors import FailedPrecondition, InvalidArgument, NotFound, cut
from kvstore.group_commit import WriteContext
from kvstore.results import COMMITTED as TXN_COMMITTED
from kvstore.results import LOCKED
from kvstore.store import LocalStore

log = logging.getLogger("snapview.revisions")

CORRECTION_MODES = ("upsert", "delete")


class Corrections:
    """Begins, settles and completes correction sets (see the module docstring)."""

    def __init__(
        self,
        store: LocalStore,
        registry: Registry,
        epochs: EpochManager,
        records: RevisionRecords,
        mu: threading.Lock,
    ) -> None:
        self.store, self.registry, self.epochs, self.records = store, registry, epochs, records
        self._mu = mu  # one revision starts at a time (its id)

    def begin(
        self, table: str, mode: str, who: str = "", lock_ttl_ms: int = 0
    ) -> tuple[RevisionRecord, EpochRecord]:
        """Record a correction set of ``table`` and open its epoch transaction: the caller
        prewrites the rows as secondaries of the epoch's primary and commits the epoch (job
        ``revision/<id>``, epoch 1) with ``{"rows": n}`` in its metadata."""
        who = check_who(who)
        if mode not in CORRECTION_MODES:
            raise InvalidArgument(
                f"table {table!r}: correction mode {cut(mode)} is not one of {CORRECTION_MODES}"
            )
        root_table(self.store, self.registry, table, "revise")
        if self.store.catalog.get(table).hidden_row_id:
            raise not_correctable(table)
        views = downstream(self.registry, table)

        def act(ctx: WriteContext) -> RevisionRecord:
            rid = int(ctx.reader.get("meta", REVISION_NEXT) or b"1")
            return self.records.new_record(
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
            self._abort(rec, f"{type(e).__name__}: {e}")
            raise
        return rec, epoch

    def settle(self, rec: RevisionRecord) -> RevisionRecord:
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
            return self.records.get_raw(rec.id)
        if ep.state == EPOCH_ABORTED:
            self._abort(rec, "its epoch transaction was aborted")
            return self.records.get_raw(rec.id)
        return rec

    def settle_abandoned(self, rec: RevisionRecord) -> bool:
        """Record correction set ``rec`` ABORTED if it is running and its epoch is no longer
        open (aborted: its writer went away and the epoch's hold lapsed). Whether it did."""
        if rec.state != RUNNING:
            return False
        with self.store.storage.read_txn() as r:
            ep = self.epochs.load_in(r, rec.job, 1)
        if ep is not None and ep.state == EPOCH_ABORTED:
            self.settle(rec)
            return True
        return False

    def _abort(self, rec: RevisionRecord, error: str) -> None:
        """Record ``rec`` ABORTED (if still RUNNING). Best effort: what fails here, ``recover``
        settles at the next start."""
        try:
            self.records.close(rec, None, ABORTED, error)
        except Exception:  # noqa: BLE001 - recover() at the next start settles it
            log.exception("revision %d: could not record its abort", rec.id)

    def on_epoch_commit(self, ctx: WriteContext, rec: EpochRecord) -> None:
        """Inside the commit of epoch ``rec`` of a ``revision/<id>`` job (one LMDB transaction
        with it): a correction set's epoch marks its revision DONE."""
        tail = rec.job[len(REVISION_JOB_PREFIX) :]
        rev = self.records.load(ctx.reader, int(tail)) if tail.isdigit() else None
        # Only the epoch BeginCorrections opened for it (user jobs cannot take the name).
        if rev is None or rev.state != RUNNING or rev.kind != CORRECTIONS or rev.job != rec.job:
            return
        rows = epoch_count(epoch_metadata(rec).get("rows"))
        upsert = rev.mode == "upsert"
        self.records.save_done(
            ctx, rev, rec, restored=rows if upsert else 0, removed=0 if upsert else rows
        )

    def recover(self, rec: RevisionRecord) -> None:
        """After a restart: a correction set left RUNNING whose epoch never opened (a stop
        between the record's write and its epoch's open) is ABORTED."""
        if rec.state != RUNNING:
            return
        with self.store.storage.read_txn() as r:
            opened = self.epochs.load_in(r, rec.job, 1) is not None
        if not opened:
            self.records.close(rec, None, ABORTED, "the server stopped before it began")
