"""The revisions' GC holds (kind ``revision``): while a rollback runs, its target holds the GC
safepoint; while a correction set is being written, its epoch's start_ts - 1 does."""

from __future__ import annotations

from coordinator.server.epochs import EpochManager
from coordinator.server.gc import Hold
from coordinator.server.meta import PREWRITE
from coordinator.server.revisions.records import CORRECTIONS, ROLLBACK, RUNNING, RevisionRecords
from coordinator.server.tso import TimestampOracle

HOLD_KIND = "revision"  # the GC hold's kind (snapview leases, snapview_gc_hold_age_seconds)


def revision_holds(
    records: RevisionRecords, epochs: EpochManager, tso: TimestampOracle
) -> list[Hold]:
    """GC holds: the target of every rollback in progress, and the start of every correction
    set still being written (its prewrites are refused once the safepoint passes it)."""
    out = []
    for x in records.open_records():
        if x.state != RUNNING:
            continue
        if x.kind == ROLLBACK and x.target_ts:
            out.append(Hold(HOLD_KIND, f"revision {x.id} of {x.table}", x.target_ts))
        elif x.kind == CORRECTIONS:
            with records.store.storage.read_txn() as r:
                ep = epochs.load_in(r, x.job, 1)
            # Its epoch is a hold with an owner: lapsed, it holds nothing (the GC tick
            # settles it, then settle_abandoned records the set ABORTED).
            if (
                ep is not None
                and ep.state == PREWRITE
                and not epochs.open_hold(ep).lapsed(tso.physical_ms())
            ):
                name = f"revision {x.id} of {x.table} (corrections)"
                out.append(Hold(HOLD_KIND, name, ep.start_ts - 1))
    return out
