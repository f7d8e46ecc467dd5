"""Incremental vs full-recompute view maintenance, side by side on the same data.

    .venv/bin/python scripts/bench_views.py [--sizes 1000000,10000000] [--barriers 20]
                                            [--fr-barriers 5] [--runs 1] [--views agg,fk,nk]
    .venv/bin/python scripts/bench_views.py --sizes 1000000 --crossover 1000,10000,100000,1000000
    .venv/bin/python scripts/bench_views.py --sizes 300000 --crossover 10000,100000 \
        --crossover-strategies driver,executors,full_recompute,auto
    .venv/bin/python scripts/bench_views.py --sizes 1000000 --fr-barriers 0 --peers duckdb
    .venv/bin/python scripts/bench_views.py --sizes 100000 --fr-barriers 0 --peers duckdb,pathway

Views (--views): ``agg``, ``fk``, ``nk`` below, and ``lj`` (customers LEFT JOIN orders with an
aggregate per customer), ``mm`` (MIN and MAX of amount per group; the workload deletes a group's
current minimum in a tenth of its changes) and ``cd`` (COUNT(DISTINCT customer) per group).
--crossover: see ``crossover``. --peers duckdb: DuckDB (``scripts/peer_duckdb.py``, installed
into this interpreter on demand) holds copies of the sources, takes each barrier's change as the
workload made it and recomputes every view whole; its per-barrier time (apply + recompute) is
printed beside each view's incremental epochs, and its views must equal snapview's at the end of
each run. --peers pathway: Pathway 0.33 (``scripts/peer_pathway.py``, installed on demand into an
environment of its own, as it requires pyarrow<26) maintains every view incrementally, each in a
dataflow (worker process, 2 threads) of its own, from the same change fed as one Pathway commit
per barrier; its per-barrier time (from handing Pathway the change until the view's output for
it is complete) is printed the same way and its views are checked the same way. --peers
duckdb,pathway runs both side by side (one after the other at each barrier).

For each size N in --sizes: ``orders`` (N rows), ``customers`` (100,000 rows, key id) and
``shipments`` (N/2 rows, key id, ``order_id`` not a key) are loaded (timed), and three views are
built twice on them, once ``.strategy("incremental")`` and once ``.strategy("full_recompute")``:

1. ``agg``: ``SELECT grp, COUNT(*), SUM(amount), AVG(amount) FROM orders GROUP BY grp`` (10,000
   groups);
2. ``fk``: orders joined to customers on the customers' key, filtered on a customer column;
3. ``nk``: shipments joined to orders on ``shipments.order_id = orders.id`` (not a key of
   shipments: a change of orders looks shipments up through an index state table).

Each barrier commits one transaction of 1,000 changed orders (400 updates that move rows between
groups and customers, 300 inserts, 300 deletes) and 200 changed shipments (100 ``order_id``
changes, 50 inserts, 50 deletes), then maintains every view through it in this thread
(``maintain_available(until=ts)``, no streaming job) and records that view's epoch: the epoch of
the barrier holding the change (barriers without a change in between are not counted). First
--fr-barriers barriers maintain all six views (the full-recompute figures: each of their epochs
reads the whole source, so they get fewer barriers), then --barriers barriers maintain the three
incremental views alone (the incremental figures and the driver's memory).

Printed per size and view: incremental p50/p99 epoch time and its steps, full recompute p50, the
ratio full/incremental, the incremental p50 at the largest size over the smallest, and the
driver's memory over the incremental epochs: this process's peak RSS (``ru_maxrss``) before and
after them, its anonymous RSS (``RssAnon``, sampled after each epoch) at the first and at its
peak, and the Python heap peak (tracemalloc) over --traced extra incremental barriers (not
timed). ``ru_maxrss`` includes the store's LMDB file, which the driver maps to read and prewrite
directly (the server is on this host): those pages are shared page cache and grow with the pages
touched, so read RssAnon for the driver's own memory. Spark's JVM and Python workers are other processes and are not
counted. Rows are loaded by a separate process, so loading does not count either. With --runs R the
barrier loop is repeated R times on the same data and views, and the figures are medians of the
runs' figures.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import multiprocessing as mp
import os
import random
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import coordinator  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview.local_spark import local_session  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_duckdb import DuckPeer, ensure_duckdb  # noqa: E402
from peer_pathway import PathwayPeer, ensure_pathway  # noqa: E402

CUSTOMERS = 100_000
GROUPS = 10_000
REGIONS = 10
LOAD_TXN_ROWS = 50_000  # rows per load transaction (the client splits the prewrites)
VIEWS = ("agg", "fk", "nk")


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def names(n: int) -> dict[str, str]:
    return {"orders": f"orders_{n}", "customers": f"customers_{n}", "shipments": f"shipments_{n}"}


def order_row(i: int) -> dict:
    return {
        "id": i,
        "grp": (i * 7919) % GROUPS,
        "customer": (i * 104729) % CUSTOMERS,
        "amount": (i * 31) % 10_000,
    }


def shipment_row(i: int, n: int) -> dict:
    return {"id": i, "order_id": (i * 2654435761) % n, "carrier": i % 7}


def _load_range(address: str, table: str, kind: str, lo: int, hi: int, n: int) -> None:
    c = coordinator.connect(address)
    for a in range(lo, hi, LOAD_TXN_ROWS):
        with c.transaction(lock_ttl_ms=120_000) as t:
            for i in range(a, min(hi, a + LOAD_TXN_ROWS)):
                if kind == "orders":
                    t.put(table, order_row(i))
                elif kind == "shipments":
                    t.put(table, shipment_row(i, n))
                else:
                    t.put(table, {"id": i, "region": i % REGIONS, "name": f"customer {i}"})
    c.close()


def load(address: str, n: int, procs: int) -> float:
    """Create and fill the three sources from ``procs`` loader processes; returns seconds."""
    c = coordinator.connect(address)
    t = names(n)
    c.create_table(t["orders"], "id BIGINT, grp INT, customer BIGINT, amount BIGINT", ["id"])
    c.create_table(t["customers"], "id BIGINT, region INT, name STRING", ["id"])
    c.create_table(t["shipments"], "id BIGINT, order_id BIGINT, carrier INT", ["id"])
    c.close()
    jobs = []
    for kind, rows in (("customers", CUSTOMERS), ("orders", n), ("shipments", n // 2)):
        step = -(-rows // procs)
        jobs += [(t[kind], kind, lo, min(rows, lo + step)) for lo in range(0, rows, step)]
    ctx = mp.get_context("spawn")
    t0 = time.perf_counter()
    running: list = []
    for table, kind, lo, hi in jobs:
        while len(running) >= procs:
            running.pop(0).join()
        p = ctx.Process(target=_load_range, args=(address, table, kind, lo, hi, n))
        p.start()
        running.append(p)
    for p in running:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a loader process failed (exit code {p.exitcode})")
    return time.perf_counter() - t0


def queries(n: int) -> dict[str, tuple[str, str]]:
    t = names(n)
    return {
        "agg": (
            f"SELECT grp, COUNT(*) AS n, SUM(amount) AS s, AVG(amount) AS a "
            f"FROM {t['orders']} GROUP BY grp",
            "grp",
        ),
        "fk": (
            f"SELECT o.id, o.amount, o.grp, c.region, c.name FROM {t['orders']} o "
            f"JOIN {t['customers']} c ON o.customer = c.id WHERE c.region < 2",
            "id",
        ),
        "nk": (
            f"SELECT s.id AS sid, s.carrier, o.id AS oid, o.amount, o.grp FROM "
            f"{t['shipments']} s JOIN {t['orders']} o ON s.order_id = o.id",
            "sid",
        ),
        "lj": (
            f"SELECT c.id, c.region, COUNT(o.id) AS n, SUM(o.amount) AS s FROM "
            f"{t['customers']} c LEFT JOIN {t['orders']} o ON o.customer = c.id "
            "GROUP BY c.id, c.region",
            "id",
        ),
        "mm": (
            f"SELECT grp, MIN(amount) AS lo, MAX(amount) AS hi, COUNT(*) AS n "
            f"FROM {t['orders']} GROUP BY grp",
            "grp",
        ),
        "cd": (
            f"SELECT grp, COUNT(DISTINCT customer) AS customers, COUNT(*) AS n "
            f"FROM {t['orders']} GROUP BY grp",
            "grp",
        ),
    }


class Workload:
    """1,000 changed orders and 200 changed shipments per barrier, one transaction. Of the
    orders, 100 are inserted as their group's new minimum (a negative amount) and deleted again
    at the next barrier: from the second barrier on, a tenth of the changes delete a group's
    current extreme (the ``mm`` view must then find the group's next minimum)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        self.rng = random.Random(seed)
        self.t = names(n)
        self.next_order = n
        self.next_ship = n // 2
        self.gone_orders: set[int] = set()
        self.gone_ships: set[int] = set()
        self.extremes: list[int] = []  # orders inserted as their group's minimum last barrier
        self.low = 0
        self.log: list[tuple[str, str, dict]] | None = None  # set: each write is recorded here

    def _pick(self, hi: int, gone: set[int], k: int) -> list[int]:
        out: set[int] = set()
        while len(out) < k:
            i = self.rng.randrange(hi)
            if i not in gone:
                out.add(i)
        return list(out)

    def apply(self, c) -> int:
        rng, t = self.rng, self.t
        ids = self._pick(self.next_order, self.gone_orders, 700)
        sids = self._pick(self.next_ship, self.gone_ships, 150)
        with c.transaction(lock_ttl_ms=60_000) as txn:
            tx = txn if self.log is None else _Logged(txn, self.log)
            for i in ids[:400]:  # updates: a new group, customer and amount
                tx.put(
                    t["orders"],
                    {
                        "id": i,
                        "grp": rng.randrange(GROUPS),
                        "customer": rng.randrange(CUSTOMERS),
                        "amount": rng.randrange(10_000),
                    },
                )
            for i in ids[400 + len(self.extremes) :]:  # deletes
                tx.delete(t["orders"], {"id": i})
                self.gone_orders.add(i)
            for i in self.extremes:  # each its group's current minimum
                tx.delete(t["orders"], {"id": i})
                self.gone_orders.add(i)
            self.extremes = []
            for _ in range(200):  # inserts
                tx.put(t["orders"], order_row(self.next_order))
                self.next_order += 1
            for g in rng.sample(range(GROUPS), 100):  # inserts: new group minimums
                self.low -= 1
                tx.put(
                    t["orders"],
                    {
                        "id": self.next_order,
                        "grp": g,
                        "customer": rng.randrange(CUSTOMERS),
                        "amount": self.low,
                    },
                )
                self.extremes.append(self.next_order)
                self.gone_orders.add(self.next_order)  # never picked for an update or delete
                self.next_order += 1
            for i in sids[:100]:  # order_id changes
                tx.put(
                    t["shipments"],
                    {"id": i, "order_id": rng.randrange(self.next_order), "carrier": i % 7},
                )
            for i in sids[100:]:
                tx.delete(t["shipments"], {"id": i})
                self.gone_ships.add(i)
            for _ in range(50):
                tx.put(
                    t["shipments"],
                    {
                        "id": self.next_ship,
                        "order_id": rng.randrange(self.next_order),
                        "carrier": 1,
                    },
                )
                self.next_ship += 1
        assert txn.commit_ts is not None
        return txn.commit_ts


def replay(
    peers: dict, w: Workload, n: int, timed: dict[str, dict[str, list[float]]] | None = None
) -> None:
    """Each peer, one after the other, takes the barrier's change ``w`` logged: DuckDB applies
    it and recomputes every view whole, Pathway maintains its views from it. With ``timed``
    (peer -> view -> seconds), each view's seconds are appended: DuckDB's apply + recompute,
    Pathway's from handing it the change until the view's output for it was complete."""
    if not peers or w.log is None:
        return
    for peer_name, peer in peers.items():
        if peer_name == "duckdb":
            apply_s = peer.apply(w.log)
            secs = {name: apply_s + peer.recompute(name, queries(n)[name][0]) for name in VIEWS}
        else:
            secs = peer.apply(w.log)
        if timed is not None:
            for name, x in secs.items():
                timed[peer_name][name].append(x)
    w.log.clear()


class _Logged:
    """A transaction that also records its writes (for a peer that replays them)."""

    def __init__(self, tx, log: list[tuple[str, str, dict]]) -> None:
        self.tx, self.log = tx, log

    def put(self, table: str, row: dict) -> None:
        self.log.append(("put", table, row))
        self.tx.put(table, row)

    def delete(self, table: str, key: dict) -> None:
        self.log.append(("delete", table, key))
        self.tx.delete(table, key)


class Recorder:
    """Wraps a view's strategy.maintain: the epochs that did work (an incremental delta that
    read changes, or a full recompute that ran the query), each as a dict."""

    def __init__(self, view) -> None:
        self.view = view
        self.epochs: list[dict] = []
        s = view._strategy
        inner = s.maintain

        def maintain(barrier, reads):
            p = s.progress
            before = len(p.recompute_seconds), p.barriers
            inner(barrier, reads)
            if p.barriers == before[1]:
                return  # skipped (already committed)
            did = (
                (p.last_strategy == "delta" and p.last_changes > 0) or p.last_strategy == "build"
                if s.name == "incremental"
                else len(p.recompute_seconds) > before[0]
            )
            if did:
                self.epochs.append(
                    {
                        "barrier": barrier,
                        "epoch_s": p.last_epoch_s,
                        "steps": dict(p.last_steps),
                        "strategy": p.last_strategy,
                        "changes": p.last_changes,
                        "lookups": p.last_lookups,
                        "mutations": p.last_mutations,
                        "why": p.last_why,
                    }
                )

        s.maintain = maintain

    def take(self) -> list[dict]:
        out, self.epochs = self.epochs, []
        return out


def rss_kb() -> tuple[int, int]:
    """(RssAnon, RssFile) of this process in kB. RssFile is mostly the store's LMDB file, which
    the driver maps to read and prewrite directly on the server's host: shared page cache, not
    the driver's own memory, and it counts in ru_maxrss."""
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:")):
                got[line.split(":")[0]] = int(line.split()[1])
    return got.get("RssAnon", 0), got.get("RssFile", 0)


def define_views(spark, address: str, n: int, full: bool = True) -> dict:
    from spark_sink import MaterializedView

    views = {}
    strategies = [("incremental", "inc")] + ([("full_recompute", "fr")] if full else [])
    for name, (q, key) in queries(n).items():
        if name not in VIEWS:
            continue
        for strat, short in strategies:
            v = (
                MaterializedView.builder(spark)
                .coordinator(address)
                .query(q)
                .target(f"{name}_{short}_{n}")
                .primary_key(key)
                .strategy(strat)
                .build()
            )
            assert f"strategy: {strat}" in v.explain(), v.explain()
            views[(name, short)] = v
    return views


def build_views(c, views: dict) -> tuple[dict, dict]:
    """The first barrier of each view (a build on Spark); then a Recorder on each."""
    build_s = {}
    for (name, short), v in views.items():
        t0 = time.perf_counter()
        v.maintain_available(until=c.tso(), timeout=3600)
        build_s[(name, short)] = time.perf_counter() - t0
        print(f"  built {name}/{short} in {build_s[(name, short)]:.1f}s", flush=True)
    recs = {k: Recorder(v) for k, v in views.items()}  # each installs itself on v._strategy
    return recs, build_s


def main() -> int:
    global VIEWS
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--barriers", type=int, default=20, help="incremental epochs per size")
    ap.add_argument("--fr-barriers", type=int, default=5, help="full-recompute epochs per size")
    ap.add_argument("--traced", type=int, default=2, help="extra barriers under tracemalloc")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--loaders", type=int, default=1, help="loader processes")
    ap.add_argument("--barrier-interval", default="1s")
    ap.add_argument("--views", default="agg,fk,nk", help="a subset of agg,fk,nk,lj,mm,cd")
    ap.add_argument(
        "--peers",
        default="",
        help="duckdb: also keep the sources in DuckDB (installed on demand), apply each "
        "barrier's change there and recompute every view whole, timed beside the incremental "
        "epochs (scripts/peer_duckdb.py); pathway: also maintain every view incrementally in "
        "Pathway 0.33 (installed on demand into its own environment), fed each barrier's change "
        "as one commit (scripts/peer_pathway.py); duckdb,pathway: both",
    )
    ap.add_argument(
        "--crossover",
        default="",
        help="change sizes (e.g. 1000,10000,100000,1000000): instead of the figures above, one "
        "barrier of each size on the first --sizes size, the agg view maintained under "
        "incremental, full_recompute and auto side by side (--runs barriers per size)",
    )
    ap.add_argument(
        "--crossover-view",
        default="agg",
        help="the view of --crossover (one of agg,fk,nk,lj,mm,cd)",
    )
    ap.add_argument(
        "--crossover-strategies",
        default="incremental,full_recompute,auto",
        help="the strategies of --crossover, side by side (incremental alone: the delta's cost "
        "by change size, e.g. with SNAPVIEW_COLUMNAR=off and without for the two paths); "
        "driver and executors: incremental with its deltas forced to that side "
        "(SNAPVIEW_DELTA_ON, set around that view's epochs only)",
    )
    ap.add_argument(
        "--master",
        default="local[2]",
        help="Spark master of --crossover (e.g. local-cluster[2,1,2048]: two executors in "
        "their own JVMs)",
    )
    args = ap.parse_args()
    peer_names = [p for p in args.peers.split(",") if p]
    if set(peer_names) - {"duckdb", "pathway"}:
        ap.error(f"--peers: unknown {sorted(set(peer_names) - {'duckdb', 'pathway'})}")
    VIEWS = tuple(v for v in args.views.split(",") if v)  # --fr-barriers 0: no full recompute
    sizes = [int(s) for s in args.sizes.split(",") if s]

    if args.crossover:
        return crossover(args, sizes[0], [int(x) for x in args.crossover.split(",") if x])
    srv = EmbeddedServer(extra_args=["--barrier-interval", args.barrier_interval]).start()
    spark = local_session()
    import spark_sink

    spark_sink.register(spark)
    results: dict[int, dict] = {}
    open_peers: list = []  # ended in finally (the Pathway peer's worker processes)
    try:
        c = coordinator.connect(srv.address)
        for n in sizes:
            secs = load(srv.address, n, args.loaders)
            rows = n + n // 2 + CUSTOMERS
            print(
                f"size {n:,}: loaded {rows:,} rows (orders {n:,}, shipments {n // 2:,}, "
                f"customers {CUSTOMERS:,}) in {secs:.1f}s ({rows / secs:,.0f} rows/s, "
                f"{args.loaders} loader process(es), {LOAD_TXN_ROWS:,} rows per transaction)",
                flush=True,
            )
        # Every view of every size is defined before any is maintained: defining a view after
        # another view's first maintain_available fails in this engine version
        # (DATA_SOURCE_NOT_FOUND snapview_job_session).
        defined = {n: define_views(spark, srv.address, n, args.fr_barriers > 0) for n in sizes}
        for n in sizes:
            views = defined[n]
            print(f"size {n:,}:", flush=True)
            recs, build_s = build_views(c, views)
            w = Workload(n, seed=n)
            peers: dict = {}
            t, at = names(n), c.tso()  # every peer loads the sources at the same timestamp
            if "duckdb" in peer_names:
                duckdb = ensure_duckdb()
                if duckdb is not None:
                    peers["duckdb"] = DuckPeer(duckdb, c, {t[k]: "id" for k in t}, at=at)
                    print(f"  DuckDB {peers['duckdb'].version} peer loaded", flush=True)
            if "pathway" in peer_names:
                python = ensure_pathway()
                if python is not None:
                    pw_peer = PathwayPeer(python, c, t, at=at, views=VIEWS)
                    open_peers.append(pw_peer)
                    peers["pathway"] = pw_peer
                    print(
                        f"  Pathway {pw_peer.version} peer loaded: {len(pw_peer.workers)} "
                        f"dataflow(s), {pw_peer.rows:,} rows fed, load "
                        + ", ".join(f"{v} {x:.1f}s" for v, x in pw_peer.load_s.items()),
                        flush=True,
                    )
            if peers:
                w.log = []

            runs = []
            for run in range(args.runs):
                inc: dict[str, list[dict]] = {v: [] for v in VIEWS}
                fr: dict[str, list[dict]] = {v: [] for v in VIEWS}
                # Phase 1: every view through --fr-barriers barriers (the full-recompute figures).
                timed = {p: {v: [] for v in VIEWS} for p in ("duckdb", "pathway")}
                for _ in range(args.fr_barriers):
                    ts = w.apply(c)
                    replay(peers, w, n)
                    for name in VIEWS:
                        views[(name, "inc")].maintain_available(until=ts, timeout=600)
                        recs[(name, "inc")].take()
                        views[(name, "fr")].maintain_available(until=ts, timeout=3600)
                        fr[name] += recs[(name, "fr")].take()
                # Phase 2: the incremental views alone through --barriers barriers (their
                # figures, and the driver's memory over them).
                maxrss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                rss = []
                collections = GcCount()  # the driver's full collections over these barriers
                for _ in range(args.barriers):
                    ts = w.apply(c)
                    replay(peers, w, n, timed)
                    for name in VIEWS:
                        views[(name, "inc")].maintain_available(until=ts, timeout=600)
                        inc[name] += recs[(name, "inc")].take()
                        rss.append(rss_kb())
                collections.stop()
                maxrss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                tracemalloc.start()
                for _ in range(args.traced):
                    ts = w.apply(c)
                    replay(peers, w, n)
                    for name in VIEWS:
                        views[(name, "inc")].maintain_available(until=ts, timeout=600)
                        recs[(name, "inc")].take()
                heap_peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                # Each peer's views equal snapview's at the last barrier (else SystemExit).
                for peer_name, peer in peers.items():
                    for name in VIEWS:
                        peer.check(name, c, f"{name}_inc_{n}")
                    print(
                        f"    {peer_name} peer: its views equal snapview's ({', '.join(VIEWS)})",
                        flush=True,
                    )
                runs.append(
                    {
                        "inc": inc,
                        "fr": fr,
                        "maxrss": (maxrss0, maxrss1),
                        "anon": (rss[0][0], max(a for a, _ in rss)),
                        "file": max(f for _, f in rss),
                        "heap_peak": heap_peak,
                        "gc": (collections.full, collections.seconds),
                        "duck": timed["duckdb"],
                        "pathway": timed["pathway"],
                    }
                )
                report_run(n, run, inc, fr, runs[-1])
            results[n] = summarize(runs)
            for peer in peers.values():
                if peer in open_peers:
                    peer.close()
        print_summary(sizes, results, args)
        c.close()
    finally:
        for peer in open_peers:
            peer.close()
        spark.stop()
        srv.stop()
    return 0


def update_orders(c, n: int, k: int, rng: random.Random) -> int:
    """One barrier's change of ``k`` orders of ``orders_n`` (updates: a new group and amount;
    the client splits the prewrites of a large transaction); returns its commit ts."""
    t = names(n)["orders"]
    ids = rng.sample(range(n), k) if k < n else range(n)
    with c.transaction(lock_ttl_ms=600_000) as tx:
        for i in ids:
            tx.put(
                t,
                {
                    "id": i,
                    "grp": rng.randrange(GROUPS),
                    "customer": rng.randrange(CUSTOMERS),
                    "amount": rng.randrange(10_000),
                },
            )
    assert tx.commit_ts is not None
    return tx.commit_ts


_SIDES = ("driver", "executors")  # --crossover-strategies: incremental, deltas forced there


@contextlib.contextmanager
def delta_side(strategy: str) -> Iterator[None]:
    """SNAPVIEW_DELTA_ON set to ``strategy`` while a view of --crossover-strategies driver or
    executors runs its epochs (this script's own process; restored after)."""
    if strategy not in _SIDES:
        yield
        return
    before = os.environ.get("SNAPVIEW_DELTA_ON")
    os.environ["SNAPVIEW_DELTA_ON"] = strategy
    try:
        yield
    finally:
        if before is None:
            del os.environ["SNAPVIEW_DELTA_ON"]
        else:
            os.environ["SNAPVIEW_DELTA_ON"] = before


def crossover(args, n: int, changes: list[int]) -> int:
    """A view (--crossover-view, agg by default) on an ``n``-row source under the strategies
    (--crossover-strategies, the three by default), through barriers whose
    change is each of ``changes`` rows: the epoch time of each (medians of --runs barriers per
    size), and auto's over the faster of the other two. Before the first size, auto measures
    --barriers small deltas (1,000 changes) to learn its delta cost (its build cost it measured
    at its first barrier)."""
    from spark_sink import MaterializedView

    srv = EmbeddedServer(extra_args=["--barrier-interval", args.barrier_interval]).start()
    spark = local_session(master=args.master)
    import spark_sink

    spark_sink.register(spark)
    rng = random.Random(7)
    try:
        c = coordinator.connect(srv.address)
        secs = load(srv.address, n, args.loaders)
        print(f"loaded {n:,} orders (and the other sources) in {secs:.1f}s", flush=True)
        view = args.crossover_view
        q, key = queries(n)[view]
        strategies = tuple(x for x in args.crossover_strategies.split(",") if x)
        views = {
            st: MaterializedView.builder(spark)
            .coordinator(srv.address)
            .query(q)
            .target(f"{view}_{st}_{n}")
            .primary_key(key)
            .strategy("incremental" if st in _SIDES else st)
            .build()
            for st in strategies
        }
        for st, v in views.items():
            t0 = time.perf_counter()
            with delta_side(st):
                v.maintain_available(until=c.tso(), timeout=3600)
            print(f"  built {st} in {time.perf_counter() - t0:.1f}s", flush=True)
        for _ in range(args.barriers):  # auto learns its delta cost
            ts = update_orders(c, n, 1000, rng)
            for st, v in views.items():
                with delta_side(st):
                    v.maintain_available(until=ts, timeout=600)
        # The epoch of the barrier holding each change (maintain_available also runs the empty
        # barriers issued meanwhile; those are not the figure).
        recs = {st: Recorder(v) for st, v in views.items()}
        table: dict[int, dict[str, list[float]]] = {}
        whys: dict[int, list[str]] = {}
        anon: dict[int, int] = {}  # the driver's peak RssAnon (kB) over each size's epochs
        for k in changes:
            table[k] = {st: [] for st in strategies}
            whys[k] = []
            anon[k] = 0
            for _ in range(args.runs):
                ts = update_orders(c, n, k, rng)
                for st, v in views.items():
                    with delta_side(st):
                        v.maintain_available(until=ts, timeout=3600)
                    anon[k] = max(anon[k], rss_kb()[0])
                    got = recs[st].take()
                    assert len(got) == 1, (st, got)
                    table[k][st].append(got[0]["epoch_s"])
                    if st == "auto":
                        whys[k].append(got[0]["why"])
                print(
                    f"  {k:>9,} changes: "
                    + ", ".join(f"{st} {x[-1]:.3f}s" for st, x in table[k].items())
                    + (f"; auto: {whys[k][-1]}" if whys[k] else ""),
                    flush=True,
                )
        print(
            f"crossover on {n:,} orders ({view} view), medians of {args.runs} barrier(s) per size"
            f" (SNAPVIEW_COLUMNAR={os.environ.get('SNAPVIEW_COLUMNAR', 'auto')}):"
        )
        print(
            "  driver RssAnon peak over each size's epochs: "
            + ", ".join(f"{k:,} changes {anon[k] / 1024:.0f} MB" for k in changes)
        )
        if strategies != ("incremental", "full_recompute", "auto"):
            print(f"  {'changes':>9} " + " ".join(f"{st:>14}" for st in strategies))
            for k in changes:
                med = {st: statistics.median(xs) for st, xs in table[k].items()}
                print(f"  {k:>9,} " + " ".join(f"{med[st]:>13.3f}s" for st in strategies))
            return 0
        print(
            f"  {'changes':>9} {'incremental':>12} {'full':>9} {'auto':>9} {'auto/best':>10}  "
            "auto chose"
        )
        for k in changes:
            med = {st: statistics.median(xs) for st, xs in table[k].items()}
            best = min(med["incremental"], med["full_recompute"])
            chose = sorted({w.split(":")[0] for w in whys[k]})
            print(
                f"  {k:>9,} {med['incremental']:>11.2f}s {med['full_recompute']:>8.2f}s "
                f"{med['auto']:>8.2f}s {med['auto'] / best:>9.2f}x  {', '.join(chose)}"
            )
        c.close()
    finally:
        spark.stop()
        srv.stop()
    return 0


class GcCount:
    """The driver's full (generation 2) collections from now to ``stop()``: how many, seconds."""

    def __init__(self) -> None:
        self.full, self.seconds, self._t0 = 0, 0.0, 0.0
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.full += 1
            self.seconds += time.perf_counter() - self._t0

    def stop(self) -> None:
        gc.callbacks.remove(self._seen)


def report_run(n: int, run: int, inc, fr, r) -> None:
    print(f"  run {run + 1}:", flush=True)
    if "gc" in r:
        print(
            f"    driver: {r['gc'][0]} full collections over the incremental barriers, "
            f"{r['gc'][1]:.3f}s",
            flush=True,
        )
    for name in VIEWS:
        e = inc[name]
        if not e:
            print(f"    {name}: no incremental epoch recorded")
            continue
        ts = [x["epoch_s"] for x in e]
        steps = {k: statistics.median(x["steps"].get(k, 0.0) for x in e) for k in e[0]["steps"]}
        f = [x["epoch_s"] for x in fr[name]]
        print(
            f"    {name}: incremental {len(e)} epochs p50 {pct(ts, 50):.3f}s p99 {pct(ts, 99):.3f}s "
            f"(changes {statistics.median(x['changes'] for x in e):.0f}, "
            f"lookups {statistics.median(x['lookups'] for x in e):.0f}, "
            f"mutations {statistics.median(x['mutations'] for x in e):.0f}; median steps "
            + ", ".join(f"{k} {v:.3f}" for k, v in steps.items())
            + f"); full recompute {len(f)} epochs p50 "
            + (f"{statistics.median(f):.3f}s" if f else "-"),
            flush=True,
        )
    for name in VIEWS:
        d = r["duck"].get(name) or []
        if d and inc[name]:
            i50 = pct([x["epoch_s"] for x in inc[name]], 50)
            print(
                f"    {name}: DuckDB apply + recompute whole, {len(d)} barriers p50 "
                f"{pct(d, 50):.3f}s p99 {pct(d, 99):.3f}s; DuckDB / incremental "
                f"{pct(d, 50) / i50:.2f}x",
                flush=True,
            )
    for name in VIEWS:
        p = r["pathway"].get(name) or []
        if p and inc[name]:
            i50 = pct([x["epoch_s"] for x in inc[name]], 50)
            print(
                f"    {name}: Pathway incremental (change fed until output complete), {len(p)} "
                f"barriers p50 {pct(p, 50):.3f}s p99 {pct(p, 99):.3f}s; Pathway / incremental "
                f"{pct(p, 50) / i50:.2f}x",
                flush=True,
            )
    print(
        f"    driver memory over the incremental epochs: ru_maxrss {r['maxrss'][0] / 1024:.0f} MB "
        f"before, {r['maxrss'][1] / 1024:.0f} MB after; RssAnon {r['anon'][0] / 1024:.0f} MB at "
        f"the first epoch, peak {r['anon'][1] / 1024:.0f} MB; RssFile (the mapped LMDB file) "
        f"peak {r['file'] / 1024:.0f} MB; tracemalloc peak {r['heap_peak'] / 2**20:.1f} MB",
        flush=True,
    )


def summarize(runs: list[dict]) -> dict:
    out: dict = {}
    for name in VIEWS:
        i50 = [pct([x["epoch_s"] for x in r["inc"][name]], 50) for r in runs if r["inc"][name]]
        i99 = [pct([x["epoch_s"] for x in r["inc"][name]], 99) for r in runs if r["inc"][name]]
        f50 = [
            statistics.median(x["epoch_s"] for x in r["fr"][name]) for r in runs if r["fr"][name]
        ]
        d50 = [pct(r["duck"][name], 50) for r in runs if r["duck"].get(name)]
        p50 = [pct(r["pathway"][name], 50) for r in runs if r["pathway"].get(name)]
        out[name] = {
            "duck_p50": statistics.median(d50) if d50 else float("nan"),
            "pw_p50": statistics.median(p50) if p50 else float("nan"),
            "inc_p50": statistics.median(i50) if i50 else float("nan"),
            "inc_p99": statistics.median(i99) if i99 else float("nan"),
            "fr_p50": statistics.median(f50) if f50 else float("nan"),
        }
    out["maxrss"] = (
        statistics.median(r["maxrss"][0] for r in runs),
        statistics.median(r["maxrss"][1] for r in runs),
    )
    out["heap_peak"] = statistics.median(r["heap_peak"] for r in runs)
    out["anon"] = (
        statistics.median(r["anon"][0] for r in runs),
        statistics.median(r["anon"][1] for r in runs),
    )
    return out


def print_summary(sizes: list[int], results: dict, args) -> None:
    print(
        f"summary ({args.runs} run(s), medians): 1,000 changed orders + 200 changed shipments per "
        f"barrier; full recompute {args.fr_barriers} barriers, then incremental "
        f"{args.barriers} barriers"
    )
    print(
        f"  {'size':>12} {'view':>4} {'inc p50':>9} {'inc p99':>9} {'full p50':>9} {'full/inc':>9}"
        f" {'duckdb p50':>11} {'duckdb/inc':>11} {'pathway p50':>12} {'pathway/inc':>12}"
    )
    for n in sizes:
        for name in VIEWS:
            r = results[n][name]
            print(
                f"  {n:>12,} {name:>4} {r['inc_p50']:>8.3f}s {r['inc_p99']:>8.3f}s "
                f"{r['fr_p50']:>8.3f}s {r['fr_p50'] / r['inc_p50']:>8.1f}x"
                f" {r['duck_p50']:>10.3f}s {r['duck_p50'] / r['inc_p50']:>10.2f}x"
                f" {r['pw_p50']:>11.3f}s {r['pw_p50'] / r['inc_p50']:>11.2f}x"
            )
    lo, hi = sizes[0], sizes[-1]
    for name in VIEWS:
        print(
            f"  {name}: incremental p50 at {hi:,} / at {lo:,}: "
            f"{results[hi][name]['inc_p50'] / results[lo][name]['inc_p50']:.2f}x; full recompute "
            f"{results[hi][name]['fr_p50'] / results[lo][name]['fr_p50']:.2f}x"
        )
    for n in sizes:
        m0, m1 = results[n]["maxrss"]
        print(
            f"  driver (this process) at {n:,}: ru_maxrss {m0 / 1024:.0f} MB before the "
            f"incremental epochs, {m1 / 1024:.0f} MB after (with the mapped LMDB file); RssAnon "
            f"{results[n]['anon'][0] / 1024:.0f} MB at the first, peak "
            f"{results[n]['anon'][1] / 1024:.0f} MB; tracemalloc peak over "
            f"{args.traced} traced barriers {results[n]['heap_peak'] / 2**20:.1f} MB"
        )


if __name__ == "__main__":
    sys.exit(main())
