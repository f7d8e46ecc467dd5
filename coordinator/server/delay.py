"""Delay reporting: how far behind each table is (``snapview delay``).

A table's **barrier lag** is how long ago the newest barrier was issued compared with the newest
barrier the table has; its **E2E delay** is the wall time it reached that barrier minus the
barrier's issue time (for a view: the commit of the epoch for it; for a root table: the moment
its resolved ts passed it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from coordinator.server.barriers import Barriers
from coordinator.server.epochs import EpochManager
from coordinator.server.registry import Registry
from kvstore.mvcc.timestamp import compose
from kvstore.store import LocalStore


@dataclass(frozen=True)
class TableDelay:
    table: str
    kind: str
    job: str
    barrier: int
    barriers_behind: int
    barrier_lag_ms: int
    e2e_delay_ms: int
    job_state: str = ""  # the writer job's JobState ("" for a table no job writes)


def delay_report(
    store: LocalStore, barriers: Barriers, registry: Registry
) -> tuple[int, list[TableDelay]]:
    """For every table: the newest barrier it has, how far behind the newest issued barrier
    it is, and its E2E delay (wall time it reached that barrier minus the barrier's issue
    time)."""
    newest = barriers.newest()
    newest_wall = barriers.wall_ms(newest)
    now_ms = int(time.time() * 1000)
    topo = registry.topology()
    out = []
    with store.storage.read_txn() as r:
        for info in store.list_tables():
            name = info.name
            w = topo.writer_of(name)
            is_view = Barriers.is_view_table(name, info.kind, topo)
            if is_view:
                b = Barriers.view_newest(r, name)
                v = Barriers.view_version(r, name, b) if b else None
                reached = v.wall_ms if v else 0
            else:
                b = barriers.root_newest(name)
                seen, wall = barriers.root_reached(name)
                reached = wall if seen == b else 0
            issued = barriers.wall_ms(b) if b else 0
            behind = barriers.count_after(b) if b else 0
            if not b and is_view and w is not None:
                # A view with no version yet is behind every barrier since it was registered.
                behind = barriers.count_after(compose(w.registered_wall_ms, 0))
            state = ""
            if w is not None:
                last = EpochManager.last_committed_in(r, w.job)
                state = str(Registry.state_of(Registry.run_in(r, w.job), last, now_ms))
            out.append(
                TableDelay(
                    table=name,
                    kind="view" if is_view else "root",
                    job=w.job if w else "",
                    barrier=b,
                    barriers_behind=behind,
                    barrier_lag_ms=max(0, newest_wall - issued) if b and issued else 0,
                    e2e_delay_ms=(reached - issued) if (reached and issued) else 0,
                    job_state=state,
                )
            )
    return newest, out
