"""Run TPC-H queries as views over the TPC-H tables, through rounds of RF1 and RF2, and compare
every view with Spark's batch result of its query at every barrier.

Each query is a view under strategy ``auto`` (what ``explain()`` reports is recorded: the
strategy, and a fallback's reason). A round is RF1 then RF2 (one transaction each), then every
view maintained up to a barrier above both. With ``full=True`` each round also times Spark
running each query over the sources at the newest barrier, the sources already in memory: the
query part of a full recompute, without its reading of the sources or its writing of the view,
so a lower bound of a ``full_recompute`` epoch on the same change (an earlier version maintained
a full-recompute twin of every view, which doubled the first builds and, with 22 queries,
could not start a round within an hour on two cores). Those results are the check's too.

The check (``check``) reuses the differential test's oracle (``SparkBatch``: the query run by
Spark over the sources as read at a barrier; ``canonical`` and ``close_enough``: the
comparison). It does not call ``check_view`` itself, which runs Spark once per (view,
barrier): a root table's read ts is the barrier itself, so its cache never hits, and a run has
hundreds of barriers at which nothing changed. Here the state of the sources at a barrier is
known independently of the server, from the commit ts of the refreshes (``TpchData.state``):
Spark runs once per query and state, and the view is compared with that result at every
barrier in the state.
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass, field

from spark_sink import MaterializedView
from tests.spark import differential as D
from tests.tpch.data import TpchData
from tests.tpch.queries import TpchQuery

# ---------------------------------------------------------------------- top-n comparison


def _cmp_values(a, b) -> int:
    # Spark's defaults: ASC puts NULL first (DESC last, by the sign flip in _order_cmp).
    if a is None or b is None:
        return (a is not None) - (b is not None)
    return (a > b) - (a < b)


def _order_cmp(order: tuple[tuple[str, bool], ...]):
    def cmp(x: dict, y: dict) -> int:
        for col, desc in order:
            c = _cmp_values(x[col], y[col])
            if c:
                return -c if desc else c
        return 0

    return cmp


def check_top_n(
    got: list[dict], every: list[dict], order: tuple[tuple[str, bool], ...], n: int
) -> None:
    """Pass iff ``got`` is a valid answer to ``ORDER BY order LIMIT n`` over the rows
    ``every`` (the query without its LIMIT): ``min(n, len(every))`` rows; every row of
    ``every`` whose sort key is strictly ahead of the n-th row's present; the rest rows of
    ``every`` carrying exactly the n-th row's sort key (Spark's choice among rows tied at the
    boundary is arbitrary, so any of them may stand there). Raises AssertionError saying
    which condition failed, with the rows."""
    cmp = _order_cmp(order)
    ranked = sorted(every, key=functools.cmp_to_key(cmp))
    if len(ranked) <= n:
        want, have = D.canonical(ranked), D.canonical(got)
        if want != have and not D.close_enough(have, want):
            raise AssertionError(
                f"top {n} of {len(ranked)} rows: missing {list((want - have).elements())[:3]}, "
                f"extra {list((have - want).elements())[:3]}"
            )
        return
    if len(got) != n:
        raise AssertionError(f"top {n}: the view has {len(got)} rows")
    edge = ranked[n - 1]
    ahead = D.canonical([r for r in ranked if cmp(r, edge) < 0])
    tied = D.canonical([r for r in ranked if cmp(r, edge) == 0])
    have = D.canonical(got)
    missing = ahead - have
    if missing:
        raise AssertionError(
            f"top {n}: rows ahead of the boundary missing: {list(missing.elements())[:3]}"
        )
    rest = have - ahead
    stray = rest - tied
    if stray:
        raise AssertionError(
            f"top {n}: rows that are neither ahead of the boundary nor tied with it "
            f"({ {c: edge[c] for c, _ in order} }): {list(stray.elements())[:3]}"
        )


# ---------------------------------------------------------------------- running views


@dataclass
class Epoch:
    """One epoch of a view: its barrier, whether a source changed, its seconds (the strategy's
    own laps: open, delta or query, write, commit) and how it was made."""

    barrier: int
    changed: bool
    seconds: float
    step: str
    why: str


@dataclass
class ViewRun:
    """A view under test and what it did."""

    query: TpchQuery
    target: str
    strategy: str  # asked
    view: MaterializedView
    first_barrier: int = 0
    epochs: list[Epoch] = field(default_factory=list)
    rounds: list[float] = field(default_factory=list)  # per round: seconds of changed epochs
    walls: list[float] = field(default_factory=list)  # per round: maintain_available's wall
    fulls: list[float] = field(default_factory=list)  # per round: Spark's batch query seconds
    checked: int = 0  # barriers compared with Spark

    @property
    def used(self) -> str:
        """explain()'s strategy line: "incremental" or "full_recompute: <why>"."""
        text = self.view.explain()
        line = next(x for x in text.splitlines() if x.strip().startswith("strategy:"))
        used = line.split(":", 1)[1].split("(")[0].strip()
        if used == "incremental":
            return used
        why = next((x for x in text.splitlines() if x.strip().startswith("why:")), "")
        return f"{used}: {why.split(':', 1)[1].strip() if why else '?'}"

    def _install_timer(self) -> None:
        s = self.view._strategy
        inner = s.maintain

        def timed(barrier: int, reads: dict) -> None:
            inner(barrier, reads)
            p = s.progress
            changed = any(c for _, c in reads.values())
            self.epochs.append(Epoch(barrier, changed, p.last_epoch_s, p.last_strategy, p.last_why))

        s.maintain = timed

    def maintain(self, until: int, timeout: float) -> float:
        """Maintain the view up to a barrier >= ``until`` (after its first barrier and
        ``_install_timer``); returns the seconds of its epochs in which a source changed
        (0.0 if none did), also appended to ``rounds``."""
        n = len(self.epochs)
        t0 = time.perf_counter()
        self.view.maintain_available(until=until, timeout=timeout)
        self.walls.append(time.perf_counter() - t0)
        s = sum(e.seconds for e in self.epochs[n:] if e.changed)
        self.rounds.append(s)
        return s


def build(spark, address: str, q: TpchQuery, target: str, strategy: str) -> MaterializedView:
    """``q`` as the view ``target`` under ``strategy``, keyed by ``q.key``."""
    b = (
        MaterializedView.builder(spark)
        .coordinator(address)
        .query(q.sql)
        .target(target)
        .strategy(strategy)
    )
    return (b.primary_key(*q.key) if q.key else b).build()


@dataclass
class SuiteResult:
    runs: dict[str, ViewRun]
    data: TpchData
    seconds: dict[str, float]

    def row(self, q: TpchQuery) -> dict:
        """One query's figures: strategy used, epoch p50 (s), full recompute p50 (s: Spark's
        batch query alone, a lower bound), ratio, barriers checked."""
        auto = self.runs[q.name]
        e = statistics.median(auto.rounds) if auto.rounds else float("nan")
        f = statistics.median(auto.fulls) if auto.fulls else float("nan")
        return {
            "query": q.name,
            "strategy": auto.used,
            "epoch_p50": e,
            "full_p50": f,
            "ratio": (f / e) if e and e == e and f == f else float("nan"),
            "checked": auto.checked,
        }


def run(
    spark,
    client,
    address: str,
    data: TpchData,
    queries: list[TpchQuery],
    rounds: int,
    fraction: float = 0.001,
    full: bool = True,
    timeout: float = 300.0,
    log=print,
    deadline: float | None = None,
    every_barrier: bool = True,
) -> SuiteResult:
    """Build every query as a view over the loaded ``data``, run ``rounds`` rounds of RF1 and
    RF2 (``fraction`` of the orders each), keeping every view maintained after each (and with
    ``full``, timing each query's batch run at the round's newest barrier), then compare every
    view with Spark at every barrier from its first to its last (``check``). Raises
    AssertionError at the first difference. With ``deadline`` (a ``time.monotonic()`` value) no
    round starts after it: fewer rounds run, and ``data.refreshes`` says how many did. With
    ``every_barrier=False`` the check compares only the barriers at the end of a round (the
    states Spark ran already, timing the batch queries): at SF 1 a Spark run per state and
    query, over sources read again from the store at each state, takes hours."""
    t0 = time.perf_counter()
    runs: dict[str, ViewRun] = {}
    for q in queries:
        tb = time.perf_counter()
        v = build(spark, address, q, q.name, "auto")
        runs[q.name] = ViewRun(q, q.name, "auto", v)
        log(f"built {q.name} in {time.perf_counter() - tb:.1f}s: {runs[q.name].used}")
    seconds = {"build": time.perf_counter() - t0}
    batch = D.SparkBatch(spark, broadcast=False)
    want: dict[tuple, list[dict]] = {}  # (query, state of its sources) -> Spark's rows

    def catch_up() -> None:
        ts = client.tso()
        for r in runs.values():
            r.maintain(ts, timeout)

    def time_full() -> None:
        tables = sorted({t for r in runs.values() for t in r.view.shape.sources})
        snap = client.snapshot(tables)
        batch.bind(client, snap, tables)  # reading the sources is not timed
        for r in runs.values():
            sources = list(r.view.shape.sources)
            tq = time.perf_counter()
            rows = batch.result(client, r.query.sql, snap, sources)
            r.fulls.append(time.perf_counter() - tq)
            if r.query.limit:  # the check compares a LIMIT query with its whole order (untimed)
                rows = batch.result(client, r.query.without_limit, snap, sources)
            state = tuple(sorted((t, data.state(snap.read_ts(t))) for t in sources))
            want[(r.query.name, state)] = rows

    t1 = time.perf_counter()
    for r in runs.values():  # the first barrier: each view built on Spark
        r.view.maintain_available(until=client.tso(), timeout=timeout)
        r.first_barrier = client.snapshot([r.target]).barrier
        r._install_timer()
    seconds["first_barrier"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    for i in range(rounds):
        if deadline is not None and time.monotonic() > deadline:
            log(f"time budget spent: stopping after {i} of {rounds} rounds")
            break
        rf1 = data.rf1(client, fraction)
        rf2 = data.rf2(client, fraction)
        tr = time.perf_counter()
        catch_up()
        took = time.perf_counter() - tr
        if full:
            time_full()
        log(
            f"round {i + 1}/{rounds}: RF1 +{rf1.orders} orders/{rf1.lineitems} lineitems, "
            f"RF2 -{rf2.orders}/{rf2.lineitems}; views maintained in {took:.1f}s"
            + (
                f", the queries run whole in {sum(r.fulls[-1] for r in runs.values()):.1f}s"
                if full
                else ""
            )
        )
    seconds["rounds"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    at_round_end = (
        None if every_barrier else (lambda state: all(n and n % 2 == 0 for _, n in state))
    )
    check(spark, client, data, list(runs.values()), batch, want, only=at_round_end)
    seconds["check"] = time.perf_counter() - t3
    return SuiteResult(runs, data, seconds)


def check(
    spark,
    client,
    data: TpchData,
    runs: list[ViewRun],
    batch: D.SparkBatch | None = None,
    want: dict[tuple, list[dict]] | None = None,
    only=None,
) -> None:
    """Compare every view in ``runs`` with Spark's result of its query at every barrier from
    its first to its newest; Spark runs once per query and state of the sources (the number of
    refreshes a barrier sees, by their commit ts), unless ``want`` has its rows already. A query with a LIMIT is compared with the
    query without it by ``check_top_n``. Sets each run's ``checked``; AssertionError naming
    the view and the barrier at the first difference. ``only``, a predicate over a state
    (``((table, refreshes seen), ...)``), limits the check to the barriers whose state it
    accepts."""
    batch = batch or D.SparkBatch(spark, broadcast=False)
    want = {} if want is None else want
    work: list[tuple[int, ViewRun, int, tuple]] = []  # (representative barrier, run, b, state)
    rep: dict[tuple, int] = {}
    for r in runs:
        last = client.snapshot([r.target]).barrier
        plans = client.jobs.plan_barriers(
            r.target, after=r.first_barrier - 1, upto=last, limit=1 << 20
        ).barriers
        for p in plans:
            state = tuple(sorted((x.table, data.state(x.read_ts)) for x in p.reads))
            if only is not None and not only(state):
                continue
            rep.setdefault(state, p.barrier)
            work.append((rep[state], r, p.barrier, state))
    # State by state, so Spark binds each source once per state for every query.
    work.sort(key=lambda w: (w[0], w[1].target, w[2]))
    tables = sorted({t for r in runs for t in r.view.shape.sources})
    snaps: dict[int, object] = {}
    for rb, r, b, state in work:
        q = r.query
        if rb not in snaps:
            snaps.clear()  # only the newest representative's snapshot is needed from now on
            snaps[rb] = client.snapshot(tables, barrier=rb)
        wkey = (q.name, state)
        if wkey not in want:
            sql = q.without_limit if q.limit else q.sql
            sources = list(r.view.shape.sources)
            want[wkey] = batch.result(client, sql, snaps[rb], sources)
        got = client.snapshot([r.target], barrier=b).read(r.target).to_pylist()
        try:
            if q.limit:
                check_top_n(got, want[wkey], q.order, q.limit)
            else:
                w, g = D.canonical(want[wkey]), D.canonical(got)
                if g != w and not D.close_enough(g, w):
                    raise AssertionError(
                        f"missing {list((w - g).elements())[:3]}, "
                        f"extra {list((g - w).elements())[:3]}"
                    )
        except AssertionError as e:
            raise AssertionError(f"view {r.target} at barrier {b} (state {state}): {e}") from None
        r.checked += 1


def markdown(result: SuiteResult, queries: list[TpchQuery]) -> str:
    """The per-query table: query, strategy, epoch p50 (s), full-recompute p50 (s: Spark's
    batch query alone), ratio."""
    lines = [
        "| query | strategy | epoch p50 (s) | batch query p50 (s) | ratio | barriers checked |",
        "|---|---|---|---|---|---|",
    ]
    for q in queries:
        r = result.row(q)
        lines.append(
            f"| {r['query']} | {r['strategy']} | {r['epoch_p50']:.3f} | {r['full_p50']:.3f} "
            f"| {r['ratio']:.1f}x | {r['checked']} |"
        )
    return "\n".join(lines)
