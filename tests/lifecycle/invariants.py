"""What must hold after every step of the walk, checked against the model.

- ``catalog``: the server's tables are the model's tables and views (state tables aside);
- ``table_equals_model``: every root table reads as the model says, through a long-lived client;
- ``view_equals_query``: every view, at the barrier a consistent snapshot gives, equals its
  query evaluated in Python over the model's sources at the read ts of that barrier; all views
  in one snapshot are checked at one barrier (consistent reads never mix barriers);
- ``gc_hold``: everything holding the GC safepoint is something the user holds (a lease the
  model took, a registered view job, a running stream; a stopped writer's open epoch only for
  one epoch TTL), and ``wait_safepoint`` sees the safepoint advance past the retention;
- ``check``: ``snapview check`` on the data dir (online, read-only) finds no damage.
"""

from __future__ import annotations

import subprocess
import sys
import time

from coordinator.errors import BarrierNotReached
from kvstore.mvcc.timestamp import compose, physical_ms
from tests.lifecycle.model import STREAM_TABLE, VIEWS, Model
from tests.lifecycle.world import RETENTION_S, Violation, World

# A writer that stopped may leave an open epoch; it must stop holding GC once its TTL (the
# sinks' 20 s) is over, like a lock's (item 8).
OPEN_EPOCH_GRACE_S = 40.0


def _rows_by_key(table, key: str) -> dict:
    cols = [c for c in table.column_names if c != key]
    return {r[key]: tuple(r[c] for c in cols) for r in table.to_pylist()}


def _diff(got: dict, want: dict) -> str:
    extra = {k: got[k] for k in got.keys() - want.keys()}
    missing = {k: want[k] for k in want.keys() - got.keys()}
    wrong = {k: (got[k], want[k]) for k in got.keys() & want.keys() if got[k] != want[k]}
    return f"extra {extra}, missing {missing}, differ (got, want) {wrong}"


def check_catalog(w: World, m: Model) -> None:
    have = {t.name for t in w.client(0).tables() if t.kind != "state"}
    want = set(m.tables) | set(m.views)
    if have != want:
        raise Violation(
            "catalog",
            f"server has {sorted(have)}, the model {sorted(want)} "
            f"(extra {sorted(have - want)}, missing {sorted(want - have)})",
        )


def check_tables(w: World, m: Model, step: int, skip: frozenset[str]) -> None:
    for i, (name, t) in enumerate(sorted(m.tables.items())):
        ci = (step + i) % len(w.clients)
        c = w.client(ci)
        if m.stale(ci, name) and "stale_client" in skip:
            c.describe_table(name, refresh=True)
        got = _rows_by_key(c.read(name), "id")
        m.seen(ci, name)
        want = {k: (g, v, a) for k, (g, v, a) in t.rows.items()}
        if got != want:
            raise Violation("table_equals_model", f"table {name} (client {ci}): {_diff(got, want)}")


def _check_view_at(w: World, m: Model, view: str, snap) -> None:
    d = VIEWS[view]
    reads = {s: snap.read_ts(s) for s in d.sources}
    for s, ts in reads.items():
        t = m.tables.get(s)
        if t is not None and ts < t.created_ts:
            raise Violation(
                "view_at_older_incarnation",
                f"view {view} at barrier {snap.barrier} reads {s} at {ts}, before {s} was "
                f"created again (at {t.created_ts})",
            )
    got = _rows_by_key(snap.read(view), d.key)
    wants = [d.evaluate(c) for c in m.sources_at(view, reads)]
    if got not in wants:
        raise Violation(
            "view_equals_query", f"view {view} at barrier {snap.barrier}: {_diff(got, wants[-1])}"
        )


def check_views(w: World, m: Model) -> None:
    c = w.client(0)
    done = []
    for view, vm in sorted(m.views.items()):
        try:
            snap = c.snapshot([view, *VIEWS[view].sources])
        except BarrierNotReached:
            if vm.maintained and vm.job is None:
                raise Violation(
                    "view_barrier", f"view {view} was maintained but has no barrier now"
                ) from None
            continue
        vm.maintained = True
        _check_view_at(w, m, view, snap)
        done.append(view)
    if len(done) > 1:
        tables = sorted({t for v in done for t in (v, *VIEWS[v].sources)})
        try:
            snap = c.snapshot(tables)
        except BarrierNotReached:
            return  # no barrier common to them all (a view started after another stopped)
        for view in done:
            _check_view_at(w, m, view, snap)


def _explained(hold, m: Model) -> bool:
    if hold.kind not in ("lease", "job"):
        return True  # retention, revisions
    name = hold.name
    if hold.kind == "lease":
        return name.split(" (")[0] in m.leases
    job = name.split(" (")[0]
    if job in m.views:
        return True
    if job not in m.sink_jobs or job not in m.tables:
        return False  # a job of a dropped table
    if "open epoch" not in name:
        return True
    s = m.stream
    if job == STREAM_TABLE and s.query is not None:
        return True
    stopped = s.stopped_ts if job == STREAM_TABLE else m.sink_stopped.get(job, 0.0)
    return time.monotonic() - stopped < OPEN_EPOCH_GRACE_S


def check_gc_holds(w: World, m: Model) -> None:
    st = w.client(0).gc_status()
    bad = [f"{h.kind} {h.name}" for h in st.holds if not _explained(h, m)]
    if bad:
        raise Violation("gc_hold", f"the safepoint is held by what the user does not hold: {bad}")


def wait_safepoint(w: World, m: Model, slack_s: float = 10.0) -> None:
    """The safepoint reaches (now - retention), or the oldest hold the user has, in time."""
    c = w.client(0)
    t0 = c.tso()
    target = compose(physical_ms(t0) - int(RETENTION_S * 1000), 0)
    st = c.gc_status()
    held = [h.ts for h in st.holds if h.kind != "retention" and _explained(h, m)]
    target = min([target, *held])
    deadline = time.monotonic() + RETENTION_S + slack_s
    while time.monotonic() < deadline:
        st = c.gc_status()
        if st.safepoint >= target:
            return
        time.sleep(0.1)
    holds = [f"{h.kind} {h.name} @{h.ts}" for h in st.holds]
    raise Violation(
        "safepoint_stuck",
        f"safepoint {st.safepoint} did not reach {target} in {RETENTION_S + slack_s}s; "
        f"holds: {holds}",
    )


def check_clean(w: World) -> None:
    """``snapview check --data-dir`` exits 0 (it reads the store online, read-only)."""
    r = subprocess.run(
        [sys.executable, "-m", "snapview.cli", "check", "--data-dir", w.data_dir],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if r.returncode != 0:
        out = (r.stdout + r.stderr).strip().splitlines()
        raise Violation("check", "snapview check: " + " | ".join(out[-6:]))


def check_all(w: World, m: Model, step: int, skip: frozenset[str]) -> None:
    check_catalog(w, m)
    check_tables(w, m, step, skip)
    check_views(w, m)
    if "gc_hold" not in skip:
        check_gc_holds(w, m)
