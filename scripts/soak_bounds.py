"""Bounds soak (issue 25): leases churned, large change scans, an abandoned correction set.

    PYTHONPATH=$PWD .venv/bin/python scripts/soak_bounds.py [--seconds 600]

One ``snapview serve`` on 127.0.0.1 (``EmbeddedServer``, fresh data dir, ``--no-sync``,
``--retention 30s --gc-interval 1s --epoch-ttl 5s``, lease caps ``--max-leases 1000
--max-leases-per-holder 100``, ``--max-heavy-calls`` at its default 4). Set-up: table ``big``
(``id BIGINT, v BIGINT, pad STRING``, ~100-byte rows) of --rows rows, then every row updated
once, so the change (T, now] holds --rows changed rows with both images; table ``hot`` (1,000
rows); table ``fix``. Then, for --seconds:

* lease churn: --holders (16) threads (one holder name each) take leases at a recent ts (TTL 60 s,
  not renewed) at --lease-rate in all, each keeping at most 40 live and releasing its oldest;
  every 100th lease is abandoned instead (TTL 5 s), so expiry is churned too. Live leases stay
  far under both caps: a refusal counts as a failure.
* 8 threads run ``ScanChanges`` over the big change in a loop, through the client's store stub
  (``client.store.stub``: the chunks are counted and dropped, so the soak measures the server,
  not 8 lists of 200k records in this process), each checking it saw --rows changes. A call
  refused as busy (RESOURCE_EXHAUSTED naming the heavy-call limit) is retried after 100 ms and
  counted.
* ``hot`` gets 10 rows updated every 100 ms (GC has history to collect all along).
* The big change is made anew every --rewrite-every seconds (every row of ``big`` updated
  again). A change scan needs its lower end kept from GC, and with 30 s of retention that takes
  a reader lease: one lease held for the whole run would pin the safepoint, and the data dir
  would grow by design. So the scanners' lease (holder ``soak scanners``) moves with the change:
  a new lease on the new change's start, the new range published, then the old lease released
  once no scan of the old range is running. GC then has a whole old version of ``big`` to
  collect every cycle.
* At the start, one abandoned correction set: a second client begins corrections on ``fix``
  (``JobClient.begin_corrections``, as ``revise(corrections=...)`` does), prewrites one row under
  its epoch, and closes without committing, aborting or heartbeating. Its GC hold (``revision N
  of fix``) must be gone from ``GcStatus`` within --epoch-ttl plus a few GC ticks, and the
  revision recorded ``aborted``.

Every --sample-every seconds (and once before the load starts): the server's VmRSS, VmHWM and
Threads (/proc/PID/status), ``lmdb/data.mdb``'s allocated bytes (st_blocks * 512) and st_size,
the whole data dir's allocated bytes, live leases, the safepoint's age, whether the correction
set's hold is there, and the load's counters. At the end, a table and a verdict:

* memory flat: over the second half of the run, the median VmRSS is within +15% of the first
  half's median and the largest within +15% of the first half's largest (the sample at t=0, taken
  before any load, is not in the first half); the same for RssAnon (heap flat): VmRSS also
  counts the mapped ``data.mdb`` pages (RssFile), so it grows with the file. 15%: at each sample up to 4 scans (the heavy-call
  limit) are mid-stream, ~95 MB together at their peak over a ~250-300 MB server
  (docs/performance.md, "Change scans: server memory"), so which of them happen to be running
  moves a sample by several percent; a leak of the churn (100k leases at even 1 KB each: 100 MB)
  or of the scans would be far over it.
* data dir flat: the most ``data.mdb`` has allocated over the second half is within +10% of the
  most over the first half. LMDB never gives pages back to the file system, so flat means it
  stopped growing: once GC keeps up, a cycle's new version of ``big`` fits in the pages the
  previous old version freed. A pinned safepoint (a hold nobody settles) adds a whole version of
  ``big`` (tens of MB, far over 10%) at every cycle.
* the correction set's hold gone within --epoch-ttl + 10 s, the revision ``aborted``;
* at least --min-leases leases taken (default 100,000 for 600 s, in proportion for a shorter
  run), none refused; every scan saw --rows changes.

Exits 1 if any of these fails. Stops by itself; stops only the server it started.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc  # noqa: E402
import pyarrow as pa  # noqa: E402

import coordinator  # noqa: E402
from coordinator.revisions import arrow_mutations, correctable_table  # noqa: E402
from kvstore.errors import ResourceExhausted, SnapviewError  # noqa: E402
from kvstore.mvcc.timestamp import LOGICAL_BITS  # noqa: E402
from scripts.bench_gc import dir_bytes  # noqa: E402
from scripts.bench_scan_memory import status_kb  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview_proto.snapview.v1 import kvstore_pb2 as pb  # noqa: E402

SCHEMA = "id BIGINT, v BIGINT, pad STRING"
TXN = 5_000
HOT_ROWS = 1_000
WINDOW = 40  # live leases per churn thread
MB = 1 << 20


def allocated(path: str) -> tuple[int, int]:
    """(allocated bytes, st_size) of one file."""
    st = os.stat(path)
    return st.st_blocks * 512, st.st_size


@dataclass
class Counters:
    mu: threading.Lock = field(default_factory=threading.Lock)
    leases_taken: int = 0
    leases_released: int = 0
    leases_abandoned: int = 0
    lease_refused: int = 0
    lease_errors: int = 0
    scans: int = 0
    scan_busy: int = 0
    scan_wrong: int = 0
    scan_errors: int = 0
    hot_txns: int = 0
    hot_conflicts: int = 0
    rewrites: int = 0
    rewrite_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, **kw: int) -> None:
        with self.mu:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)

    def error(self, what: str) -> None:
        with self.mu:
            if len(self.errors) < 20:
                self.errors.append(what)


class Target:
    """The change the scanners read: (lo, hi] of generation ``gen``, held by ``lease``."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.gen, self.lo, self.hi, self.lease = 0, 0, 0, None
        self.running: collections.Counter[int] = collections.Counter()

    def publish(self, lo: int, hi: int, lease) -> None:
        with self.cv:
            old_gen, old_lease = self.gen, self.lease
            self.gen, self.lo, self.hi, self.lease = self.gen + 1, lo, hi, lease
            # The old range's lease goes once no scan of it runs (bounded: a stuck scan would
            # otherwise pin the safepoint for the rest of the run).
            self.cv.wait_for(lambda: self.running[old_gen] == 0, timeout=300)
        if old_lease is not None:
            old_lease.release()

    def enter(self) -> tuple[int, int, int]:
        with self.cv:
            self.running[self.gen] += 1
            return self.gen, self.lo, self.hi

    def leave(self, gen: int) -> None:
        with self.cv:
            self.running[gen] -= 1
            self.cv.notify_all()


def write_big(c: coordinator.Client, rows: int, gen: int) -> None:
    for s in range(0, rows, TXN):
        while True:
            try:
                with c.transaction(lock_ttl_ms=60_000) as t:
                    for i in range(s, min(rows, s + TXN)):
                        v = i * 1000 + gen
                        t.put("big", {"id": i, "v": v, "pad": f"{v:080d}"})
                break
            except SnapviewError as e:  # a conflict with nothing here: retried
                print(f"  rewrite of rows {s}.. retried: {e}", flush=True)


def churn(addr: str, holder: str, rate: float, stop: threading.Event, n: Counters) -> None:
    with coordinator.connect(addr) as c:
        live: collections.deque = collections.deque()
        period, nxt, ts, i = 1.0 / rate, time.monotonic(), c.tso(), 0
        while not stop.is_set():
            nxt += period
            wait = nxt - time.monotonic()
            if wait > 0 and stop.wait(wait):
                break
            i += 1
            if i % 50 == 0:
                ts = c.tso()
            try:
                if i % 100 == 0:
                    c.lease(ts, ttl_s=5, holder=holder, renew=False)  # left to expire
                    n.add(leases_taken=1, leases_abandoned=1)
                    continue
                live.append(c.lease(ts, ttl_s=60, holder=holder, renew=False))
                n.add(leases_taken=1)
            except ResourceExhausted as e:
                n.add(lease_refused=1)
                n.error(f"lease refused: {e}")
            except SnapviewError as e:
                n.add(lease_errors=1)
                n.error(f"lease: {e}")
            while len(live) > WINDOW or (live and stop.is_set()):
                live.popleft().release()
                n.add(leases_released=1)
        while live:
            live.popleft().release()
            n.add(leases_released=1)


def scanner(
    c: coordinator.Client,
    target: Target,
    rows: int,
    delay: float,
    stop: threading.Event,
    n: Counters,
) -> None:
    stub = c.store.stub
    while not stop.is_set():
        gen, lo, hi = target.enter()
        try:
            got = 0
            for chunk in stub.ScanChanges(
                pb.ScanChangesRequest(table="big", from_ts=lo, to_ts=hi), timeout=600
            ):
                got += len(chunk.changes)
                if stop.is_set():
                    break
                if delay:
                    time.sleep(delay)
            else:
                n.add(scans=1)
                if got != rows:
                    n.add(scan_wrong=1)
                    n.error(f"scan of generation {gen} saw {got} changes, not {rows}")
        except grpc.RpcError as e:
            if e.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "heavy" in (e.details() or ""):
                n.add(scan_busy=1)
                stop.wait(0.1)
            else:
                n.add(scan_errors=1)
                n.error(f"scan: {e.code()} {e.details()}")
                stop.wait(1.0)
        finally:
            target.leave(gen)


def hot_writer(c: coordinator.Client, stop: threading.Event, n: Counters) -> None:
    rnd = random.Random(7)
    while not stop.wait(0.1):
        try:
            with c.transaction() as t:
                for i in rnd.sample(range(HOT_ROWS), 10):
                    t.put("hot", {"id": i, "v": rnd.randrange(1 << 40)})
            n.add(hot_txns=1)
        except SnapviewError:
            n.add(hot_conflicts=1)


def rewriter(
    c: coordinator.Client,
    target: Target,
    rows: int,
    every: float,
    stop: threading.Event,
    n: Counters,
) -> None:
    gen = 1
    while not stop.wait(every):
        gen += 1
        t0 = time.monotonic()
        lo = c.tso()
        lease = c.lease(lo, ttl_s=60, holder="soak scanners")
        write_big(c, rows, gen)
        target.publish(lo, c.tso(), lease)
        took = time.monotonic() - t0
        with n.mu:
            n.rewrites += 1
            n.rewrite_s.append(took)


def abandon_corrections(addr: str) -> tuple[int, str]:
    """Begin a correction set on ``fix``, prewrite one row, go away: (revision id, its job)."""
    c2 = coordinator.connect(addr)
    begun = c2.jobs.begin_corrections("fix", "upsert", "soak (abandoned)", 3000)
    epoch = begun.epoch
    muts = arrow_mutations(
        correctable_table(c2, "fix", "upsert"), pa.table({"id": [1], "v": [-1]}), "upsert"
    )
    c2.prewrite(muts, epoch.primary_key, epoch.start_ts, 3000)
    c2.close()  # no commit, no abort, no heartbeat
    return begun.revision.id, epoch.job


def correction_hold(c: coordinator.Client, rid: int, job: str) -> bool:
    st = c.gc_status(page_size=1)
    return any(f"revision {rid} of" in h.name or job in h.name for h in st.holds)


def sample(c, pid: int, data: str, t: float, hold: bool, n: Counters) -> dict:
    st = c.gc_status(page_size=1)
    blocks, size = allocated(os.path.join(data, "lmdb", "data.mdb"))
    with n.mu:
        counts = (n.leases_taken, n.scans, n.scan_busy, n.hot_txns, n.rewrites)
    return {
        "t": t,
        "rss": status_kb(pid, "VmRSS") / 1024,
        "hwm": status_kb(pid, "VmHWM") / 1024,
        "anon": status_kb(pid, "RssAnon") / 1024,
        "file": status_kb(pid, "RssFile") / 1024,
        "threads": status_kb(pid, "Threads"),
        "gc_rm": st.progress.versions_removed,
        "gc_passes": st.progress.passes,
        "mdb": blocks / MB,
        "mdb_size": size / MB,
        "dir": dir_bytes(data) / MB,
        "leases": st.total_leases,
        "sp_age": (st.now_ms - (st.safepoint >> LOGICAL_BITS)) / 1000 if st.safepoint else -1,
        "hold": hold,
        "taken": counts[0],
        "scans": counts[1],
        "busy": counts[2],
        "hot": counts[3],
        "rewrites": counts[4],
    }


def print_table(samples: list[dict]) -> None:
    print(
        f"{'t s':>5} {'RSS MB':>7} {'anon':>5} {'file':>5} {'HWM MB':>7} {'thr':>4} "
        f"{'mdb MB':>7} {'size MB':>8} "
        f"{'dir MB':>7} {'leases':>6} {'sp age s':>8} {'hold':>5} {'taken':>7} {'scans':>6} "
        f"{'busy':>6} {'hot tx':>6} {'rewr':>4} {'gc rm':>8} {'passes':>6}"
    )
    for s in samples:
        print(
            f"{s['t']:5.0f} {s['rss']:7.0f} {s['anon']:5.0f} {s['file']:5.0f} {s['hwm']:7.0f} "
            f"{s['threads']:4d} {s['mdb']:7.1f} "
            f"{s['mdb_size']:8.1f} {s['dir']:7.1f} {s['leases']:6d} {s['sp_age']:8.1f} "
            f"{'yes' if s['hold'] else 'no':>5} {s['taken']:7d} {s['scans']:6d} {s['busy']:6d} "
            f"{s['hot']:6d} {s['rewrites']:4d} {s['gc_rm']:8d} {s['gc_passes']:6d}"
        )


def verdict(samples: list[dict], args, n: Counters, hold_gone_s: float | None, state: str) -> bool:
    half = args.seconds / 2
    first = [s for s in samples if 0 < s["t"] <= half]
    second = [s for s in samples if s["t"] > half]
    ok = True

    def check(good: bool, text: str) -> None:
        nonlocal ok
        ok &= good
        print(f"  {'ok  ' if good else 'FAIL'} {text}")

    print("verdict:")
    if not first or not second:
        check(False, "too few samples for a verdict (raise --seconds or lower --sample-every)")
        return False
    for key, what in (
        ("rss", "memory flat: VmRSS"),
        ("anon", "heap flat: RssAnon (VmRSS less the mapped data.mdb)"),
    ):
        x1, x2 = [s[key] for s in first], [s[key] for s in second]
        m1, m2 = statistics.median(x1), statistics.median(x2)
        check(
            m2 <= m1 * (1 + args.rss_slack) and max(x2) <= max(x1) * (1 + args.rss_slack),
            f"{what} median {m1:.0f} -> {m2:.0f} MB ({(m2 / m1 - 1) * 100:+.1f}%), "
            f"max {max(x1):.0f} -> {max(x2):.0f} MB ({(max(x2) / max(x1) - 1) * 100:+.1f}%); "
            f"allowed +{args.rss_slack * 100:.0f}%",
        )
    d1, d2 = max(s["mdb"] for s in first), max(s["mdb"] for s in second)
    check(
        d2 <= d1 * (1 + args.disk_slack),
        f"data dir flat: data.mdb allocated max {d1:.1f} -> {d2:.1f} MB "
        f"({(d2 / d1 - 1) * 100:+.1f}%); allowed +{args.disk_slack * 100:.0f}%",
    )
    limit = args.epoch_ttl + 10
    check(
        hold_gone_s is not None and hold_gone_s <= limit and state == "aborted",
        f"abandoned correction set: hold gone after "
        f"{'never' if hold_gone_s is None else f'{hold_gone_s:.1f} s'} (allowed {limit:.0f} s), "
        f"revision {state}",
    )
    want = round(args.min_leases * args.seconds / 600)
    check(
        n.leases_taken >= want and n.lease_refused == 0 and n.lease_errors == 0,
        f"leases: {n.leases_taken} taken (wanted >= {want}), {n.leases_released} released, "
        f"{n.leases_abandoned} left to expire, {n.lease_refused} refused, "
        f"{n.lease_errors} other errors",
    )
    check(
        n.scans > 0 and n.scan_wrong == 0 and n.scan_errors == 0,
        f"scans: {n.scans} complete over {args.rows} changes each, {n.scan_busy} busy refusals "
        f"retried, {n.scan_wrong} wrong counts, {n.scan_errors} errors",
    )
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--scanners", type=int, default=8)
    ap.add_argument("--read-delay", type=float, default=0.02, help="seconds after each chunk")
    ap.add_argument("--holders", type=int, default=16)
    ap.add_argument("--lease-rate", type=float, default=200.0, help="leases taken per second")
    ap.add_argument("--min-leases", type=int, default=100_000, help="over 600 s (scaled)")
    ap.add_argument("--rewrite-every", type=float, default=150.0)
    ap.add_argument("--sample-every", type=float, default=30.0)
    ap.add_argument("--epoch-ttl", type=float, default=5.0)
    ap.add_argument("--rss-slack", type=float, default=0.15)
    ap.add_argument("--disk-slack", type=float, default=0.10)
    ap.add_argument("--keep", action="store_true", help="keep the data dir")
    args = ap.parse_args()

    base = tempfile.mkdtemp(prefix="soak-bounds-")
    data = os.path.join(base, "d")
    extra = [
        "--no-sync",
        "--map-size-mb",
        "1024",
        "--retention",
        "30s",
        "--gc-interval",
        "1s",
        "--epoch-ttl",
        f"{args.epoch_ttl:g}s",
        "--max-leases",
        "1000",
        "--max-leases-per-holder",
        "100",
    ]
    srv = EmbeddedServer(data, extra_args=extra).start()
    n, target, stop = Counters(), Target(), threading.Event()
    threads: list[threading.Thread] = []
    samples: list[dict] = []
    ok = False
    try:
        assert srv.proc is not None
        pid = srv.proc.pid
        print(f"server pid {pid} on {srv.address}, data dir {data}", flush=True)
        c = coordinator.connect(srv.address)
        t0 = time.monotonic()
        c.create_table("big", SCHEMA, ["id"])
        c.create_table("hot", "id BIGINT, v BIGINT", ["id"])
        c.create_table("fix", "id BIGINT, v BIGINT", ["id"])
        with c.transaction() as t:
            for i in range(HOT_ROWS):
                t.put("hot", {"id": i, "v": 0})
            t.put("fix", {"id": 1, "v": 1})
        write_big(c, args.rows, 0)
        lo = c.tso()
        first_lease = c.lease(lo, ttl_s=60, holder="soak scanners")
        write_big(c, args.rows, 1)
        target.publish(lo, c.tso(), first_lease)
        print(f"set-up: {args.rows:,} rows loaded and changed in {time.monotonic() - t0:.0f} s")

        rid, job = abandon_corrections(srv.address)
        abandoned_at = time.monotonic()
        hold = correction_hold(c, rid, job)
        print(f"correction set: revision {rid} ({job}) abandoned; hold present: {hold}")
        hold_gone_s: float | None = None if hold else 0.0
        samples.append(sample(c, pid, data, 0.0, hold, n))

        rate = args.lease_rate / args.holders
        for h in range(args.holders):
            threads.append(
                threading.Thread(target=churn, args=(srv.address, f"churn {h}", rate, stop, n))
            )
        for _ in range(args.scanners):
            threads.append(
                threading.Thread(
                    target=scanner, args=(c, target, args.rows, args.read_delay, stop, n)
                )
            )
        threads.append(threading.Thread(target=hot_writer, args=(c, stop, n)))
        threads.append(
            threading.Thread(
                target=rewriter, args=(c, target, args.rows, args.rewrite_every, stop, n)
            )
        )
        start = time.monotonic()
        for th in threads:
            th.daemon = True
            th.start()
        next_sample = args.sample_every
        while True:
            el = time.monotonic() - start
            if hold_gone_s is None and not correction_hold(c, rid, job):
                hold_gone_s = time.monotonic() - abandoned_at
                print(
                    f"  t={el:.0f}s: the correction set's hold is gone, "
                    f"{hold_gone_s:.1f} s after it was abandoned",
                    flush=True,
                )
            if el >= next_sample or el >= args.seconds:
                s = sample(c, pid, data, el, hold_gone_s is None, n)
                samples.append(s)
                print(
                    f"  t={el:.0f}s RSS {s['rss']:.0f} MB (anon {s['anon']:.0f}), "
                    f"data.mdb {s['mdb']:.1f} MB, GC removed {s['gc_rm']}, "
                    f"{s['leases']} leases live, {s['taken']} taken, {s['scans']} scans, "
                    f"safepoint {s['sp_age']:.0f} s old",
                    flush=True,
                )
                next_sample += args.sample_every
            if el >= args.seconds:
                break
            time.sleep(min(1.0, max(0.05, start + next_sample - time.monotonic())))
        stop.set()
        for th in threads:
            th.join(120)
        stuck = [th.name for th in threads if th.is_alive()]
        state = c.revision(rid).state
        if target.lease is not None:
            target.lease.release()
        print()
        print_table(samples)
        print()
        with n.mu:
            rw = ", ".join(f"{x:.0f}" for x in n.rewrite_s)
            print(
                f"rewrites of big: {n.rewrites} ({rw} s each); hot txns {n.hot_txns}, "
                f"{n.hot_conflicts} conflicts"
            )
            for e in n.errors:
                print(f"  error: {e}")
        if stuck:
            print(f"threads still running after the stop: {stuck}")
        ok = verdict(samples, args, n, hold_gone_s, state) and not stuck
        c.close()
    finally:
        stop.set()
        srv.stop()
        if args.keep:
            print(f"data dir kept: {data}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
