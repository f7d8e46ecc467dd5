"""Delay reporting: how far behind each table is, and which job adds the delay (``snapview delay``).

A table's **barrier lag** is how long ago the newest barrier was issued compared with the newest
barrier the table has; its **E2E delay** is the wall time it reached that barrier minus the
barrier's issue time.

**Reached times.** ``issue(T)`` is the wall time barrier T was issued (``barrier/<T>``). A table
S *reached* T at R(S, T):

- a view: the wall time its job committed the epoch for T (``vbar/<S>\\0<T>``'s ``wall_ms``). A
  view job commits an epoch at every barrier it takes, so the record exists for every barrier the
  job committed; when it is missing (pruned, or the job started after T) the view's nearest
  recorded version *after* T is used instead, and its entry names that barrier;
- a root table: when its resolved ts passed T, as the barrier thread saw it (to within one poll,
  50 ms; ``Barriers.root_reached_at``). The thread remembers the last ``ROOT_HISTORY`` reaches
  per root and only since the server started; past that it is not known, and ``issue(T)`` is
  used (the entry is marked ``estimated``): the root is then taken as having added nothing.

**Own time and wait.** For a view V at its newest barrier T, its inputs arrived at
``in(V) = max over its sources S of R(S, T)``; V's **wait for inputs** is ``in(V) - issue(T)``
and its **own time** (its job's epoch) is ``R(V, T) - in(V)``. So own + wait = E2E.

**Critical path.** From V, follow the source that reached T last (its in(V)), recursively, to a
root table (or a view whose sources are not known); each table on the path gets an entry: its
writer job, own time and wait, all measured from ``issue(T)`` of the table whose row this is.
Along the path, a view's R is capped at its downstream's ``in`` and ``in`` is kept within
[issue(T), R] (they only differ from the records with a fallback version or a clock step), so
own and wait are never negative, each entry's wait is the sum of the own times above it on the
path, and the path's own times add up to V's E2E delay exactly. A root entry's own time is
R(root, T) - issue(T) and its wait 0. The entry with the largest own time is the **bottleneck**
(the first, downstream-most, among equals). A job off the path added nothing to V's E2E delay: its
output arrived before the last input did.

A root table's own row has a one-entry path: itself, own time = its E2E delay.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from coordinator.server.barriers import Barriers
from coordinator.server.epochs import EpochManager
from coordinator.server.meta import (
    ViewVersion,
    barrier_of_key,
    view_version_key,
    view_version_prefix,
)
from coordinator.server.registry import Registry, Topology
from kvstore.mvcc.timestamp import compose
from kvstore.storage import Reader
from kvstore.store import LocalStore
from kvstore.table_info import STATE


@dataclass(frozen=True)
class Contribution:
    """One table on a critical path and what its job adds (see the module docstring)."""

    table: str
    job: str
    barrier: int  # the barrier of the version used (later than asked: a fallback)
    own_ms: int
    wait_ms: int
    bottleneck: bool = False
    estimated: bool = False  # a root whose reached time is not known: taken at the issue


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
    path: tuple[Contribution, ...] = ()  # the critical path, this table first


def _version_at_or_after(reader: Reader, table: str, barrier: int) -> ViewVersion | None:
    """View ``table``'s version at ``barrier``, or else its nearest recorded one after it."""
    v = Barriers.view_version(reader, table, barrier)
    if v is not None:
        return v
    end = view_version_prefix(table)[:-1] + b"\x01"
    got = reader.items_between("meta", view_version_key(table, barrier), end, limit=1)
    if not got:
        return None
    key, raw = got[0]
    return ViewVersion.from_json(barrier_of_key(key), raw)


class _Paths:
    """Critical paths over one read transaction and one topology picture."""

    def __init__(
        self, reader: Reader, barriers: Barriers, topo: Topology, views: set[str], tables: set[str]
    ) -> None:
        self.r, self.barriers, self.topo, self.views, self.tables = (
            reader,
            barriers,
            topo,
            views,
            tables,
        )

    def reached(self, table: str, barrier: int, issue: int) -> tuple[int, int, bool] | None:
        """(R(table, barrier), the barrier of the version used, estimated), or None when the
        table is gone or has no version at or after ``barrier``."""
        if table not in self.tables:
            return None
        if table in self.views:
            v = _version_at_or_after(self.r, table, barrier)
            return None if v is None else (v.wall_ms, v.barrier, False)
        at = self.barriers.root_reached_at(table, barrier)
        return (at, barrier, False) if at else (issue, barrier, True)

    def path(self, table: str, barrier: int, reached: int, issue: int) -> tuple[Contribution, ...]:
        out: list[Contribution] = []
        cur, cur_barrier, cur_r, estimated = table, barrier, reached, False
        seen: set[str] = set()
        while True:
            seen.add(cur)
            w = self.topo.writer_of(cur)
            job = w.job if w else ""
            best: tuple[str, tuple[int, int, bool]] | None = None
            if cur in self.views and w is not None:
                for s in w.sources:
                    got = self.reached(s, cur_barrier, issue)
                    if got is not None and s not in seen and (best is None or got[0] > best[1][0]):
                        best = (s, got)
            if best is None:  # a root (or a view whose sources are gone): the path ends here
                own = max(0, cur_r - issue)
                out.append(Contribution(cur, job, cur_barrier, own, 0, estimated=estimated))
                break
            arrived = min(max(best[1][0], issue), cur_r)
            out.append(
                Contribution(
                    cur, job, cur_barrier, cur_r - arrived, arrived - issue, False, estimated
                )
            )
            cur, (_, cur_barrier, estimated), cur_r = best[0], best[1], arrived
        top = max(range(len(out)), key=lambda i: (out[i].own_ms, -i))
        out[top] = replace(out[top], bottleneck=True)
        return tuple(out)


def delay_report(
    store: LocalStore, barriers: Barriers, registry: Registry
) -> tuple[int, list[TableDelay]]:
    """For every table: the newest barrier it has, how far behind the newest issued barrier
    it is, its E2E delay (wall time it reached that barrier minus the barrier's issue time) and
    the critical path that delay comes from (see the module docstring)."""
    newest = barriers.newest()
    newest_wall = barriers.wall_ms(newest)
    now_ms = int(time.time() * 1000)
    topo = registry.topology()
    infos = store.list_tables()
    views = {i.name for i in infos if Barriers.is_view_table(i.name, i.kind, topo)}
    out = []
    # Before the read transaction: a root's newest barrier comes from its resolved ts, which
    # must not be taken inside one (LocalStore.resolved_ts).
    root_newest = {i.name: barriers.root_newest(i.name) for i in infos if i.name not in views}
    with store.storage.read_txn() as r:
        paths = _Paths(r, barriers, topo, views, {i.name for i in infos})
        for info in infos:
            name = info.name
            w = topo.writer_of(name)
            is_view = name in views
            if is_view:
                b = Barriers.view_newest(r, name)
                v = Barriers.view_version(r, name, b) if b else None
                reached = v.wall_ms if v else 0
            else:
                b = root_newest[name]
                seen, wall = barriers.root_reached(name)
                reached = wall if seen == b else 0
            issued = barriers.wall_ms(b) if b else 0
            behind = barriers.count_after(b) if b else 0
            lag_ms = max(0, newest_wall - issued) if b and issued else 0
            if not b and is_view and w is not None:
                # A view with no version yet is behind every barrier since it was registered,
                # and as late as the time since then (issue 24, item 13: not 0).
                behind = barriers.count_after(compose(w.registered_wall_ms, 0))
                lag_ms = max(0, newest_wall - w.registered_wall_ms) if behind else 0
            state = ""
            if w is not None:
                last = EpochManager.last_committed_in(r, w.job)
                state = str(Registry.state_of(Registry.run_in(r, w.job), last, now_ms))
            e2e = (reached - issued) if (reached and issued) else 0
            path: tuple[Contribution, ...] = ()
            if is_view and reached and issued:
                path = paths.path(name, b, reached, issued)
            elif b and issued:
                path = (Contribution(name, w.job if w else "", b, e2e, 0, True, not reached),)
            out.append(
                TableDelay(
                    table=name,
                    # as `snapview tables` names it: root, view or state
                    kind="view" if is_view else (STATE if info.kind == STATE else "root"),
                    job=w.job if w else "",
                    barrier=b,
                    barriers_behind=behind,
                    barrier_lag_ms=lag_ms,
                    e2e_delay_ms=e2e,
                    job_state=state,
                    path=path,
                )
            )
    return newest, out
