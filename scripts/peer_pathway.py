"""Pathway (https://pathway.com, ``pathway==0.33.0``) as a peer of ``scripts/bench_views.py``:
the same sources and the same change stream as snapview and the DuckDB peer, each view
maintained incrementally by Pathway's dataflow engine, timed per barrier, and Pathway's views
compared with snapview's at the end of each run (``check``, via ``peer_duckdb.compare_rows``), so
a peer that skipped work cannot look fast.

Install. Optional, as DuckDB is: Pathway is not a dependency of snapview. ``ensure_pathway``
returns an interpreter in which ``pathway==0.33.0`` imports, installing it on demand. It is not
installed into the running interpreter's environment: ``pathway==0.33.0`` requires
``pyarrow<26`` and snapview ``pyarrow>=26,<27``, so pip would downgrade pyarrow under snapview.
Unless the running interpreter already has Pathway 0.33.0, it goes into a virtual environment
of its own made from this interpreter (``$SNAPVIEW_PATHWAY_VENV``, by default
``~/.cache/snapview/pathway-0.33.0``), and Pathway runs in worker processes on that interpreter
(this file, ``--worker FD``), spoken to over a socket pair (``multiprocessing.connection``).

Processes. One worker process, one Pathway dataflow, per view, fed one after the other at each
barrier: each view's figure is then Pathway's cost of that view alone (its input included), as
the DuckDB peer's is apply + that view's recompute and snapview's is that view's epoch; in one
shared dataflow every view's figure would include the other views' work. Each worker runs
Pathway with ``PATHWAY_THREADS=2`` (two timely workers) pinned to at most two CPUs, as DuckDB
gets 2 threads and Spark local[2] (``$SNAPVIEW_PATHWAY_THREADS=1``: one thread; with changes of
this size, about 1,300 rows a barrier, one thread measured faster on a busy 2-core machine, as
two exchange each batch between them). Only one worker is busy at a time; an idle one uses no
CPU. ``close`` (also run at interpreter exit) tells each worker to stop, which ends its input
and so ``pw.run``, and kills it if it has not ended in a minute; a worker whose socket closes
(the benchmark died) ends the same way.

How the change is fed. One ``pw.io.python.ConnectorSubject`` with an upsert session
(``session_type="upsert"``) and explicit commits only (``autocommit_duration_ms=None``) feeds
the three sources as one input table keyed by (``tag``, ``k``): ``tag`` names the source (0
orders, 1 customers, 2 shipments), ``k`` is its primary key ``id``, and the other columns are
generic (``a``, ``b``, ``c`` integers and ``s`` a string: orders' grp, customer, amount;
customers' region and name; shipments' order_id and carrier); each source is a ``filter`` of it.
One subject, because a Pathway commit is per connector: with one per source, the orders and the
shipments of one barrier would land at different Pathway times. The sources are first read from
the store at one timestamp (``client.read(t, at=at)``, Arrow, handed to the workers as Arrow IPC
files), sent row by row with ``next`` and committed: the initial time, not timed. Then each
barrier's logged change (``w.log``: ("put"|"delete", table, row or key) in order) is reduced in
the benchmark's process to the last write of each key (as the DuckDB peer does), sent to each
worker, and fed there as ``next`` (an upsert: an insert, or the update of an existing key) or
``delete`` per key, then one ``commit``: one Pathway time per barrier.

What the timing covers. Per barrier and view: from the worker handing the first row of the
change to the subject (after the change arrived over the socket and was unpickled: that pipe is
not counted, a Pathway user's connector is fed from wherever its changes come from) until
Pathway closed that commit's time on the view's output: ``pw.io.subscribe``'s ``on_time_end``
for that time, called after ``on_change`` delivered every changed row of the view to Python,
where the worker keeps the view's current rows (the view's materialization, as DuckDB's is a
table and snapview's the target table; also what ``check`` reads). So it includes Python
feeding each changed row to the connector and receiving each changed output row, which any
Pathway user whose changes and views live in Python pays. ``on_time_end`` is only called for
times at which the output changed, so each view's output is concatenated (``concat_reindex``)
with a one-row marker from the same commit whose value is the barrier's number (key column -1:
no real row has a negative key; it is left out of the view's rows): every commit changes every
output, and that time's ``on_time_end`` says the view is complete for it.

Views covered: every view of ``bench_views.queries``, each equivalent to its SQL: ``agg``
(groupby grp: count, sum, avg), ``fk`` (customers filtered on region < 2, inner join on
orders.customer = customers.id), ``nk`` (shipments inner join orders on order_id = orders.id),
``lj`` (orders reduced per customer to count and sum, then customers ``join_left`` that: n is
0 and s NULL for a customer without orders, as COUNT(o.id) and SUM(o.amount) are after the LEFT
JOIN), ``mm`` (min, max, count per grp: Pathway's reduce recomputes a changed group from its
arrangement, so deleting a group's minimum finds the next one) and ``cd``
(``count_distinct(customer)`` and count per grp). Pathway reserves the column name ``id`` (the
row pointer), so ``fk``'s and ``lj``'s ``id`` is ``key`` inside the dataflow, renamed back for
the comparison. A view not in ``COVERED`` would be skipped and said so; none is.

Cost at larger sizes: each worker loads every source row by row through Python (about 10 us a
row) and keeps its own arrangements (0.4 to 0.6 GB a worker at --sizes 100000, growing with
the sources): fine up to a few million rows, too much at 10,000,000.
"""

from __future__ import annotations

import atexit
import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, NoReturn

from peer_duckdb import compare_rows

PATHWAY_VERSION = "0.33.0"
# Timely worker threads per Pathway dataflow: this machine's 2 cores, as DuckDB's threads and
# Spark's local[2]; $SNAPVIEW_PATHWAY_THREADS=1 for one (never more than 2).
THREADS = max(1, min(2, int(os.environ.get("SNAPVIEW_PATHWAY_THREADS") or 2)))

# Each source's tag in the one input table, its integer columns (as a, b, c) and its string
# column (as s).
SOURCES: dict[str, tuple[int, tuple[str, ...], str | None]] = {
    "orders": (0, ("grp", "customer", "amount"), None),
    "customers": (1, ("region",), "name"),
    "shipments": (2, ("order_id", "carrier"), None),
}
MARKER_TAG = 3
# Each view's columns, in the order of its query's SELECT (``bench_views.queries``).
COLUMNS: dict[str, tuple[str, ...]] = {
    "agg": ("grp", "n", "s", "a"),
    "fk": ("id", "amount", "grp", "region", "name"),
    "nk": ("sid", "carrier", "oid", "amount", "grp"),
    "lj": ("id", "region", "n", "s"),
    "mm": ("grp", "lo", "hi", "n"),
    "cd": ("grp", "customers", "n"),
}
COVERED = tuple(COLUMNS)
TIMEOUT_S = 3600.0  # the longest wait for the worker's answer


def _pathway_version(python: str) -> str | None:
    """The version of ``pathway`` installed for interpreter ``python``, or None."""
    if python == sys.executable:  # (a venv's python is a link to its base: compare paths)
        try:
            return importlib.metadata.version("pathway")
        except importlib.metadata.PackageNotFoundError:
            return None
    r = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('pathway'))"],
        capture_output=True,
        text=True,
    )
    return r.stdout.strip() if r.returncode == 0 else None


def ensure_pathway() -> str | None:
    """The interpreter to run the Pathway worker with (one where ``pathway==0.33.0`` imports),
    installed on demand; None, after printing why, if it cannot be.

    This interpreter is used if Pathway 0.33.0 is already installed in it. Otherwise Pathway is
    not installed here: ``pathway==0.33.0`` requires ``pyarrow<26`` and snapview requires
    ``pyarrow>=26,<27``, so installing it into snapview's environment would downgrade pyarrow
    under snapview. It is installed instead into a virtual environment of its own, made from
    this interpreter (``$SNAPVIEW_PATHWAY_VENV``, by default
    ``~/.cache/snapview/pathway-0.33.0``), and the worker runs there."""
    if _pathway_version(sys.executable) == PATHWAY_VERSION:
        return sys.executable
    venv = os.environ.get("SNAPVIEW_PATHWAY_VENV") or os.path.join(
        os.path.expanduser("~"), ".cache", "snapview", f"pathway-{PATHWAY_VERSION}"
    )
    python = os.path.join(venv, "bin", "python")
    if os.path.exists(python) and _pathway_version(python) == PATHWAY_VERSION:
        return python
    print(
        f"  (installing pathway=={PATHWAY_VERSION} for the peer into its own environment "
        f"{venv}: it requires pyarrow<26, snapview pyarrow>=26)",
        flush=True,
    )
    for cmd in (
        [sys.executable, "-m", "venv", venv],
        [python, "-m", "pip", "install", "-q", f"pathway=={PATHWAY_VERSION}"],
    ):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  pathway could not be installed; no Pathway peer: {r.stderr.strip()[-300:]}")
            return None
    if _pathway_version(python) != PATHWAY_VERSION:
        print(f"  pathway=={PATHWAY_VERSION} is not importable from {python}; no Pathway peer")
        return None
    return python


def _encode(source: str, op: str, row: dict) -> tuple:
    """A change of ``source`` as the worker feeds it: (is a put, tag, k, a, b, c, s)."""
    tag, ints, text = SOURCES[source]
    vals = [row.get(c, 0) for c in ints] + [0] * (3 - len(ints))
    return (op == "put", tag, row["id"], *vals, row.get(text, "") if text else "")


class _Worker:
    """One worker process: Pathway maintaining ``views`` from its own input."""

    def __init__(self, python: str, directory: str, files: dict[str, str], views: list[str]):
        from multiprocessing.connection import Connection

        self.views = views
        self.log_path = os.path.join(directory, f"worker-{'-'.join(views)}.log")
        parent, child = socket.socketpair()
        self._log = open(self.log_path, "wb")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env.update(PATHWAY_THREADS=str(THREADS), PATHWAY_PROCESSES="1")
        self.proc: subprocess.Popen | None = subprocess.Popen(
            [python, os.path.abspath(__file__), "--worker", str(child.fileno())],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        child.close()
        self.conn = Connection(parent.detach())
        got = self.call(("load", files, views))
        self.load_s, self.rows = got["seconds"], got["rows"]

    def call(self, msg: tuple) -> Any:
        """Send ``msg`` to the worker and return its answer; SystemExit if it failed."""
        if self.proc is None:
            raise SystemExit("the Pathway peer is closed")
        try:
            self.conn.send(msg)
            deadline = time.monotonic() + TIMEOUT_S
            while not self.conn.poll(1.0):
                if self.proc.poll() is not None:
                    self._fail(f"the worker exited (code {self.proc.returncode})")
                if time.monotonic() > deadline:
                    self._fail(f"no answer to {msg[0]!r} in {TIMEOUT_S:.0f}s")
            kind, payload = self.conn.recv()
        except (EOFError, OSError) as e:
            self._fail(f"the worker's socket failed ({e!r})")
        if kind == "error":
            self._fail(payload)
        return payload

    def _fail(self, why: str) -> NoReturn:
        log = ""
        try:
            self._log.flush()
            with open(self.log_path, errors="replace") as f:
                log = f.read()[-3000:]
        except OSError:
            pass
        self.close()
        raise SystemExit(
            f"the Pathway peer ({', '.join(self.views)}) failed: {why}\n--- its log (tail):\n{log}"
        )

    def close(self) -> None:
        """End the worker (and Pathway in it); idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            self.conn.send(("stop",))
        except OSError:
            pass
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.conn.close()
        self._log.close()


class PathwayPeer:
    """Pathway maintaining the views incrementally, each in a worker process of its own;
    ``apply`` a barrier's change (one Pathway commit in each), ``check`` a view against
    snapview's, ``close`` at the end."""

    def __init__(self, python: str, client, tables: dict[str, str], at: int, views) -> None:
        """``python``: from ``ensure_pathway``; ``tables``: source (orders, customers,
        shipments) -> its table in the store, read at ``at``; ``views``: the views to maintain
        (one not in ``COVERED`` would be skipped, and said so)."""
        import pyarrow as pa
        import pyarrow.ipc  # noqa: F401

        self.version = PATHWAY_VERSION
        self.sources = {t: source for source, t in tables.items()}  # store table -> source
        self.views = [v for v in views if v in COVERED]
        for v in views:
            if v not in COVERED:
                print(f"  the Pathway peer skips view {v}: not expressible exactly", flush=True)
        self.dir = tempfile.mkdtemp(prefix="snapview-pathway-")
        self.workers: dict[str, _Worker] = {}
        atexit.register(self.close)  # no worker outlives the benchmark, however it ends
        try:
            files = {}
            for source, t in tables.items():
                data = client.read(t, at=at)
                files[source] = os.path.join(self.dir, f"{source}.arrow")
                with pa.OSFile(files[source], "wb") as f, pa.ipc.new_file(f, data.schema) as w:
                    w.write_table(data)
            for v in self.views:  # one after another: each loads every source
                self.workers[v] = _Worker(python, self.dir, files, [v])
            for path in files.values():
                os.remove(path)
        except BaseException:
            self.close()
            raise
        self.load_s = {v: w.load_s for v, w in self.workers.items()}
        self.rows = sum(w.rows for w in self.workers.values())

    def apply(self, log: list[tuple[str, str, dict]]) -> dict[str, float]:
        """Feed one barrier's change (("put"|"delete", table, row or key), in order: the last
        write of a key wins) to each view's worker in turn, as one Pathway commit; returns each
        view's seconds from handing Pathway the change until its output for it was complete."""
        last: dict[tuple[str, Any], tuple[str, dict]] = {}
        for op, table, row in log:
            last[(table, row["id"])] = (op, row)
        entries = [_encode(self.sources[t], op, row) for (t, _), (op, row) in last.items()]
        out: dict[str, float] = {}
        for w in self.workers.values():
            out.update(w.call(("change", entries)))
        return out

    def check(self, name: str, client, target: str) -> None:
        """Raise if view ``name`` differs from snapview's ``target`` (``compare_rows``)."""
        if name not in self.workers:
            print(f"    the Pathway peer does not maintain {name}: not checked", flush=True)
            return
        compare_rows(
            f"the Pathway peer's {name}",
            self.workers[name].call(("rows", name)),
            f"snapview's {target}",
            client.read(target).to_pylist(),
        )

    def close(self) -> None:
        """End the workers (each within a minute, else killed); idempotent."""
        for w in self.workers.values():
            w.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        atexit.unregister(self.close)


def _worker(fd: int) -> None:
    """The worker process: build the dataflow, load the sources, then answer the parent's
    ``change``, ``rows`` and ``stop`` until it says stop or its socket closes."""
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    lock = threading.Lock()

    def send(msg: tuple) -> None:
        with lock:
            conn.send(msg)

    try:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:THREADS])
        import pathway as pw

        kind, files, views = conn.recv()
        assert kind == "load", kind
        _dataflow(pw, conn, send, files, views)
        pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    except BaseException:
        try:
            send(("error", traceback.format_exc()))
        except OSError:
            pass
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(1)
    sys.stderr.flush()
    os._exit(0)  # Pathway's threads have ended with pw.run; do not wait on anything else


def _dataflow(pw, conn, send, files: dict[str, str], views: list[str]) -> None:
    """Define the input, the views and their subscriptions (run by ``pw.run``)."""
    import pyarrow as pa
    import pyarrow.ipc  # noqa: F401

    perf_counter = time.perf_counter
    state: dict[str, dict] = {v: {} for v in views}  # view -> {Pathway key: row}
    marker_time: dict[str, int | None] = {v: None for v in views}
    done: dict[str, float] = {}
    cond = threading.Condition()
    expect = [0]  # the barrier whose marker each view's output must show

    class Raw(pw.Schema):
        tag: int = pw.column_definition(primary_key=True)
        k: int = pw.column_definition(primary_key=True)
        a: int
        b: int
        c: int
        s: str

    class Feed(pw.io.python.ConnectorSubject):
        def __init__(self) -> None:
            super().__init__(session_type="upsert")

        def commit_and_wait(self, barrier: int, t0: float) -> dict[str, float]:
            self.next(tag=MARKER_TAG, k=0, a=barrier, b=0, c=0, s="")
            self.commit()
            with cond:
                if not cond.wait_for(lambda: len(done) == len(views), timeout=TIMEOUT_S):
                    raise RuntimeError(f"barrier {barrier}: views not complete in {TIMEOUT_S}s")
            return {v: done[v] - t0 for v in views}

        def run(self) -> None:
            nxt, delete = self.next, self.delete
            t0 = perf_counter()
            rows = 0
            for source, path in files.items():
                tag, ints, text = SOURCES[source]
                with pa.memory_map(path) as f:
                    data = pa.ipc.open_file(f).read_all()
                for batch in data.to_batches(max_chunksize=65536):
                    cols = batch.to_pydict()
                    ks = cols["id"]
                    zeros = [0] * len(ks)
                    a, b, c = ([cols[x] for x in ints] + [zeros, zeros])[:3]
                    s = cols[text] if text else [""] * len(ks)
                    for i in range(len(ks)):
                        nxt(tag=tag, k=ks[i], a=a[i], b=b[i], c=c[i], s=s[i])
                rows += data.num_rows
                del data
            barrier = 0
            secs = self.commit_and_wait(barrier, t0)
            send(("ok", {"rows": rows, "seconds": max(secs.values())}))
            while True:
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    return  # the parent is gone
                if msg[0] == "stop":
                    return
                if msg[0] == "rows":
                    names, inner = COLUMNS[msg[1]], _inner(COLUMNS[msg[1]])
                    got = [
                        {name: r[c] for name, c in zip(names, inner, strict=True)}
                        for r in state[msg[1]].values()
                    ]
                    send(("ok", got))
                    continue
                _, entries = msg
                barrier += 1
                with cond:
                    done.clear()
                    for v in views:
                        marker_time[v] = None
                    expect[0] = barrier
                t0 = perf_counter()  # the clock starts: the change is Pathway's from here
                for put, tag, k, a_, b_, c_, s_ in entries:
                    (nxt if put else delete)(tag=tag, k=k, a=a_, b=b_, c=c_, s=s_)
                send(("ok", self.commit_and_wait(barrier, t0)))

    raw = pw.io.python.read(Feed(), schema=Raw, autocommit_duration_ms=None)
    this = pw.this
    orders = raw.filter(this.tag == 0).select(
        key=this.k, grp=this.a, customer=this.b, amount=this.c
    )
    customers = raw.filter(this.tag == 1).select(key=this.k, region=this.a, name=this.s)
    shipments = raw.filter(this.tag == 2).select(key=this.k, order_id=this.a, carrier=this.b)
    marker = raw.filter(this.tag == MARKER_TAG).select(b=this.a)
    r = pw.reducers

    def view(name: str):
        """(the view's table, its marker row: key column -1, the barrier in an int column)."""
        if name in ("agg", "mm", "cd"):
            g = orders.groupby(orders.grp)
            if name == "agg":
                t = g.reduce(
                    orders.grp,
                    n=r.count(),
                    s=r.sum(orders.amount),
                    a=r.avg(orders.amount),
                )
                return t, marker.select(grp=-1, n=this.b, s=0, a=0.0)
            if name == "mm":
                t = g.reduce(
                    orders.grp, lo=r.min(orders.amount), hi=r.max(orders.amount), n=r.count()
                )
                return t, marker.select(grp=-1, lo=this.b, hi=0, n=0)
            t = g.reduce(orders.grp, customers=r.count_distinct(orders.customer), n=r.count())
            return t, marker.select(grp=-1, customers=this.b, n=0)
        if name == "fk":
            c = customers.filter(customers.region < 2)
            t = orders.join(c, orders.customer == c.key).select(
                key=orders.key,
                amount=orders.amount,
                grp=orders.grp,
                region=c.region,
                name=c.name,
            )
            return t, marker.select(key=-1, amount=this.b, grp=0, region=0, name="")
        if name == "nk":
            t = shipments.join(orders, shipments.order_id == orders.key).select(
                sid=shipments.key,
                carrier=shipments.carrier,
                oid=orders.key,
                amount=orders.amount,
                grp=orders.grp,
            )
            return t, marker.select(sid=-1, carrier=this.b, oid=0, amount=0, grp=0)
        assert name == "lj", name
        per = orders.groupby(orders.customer).reduce(
            orders.customer, n=r.count(), s=r.sum(orders.amount)
        )
        t = customers.join_left(per, customers.key == per.customer).select(
            key=customers.key,
            region=customers.region,
            n=pw.coalesce(per.n, 0),
            s=per.s,
        )
        return t, marker.select(key=-1, region=this.b, n=0, s=pw.declare_type(int | None, 0))

    def subscriber(name: str, first: str, counter: str):
        st = state[name]

        def on_change(key, row, time, is_addition):
            if row[first] == -1:  # the marker
                if is_addition and row[counter] == expect[0]:
                    marker_time[name] = time
                return
            if is_addition:
                st[key] = row
            elif st.get(key) == row:
                del st[key]

        def on_time_end(time):
            if time == marker_time[name]:
                t = perf_counter()
                with cond:
                    done[name] = t
                    cond.notify_all()

        return on_change, on_time_end

    for name in views:
        t, mark = view(name)
        cols = _inner(COLUMNS[name])
        on_change, on_time_end = subscriber(name, cols[0], cols[1])
        pw.io.subscribe(t.concat_reindex(mark), on_change=on_change, on_time_end=on_time_end)


def _inner(columns: tuple[str, ...]) -> tuple[str, ...]:
    """A view's column names inside Pathway, where ``id`` is reserved (the row pointer)."""
    return tuple("key" if c == "id" else c for c in columns)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(int(sys.argv[2]))
    else:
        print(__doc__)
