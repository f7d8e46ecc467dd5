"""The operations a user performs, as data (``Op``), how the walk picks the next one from the
model (``generate``), and how each one runs against the world and updates the model (``run``).

An op's parameters are fixed when it is generated, and its expected outcome is decided against
the model when it runs, so any subsequence of a recorded walk replays: an op whose subject is
gone (a view step after its view was dropped) is skipped, one the user would get an error for
(a drop of a missing table) must get exactly that error.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import coordinator
from kvstore.errors import (
    AlreadyExists,
    FailedPrecondition,
    NotFound,
    SnapshotTooOld,
    TableNotFound,
)
from tests.lifecycle.model import (
    ROOTS,
    SCHEMA,
    STREAM_TABLE,
    VIEWS,
    Model,
    Rows,
    TableModel,
    ViewModel,
)
from tests.lifecycle.world import Violation, World

AMOUNTS = ("0.00", "9.99", "10.00", "12.50", "100.25")
SPARK_OPS = frozenset(
    {
        "load",
        "batch_write",
        "stream_start",
        "stream_feed",
        "stream_stop",
        "view_build",
        "view_step",
        "view_start",
        "view_stop",
        "view_kill",
        "view_wait",
    }
)
# Ops that change what `snapview check` sees on disk: the walk runs check right after them.
CHECK_AFTER = frozenset({"drop", "restart", "churn", "revise", "view_kill"})


@dataclass(frozen=True)
class Op:
    """One user action: ``kind`` and JSON-able ``args``."""

    kind: str
    args: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"kind": self.kind, "args": self.args}

    @staticmethod
    def from_json(d: dict) -> Op:
        return Op(d["kind"], d.get("args", {}))

    def __str__(self) -> str:
        a = ", ".join(f"{k}={json.dumps(v)}" for k, v in self.args.items())
        return f"{self.kind}({a})"


# ---------------------------------------------------------------------------------- generation


def _rows(rng: random.Random, ids: range, n: int) -> list[list]:
    return [
        [rng.choice(ids), rng.randrange(4), rng.randrange(-5, 21), rng.choice(AMOUNTS)]
        for _ in range(n)
    ]


@dataclass
class Gen:
    """Chooses ops by weight among those that make sense in the model. ``skip`` names op kinds
    and situations (tags, see ``tags``) never to generate."""

    rng: random.Random
    spark: bool
    skip: frozenset[str]
    counter: int = 0

    def next(self, m: Model, w: World | None = None) -> Op:
        for _ in range(100):
            op = self._pick(m)
            if op is not None and not (tags(op, m) & self.skip):
                return op
        return Op("check")

    def _pick(self, m: Model) -> Op | None:
        r = self.rng
        self.counter += 1
        roots = [t for t in ROOTS if t in m.tables]
        kinds: list[tuple[str, float]] = [
            ("create", 3 if len(roots) < len(ROOTS) else 0.3),
            ("drop", 1.2),
            ("txn", 10 if roots else 0),
            ("churn", 0.6 if roots else 0),
            ("restart", 0.8),
            ("fork", 0.6 if roots else 0),
            ("note_barrier", 1.5 if roots else 0),
            ("revise", 1.0 if m.barriers else 0),
            ("lease_take", 0.8 if len(m.leases) < 3 else 0),
            ("lease_release", 1.0 if m.leases else 0),
            ("gc_wait", 0.5),
            ("cli_pipe", 0.2),
        ]
        if self.spark:
            views = list(m.views)
            running = [v for v in views if m.views[v].job is not None]
            kinds += [
                ("load", 0.5 if roots else 0),
                ("batch_write", 0.3 if roots else 0),
                ("stream_start", 0.4 if m.stream.query is None else 0),
                ("stream_feed", 0.8),
                ("stream_stop", 0.4 if m.stream.query is not None else 0),
                ("view_build", 1.0),
                ("view_step", 2.0 if views else 0),
                ("view_start", 0.4 if len(views) > len(running) else 0),
                ("view_stop", 0.5 if running else 0),
                ("view_kill", 0.3 if running else 0),
                ("view_wait", 0.8 if running else 0),
            ]
        kinds = [(k, wt) for k, wt in kinds if wt > 0 and k not in self.skip]
        kind = r.choices([k for k, _ in kinds], [wt for _, wt in kinds])[0]
        c = r.randrange(3)
        if kind == "create":
            return Op(kind, {"table": r.choice([*ROOTS, STREAM_TABLE])})
        if kind == "drop":
            names = [*m.tables, *m.views] or list(ROOTS)
            return Op(kind, {"table": r.choice(names), "cascade": r.random() < 0.6, "client": c})
        if kind == "txn":
            t = r.choice(roots)
            dels = sorted({r.randrange(20) for _ in range(r.randrange(3))})
            put = _rows(r, range(20), 1 + r.randrange(4))
            return Op(kind, {"table": t, "client": c, "put": put, "delete": dels})
        if kind == "churn":
            return Op(kind, {"table": r.choice(roots), "client": c, "n": r.choice((500, 3000))})
        if kind == "restart":
            return Op(kind, {"how": r.choice(("term", "kill"))})
        if kind == "fork":
            return Op(kind, {"table": r.choice(roots), "children": 2})
        if kind == "note_barrier":
            return Op(kind, {"table": r.choice(roots)})
        if kind == "revise":
            return Op(kind, {"table": r.choice(list(m.barriers)), "back": r.randrange(3)})
        if kind == "lease_take":
            return Op(kind, {"client": c, "holder": f"lifecycle-{self.counter}"})
        if kind == "lease_release":
            return Op(kind, {"holder": r.choice(sorted(m.leases))})
        if kind in ("load", "batch_write"):
            base = 200 + (self.counter % 50) * 4 if kind == "batch_write" else 0
            ids = range(base, base + 4) if kind == "batch_write" else range(20)
            rows = _rows(r, ids, 3)
            if kind == "batch_write":  # fresh keys: append and upsert agree
                rows = [[base + i, *row[1:]] for i, row in enumerate(rows)]
            # One row per key: a write of two rows for one key is refused (KeyPrewrittenTwice).
            rows = list({row[0]: row for row in rows}.values())
            return Op(kind, {"table": r.choice(roots), "rows": rows})
        if kind == "stream_start":
            return Op(kind, {"fresh_checkpoint": r.random() < 0.4})
        if kind == "stream_feed":
            return Op(kind, {"rows": [[0, *row[1:]] for row in _rows(r, range(1), 3)]})
        if kind.startswith("view_"):
            names = list(m.views) if kind != "view_build" else list(VIEWS)
            if kind in ("view_stop", "view_kill", "view_wait"):
                names = [v for v in m.views if m.views[v].job is not None]
            if kind in ("view_start", "view_step"):
                names = [v for v in m.views if m.views[v].job is None]
            return Op(kind, {"view": r.choice(names)}) if names else None
        return Op(kind)  # gc_wait, cli_pipe, stream_stop


def tags(op: Op, m: Model) -> set[str]:
    """The op's kind plus the situations it would exercise (for ``KNOWN_OPEN`` and
    ``LIFECYCLE_SKIP``): ``recreate_view`` (building a view under a name dropped before),
    ``stale_client`` (a long-lived client using a table recreated since it last used it),
    ``drop_running_view`` (a drop that takes a running view job with it), ``repeat_load`` (a
    one-off load into a table loaded before, under any incarnation), ``view:NAME``."""
    out = {op.kind}
    a = op.args
    if op.kind == "view_build" and a["view"] in m.dropped_views and a["view"] not in m.views:
        out.add("recreate_view")
    if op.kind.startswith("view_"):
        out.add(f"view:{a['view']}")
    if op.kind == "load" and a["table"] in m.loaded:
        out.add("repeat_load")
    if "client" in a and "table" in a and m.stale(a["client"], a["table"]):
        out.add("stale_client")
    if op.kind == "drop":
        gone = [a["table"], *(m.downstream(a["table"]) if a["cascade"] else [])]
        if any(v in m.views and m.views[v].job is not None for v in gone):
            out.add("drop_running_view")
    return out


# ---------------------------------------------------------------------------------- execution


def _expect(err: type[BaseException], fn: Callable[[], object], what: str) -> None:
    try:
        fn()
    except err:
        return
    raise Violation("wrong_outcome", f"{what}: expected {err.__name__}, the call succeeded")


def _as_rows(rows: list[list]) -> Rows:
    return {int(i): (int(g), int(v), Decimal(a)) for i, g, v, a in rows}


def _pydicts(rows: list[list]) -> list[dict]:
    return [{"id": i, "g": g, "v": v, "amt": Decimal(a)} for i, g, v, a in rows]


def run(op: Op, w: World, m: Model) -> str:
    """Run ``op``; update the model with what must now be true. Returns "skipped" when the op
    has no subject in this state, else "ok"; raises Violation when the system disagrees."""
    fn = RUNNERS[op.kind]
    return fn(w, m, **op.args) or "ok"


def _tso(w: World) -> int:
    return w.client(0).tso()


def op_create(w: World, m: Model, table: str) -> str | None:
    c = w.client(0)
    if table in m.tables or table in m.views:
        _expect(AlreadyExists, lambda: c.create_table(table, SCHEMA, ["id"]), f"create {table}")
        return None
    c.create_table(table, SCHEMA, primary_key=["id"])
    m.add_table(TableModel(table, _tso(w)), by_client=0)
    return None


def op_drop(w: World, m: Model, table: str, cascade: bool, client: int = 0) -> str | None:
    c = w.client(client)
    if table not in m.tables and table not in m.views:
        _expect(TableNotFound, lambda: c.drop_table(table), f"drop missing {table}")
        return None
    if table == STREAM_TABLE and m.stream.query is not None:
        op_stream_stop(w, m)  # a user stops the stream before dropping its table
    if m.downstream(table) and not cascade:
        _expect(FailedPrecondition, lambda: c.drop_table(table), f"drop {table} under views")
        return None
    res = c.drop_table(table, cascade=cascade)
    if not res:
        raise Violation("wrong_outcome", f"drop {table}: the server says it did not exist")
    gone = [table, *m.downstream(table)]
    running = [m.views[v] for v in gone if v in m.views and m.views[v].job is not None]
    for v in gone:  # item 4: a dropped view's job and its epochs go with it
        mv = m.views[v].mv if v in m.views else None
        job = getattr(mv, "job", None)
        if job is None:
            continue
        try:
            e = c.jobs.get_epoch(job, 0)
        except NotFound:
            continue
        raise Violation(
            "drop_leaves_records",
            f"drop {table}: job {job!r} of dropped view {v} still answers with epoch {e.epoch} "
            f"({e.state.name})",
        )
    m.drop(table, by_client=client)
    for v in running:  # their jobs learn of the drop by themselves; make sure they are gone
        _stop_view_job(v, hard=False)
    return None


def _commit_txn(c, table: str, put: list[list], delete: list[int]) -> int | None:
    with c.transaction() as t:
        for d in delete:
            t.delete(table, {"id": d})
        for row in _pydicts(put):
            t.put(table, row)
    return t.commit_ts


def op_txn(w: World, m: Model, table: str, client: int, put: list, delete: list) -> str | None:
    c = w.client(client)
    if table not in m.tables:
        _expect(TableNotFound, lambda: _commit_txn(c, table, put, delete), f"txn on {table}")
        return None
    ts = _commit_txn(c, table, put, delete)
    m.seen(client, table)
    rows = dict(m.tables[table].rows)
    for d in delete:
        rows.pop(d, None)
    rows.update(_as_rows(put))
    if ts is not None:
        m.tables[table].commit(ts, ts, rows)
    return None


def op_churn(w: World, m: Model, table: str, client: int, n: int) -> str | None:
    """Many puts, then the same rows deleted: the LMDB file grows and frees pages (item 2),
    and a 1 MiB map grows under it (item 3)."""
    if table not in m.tables:
        return "skipped"
    c = w.client(client)
    big = [[1_000_000 + i, i % 4, i, "1.00"] for i in range(n)]
    before = dict(m.tables[table].rows)
    put_ts = _commit_txn(c, table, big, [])
    # Two transactions: a barrier between them sees the rows, so the model has both states.
    if put_ts is not None:
        m.tables[table].commit(put_ts, put_ts, {**before, **_as_rows(big)})
    del_ts = _commit_txn(c, table, [], [r[0] for r in big])
    if del_ts is not None:
        m.tables[table].commit(del_ts, del_ts, before)
    m.seen(client, table)
    return None


def op_restart(w: World, m: Model, how: str) -> str | None:
    """SIGTERM or kill -9, then a restart on the same data dir and port."""
    assert w.server is not None
    if how == "kill":
        w.server.kill()
    else:
        w.server.stop()
    try:
        w.server.start(timeout=60)
    except RuntimeError as e:
        raise Violation("server_restart", str(e)) from None
    return None


def _fork_child(address: str, table: str, rows: list[list], conn) -> None:
    try:
        with coordinator.connect(address) as c:
            conn.send(("ok", _commit_txn(c, table, rows, [])))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


FORK_DEADLINE_S = 30.0  # the issue asks 10 s; the slack is for a loaded 2-core box


def op_fork(w: World, m: Model, table: str, children: int) -> str | None:
    """The parent holds connected clients; forked children connect and commit (item 1)."""
    if table not in m.tables:
        return "skipped"
    w.client(0).tso()  # the parent's channel is in use when it forks
    ctx = multiprocessing.get_context("fork")
    procs = []
    for k in range(children):
        rows = [[100 + 10 * k + j, k, j, "10.00"] for j in range(3)]
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_fork_child, args=(w.address, table, rows, child), daemon=True)
        p.start()
        child.close()
        procs.append((p, parent, rows))
    deadline = time.monotonic() + FORK_DEADLINE_S
    results = []
    for p, conn, rows in procs:
        left = max(0.1, deadline - time.monotonic())
        if not conn.poll(left):
            for q, _, _ in procs:
                q.kill()
            raise Violation("hang", f"a forked child did not commit within {FORK_DEADLINE_S}s")
        status, val = conn.recv()
        p.join(5)
        if status != "ok":
            raise Violation("fork_child", f"a forked child failed: {val}")
        results.append((val, rows))
    tm = m.tables[table]
    for ts, rows in sorted(results, key=lambda x: x[0]):
        tm.commit(ts, ts, {**tm.rows, **_as_rows(rows)})
    return None


def op_note_barrier(w: World, m: Model, table: str) -> str | None:
    if table not in m.tables:
        return "skipped"
    snap = w.client(0).snapshot([table], wait_s=10)
    m.barriers.setdefault(table, []).append((snap.barrier, snap.read_ts(table)))
    return None


def op_revise(w: World, m: Model, table: str, back: int) -> str | None:
    """Roll ``table`` back to a barrier noted in its current incarnation."""
    t = m.tables.get(table)
    notes = [n for n in m.barriers.get(table, []) if t is not None and n[1] > t.created_ts]
    if t is None or not notes:
        return "skipped"
    barrier, ts = notes[-1 - back % len(notes)]
    states = t.states_at(ts)
    if len(states) != 1:
        return "skipped"
    pinned = any(lts <= ts for lts, _ in m.leases.values())
    try:
        rev = w.client(0).revise(table, to_barrier=barrier, who="lifecycle")
    except SnapshotTooOld:
        if pinned:
            raise Violation(
                "lease_ignored",
                f"revise {table} to barrier {barrier}: SnapshotTooOld under a lease",
            ) from None
        return None
    t.commit(rev.commit_ts, rev.commit_ts, states[0])
    return None


def op_lease_take(w: World, m: Model, client: int, holder: str) -> str | None:
    c = w.client(client)
    ts = c.tso()
    m.leases[holder] = (ts, c.lease(ts, ttl_s=30, holder=holder))
    return None


def op_lease_release(w: World, m: Model, holder: str) -> str | None:
    if holder not in m.leases:
        return "skipped"
    _, lease = m.leases.pop(holder)
    lease.release()  # type: ignore[attr-defined]
    return None


def op_gc_wait(w: World, m: Model) -> str | None:
    """The safepoint reaches now minus the retention, or what the model holds, whichever is
    older, within a few GC intervals (the invariants check that every hold is the user's)."""
    from tests.lifecycle.invariants import wait_safepoint

    wait_safepoint(w, m)
    return None


def op_check(w: World, m: Model) -> str | None:
    from tests.lifecycle.invariants import check_clean

    check_clean(w)
    return None


def op_cli_pipe(w: World, m: Model) -> str | None:
    """``snapview tables | true``: the reader is gone before the first line; no error about the
    pipe (item 13)."""
    cmd = f"{sys.executable} -m snapview.cli tables --address {w.address} | true"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
    if "Broken pipe" in r.stderr or "Traceback" in r.stderr:
        raise Violation("cli_pipe", f"snapview tables | true: {r.stderr.strip()[-300:]}")
    return None


# ---------------------------------------------------------------------------------- spark ops


def _df(w: World, rows: list[list]):
    return w.spark.createDataFrame(_pydicts(rows), schema=SCHEMA)  # type: ignore[attr-defined]


def op_load(w: World, m: Model, table: str, rows: list) -> str | None:
    """A one-off load: ``EpochWriter(addr, table=t)(df, 0)``, as docs/cluster.md shows (item 5)."""
    from spark_sink import EpochWriter

    if table not in m.tables:
        return "skipped"
    lo = _tso(w)
    m.loaded.add(table)
    EpochWriter(w.address, table=table)(_df(w, rows), 0)
    tm = m.tables[table]
    tm.commit(lo, _tso(w), {**tm.rows, **_as_rows(rows)})
    m.sink_jobs.add(table)
    m.sink_stopped[table] = time.monotonic()
    return None


def op_batch_write(w: World, m: Model, table: str, rows: list) -> str | None:
    """``df.write.format("snapview").save()`` (item 10)."""
    if table not in m.tables:
        return "skipped"
    lo = _tso(w)
    (
        _df(w, rows)
        .write.format("snapview")
        .option("coordinator", w.address)
        .option("table", table)
        .mode("append")
        .save()
    )
    tm = m.tables[table]
    tm.commit(lo, _tso(w), {**tm.rows, **_as_rows(rows)})
    m.sink_jobs.add(table)
    m.sink_stopped[table] = time.monotonic()
    return None


def _stream_dir(w: World) -> str:
    d = os.path.join(w.root, "stream-in")
    os.makedirs(d, exist_ok=True)
    return d


def _stream_catch_up(w: World, m: Model) -> None:
    s = m.stream
    lo = _tso(w)
    s.query.processAllAvailable()  # type: ignore[attr-defined]
    tm = m.tables[STREAM_TABLE]
    rows = dict(tm.rows)
    for f in s.files[s.consumed :]:
        rows.update(f)
    s.consumed = len(s.files)
    if rows != tm.rows:
        tm.commit(lo, _tso(w), rows)


def op_stream_start(w: World, m: Model, fresh_checkpoint: bool) -> str | None:
    """``readStream.json(dir) -> writeStream.format("snapview")``, with its old checkpoint or a
    new one (then it reads every file again)."""
    s = m.stream
    if s.query is not None:
        return "skipped"
    if STREAM_TABLE not in m.tables:
        op_create(w, m, STREAM_TABLE)
    if fresh_checkpoint or not s.checkpoint:
        s.checkpoint = os.path.join(w.root, f"stream-cp-{time.monotonic_ns()}")
        s.consumed = 0
    spark = w.spark
    s.query = (
        spark.readStream.schema(SCHEMA)  # type: ignore[attr-defined]
        .json(_stream_dir(w))
        .writeStream.format("snapview")
        .option("coordinator", w.address)
        .option("table", STREAM_TABLE)
        .option("checkpointLocation", s.checkpoint)
        .start()
    )
    m.sink_jobs.add(STREAM_TABLE)
    _stream_catch_up(w, m)
    return None


def op_stream_feed(w: World, m: Model, rows: list) -> str | None:
    """A new input file with fresh keys; a running stream takes it in."""
    s = m.stream
    n = len(s.files)
    rows = [[1000 + 10 * n + j, *row[1:]] for j, row in enumerate(rows)]
    tmp = os.path.join(w.root, f"feed-{n}.json")
    with open(tmp, "w") as f:
        for i, g, v, a in rows:
            f.write(json.dumps({"id": i, "g": g, "v": v, "amt": float(a)}) + "\n")
    os.replace(tmp, os.path.join(_stream_dir(w), f"feed-{n:05d}.json"))
    s.files.append(_as_rows(rows))
    if s.query is not None and STREAM_TABLE in m.tables:
        _stream_catch_up(w, m)
    return None


def op_stream_stop(w: World, m: Model) -> str | None:
    s = m.stream
    if s.query is None:
        return "skipped"
    s.query.stop()  # type: ignore[attr-defined]
    s.query = None
    s.stopped_ts = time.monotonic()
    return None


def op_view_build(w: World, m: Model, view: str) -> str | None:
    """``MaterializedView.builder(...).build()``: a new view, or a restarted script's build of
    one that exists (re-attach, item 12), or a view recreated under a dropped one's name."""
    from spark_sink import MaterializedView

    d = VIEWS[view]
    if any(s not in m.tables for s in d.sources):
        return "skipped"
    old = m.views.get(view)
    if old is not None and old.job is not None:
        _stop_view_job(old, hard=False)  # the script is restarted: its job stopped first
    mv = (
        MaterializedView.builder(w.spark)
        .coordinator(w.address)
        .query(d.sql)
        .target(view)
        .primary_key(d.key)
        .trigger_interval("200 milliseconds")
        .build()
    )
    if old is None:
        m.views[view] = ViewModel(view, _tso(w), mv=mv)
    else:
        old.mv = mv
    return None


def _fresh_barrier(w: World, view: str) -> int:
    return w.client(0).snapshot(list(VIEWS[view].sources), wait_s=10).barrier


def op_view_step(w: World, m: Model, view: str) -> str | None:
    """Maintain the view in this thread up to a barrier issued now (``maintain_available``)."""
    vm = m.views.get(view)
    if vm is None or vm.job is not None:
        return "skipped"
    vm.mv.maintain_available(until=_fresh_barrier(w, view), timeout=120)  # type: ignore[attr-defined]
    vm.maintained = True
    return None


def op_view_start(w: World, m: Model, view: str) -> str | None:
    vm = m.views.get(view)
    if vm is None or vm.job is not None:
        return "skipped"
    vm.job = vm.mv.start()  # type: ignore[attr-defined]
    return None


def op_view_wait(w: World, m: Model, view: str) -> str | None:
    vm = m.views.get(view)
    if vm is None or vm.job is None:
        return "skipped"
    vm.job.await_barrier(_fresh_barrier(w, view), timeout=120)  # type: ignore[attr-defined]
    vm.maintained = True
    return None


def _stop_view_job(vm: ViewModel, hard: bool) -> None:
    job, vm.job = vm.job, None
    if job is None:
        return
    if hard:  # the driver dies: the job stops mid-barrier, no final report
        job._halt()  # type: ignore[attr-defined]
    else:
        job.stop()  # type: ignore[attr-defined]


def op_view_stop(w: World, m: Model, view: str, hard: bool = False) -> str | None:
    """Stop the view's running job (``hard``: kill it, as a dying driver would)."""
    vm = m.views.get(view)
    if vm is None or vm.job is None:
        return "skipped"
    _stop_view_job(vm, hard=hard)
    return None


def op_view_kill(w: World, m: Model, view: str) -> str | None:
    return op_view_stop(w, m, view, hard=True)


RUNNERS: dict[str, Callable[..., str | None]] = {
    name[3:]: fn for name, fn in globals().items() if name.startswith("op_") and callable(fn)
}
