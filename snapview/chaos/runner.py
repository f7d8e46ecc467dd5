"""``snapview chaos``: a seeded workload under a nemesis, then a heal phase and the checker.

    snapview chaos --workload bank|append --duration 120 --seed 7 [--faults kill-server,...]
                   [--master local[2]] [--fault-every 8]

Prints the faults injected by kind, recoveries and their time, operations and reads checked, and
violations by name; exits 1 on any violation.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import coordinator
from snapview.chaos import checker
from snapview.chaos.history import OK, Recorder, load
from snapview.chaos.nemesis import FAULTS, Cluster, Nemesis
from snapview.chaos.workloads import append, bank
from snapview.demos.bank import TABLES, check
from snapview.embedded import EmbeddedServer

VIEW_TABLES = TABLES[1:]


@dataclass
class ChaosConfig:
    workload: str = "bank"
    duration: float = 120.0
    seed: int = 1
    faults: tuple[str, ...] = FAULTS
    master: str = "local[2]"
    fault_every: float = 8.0
    barrier_interval: str = "500ms"
    writers: int = 2
    rate: float = 20.0  # transfers per second per writer
    accounts: int = 100
    keep_dir: bool = False


@dataclass
class Summary:
    faults: Counter = field(default_factory=Counter)
    recoveries: dict = field(default_factory=dict)  # kind -> [seconds]
    unrecovered: int = 0
    ops: Counter = field(default_factory=Counter)
    reads: int = 0
    view_versions: int = 0
    violations: Counter = field(default_factory=Counter)
    examples: list = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.violations and not self.unrecovered

    def lines(self) -> list[str]:
        out = ["faults injected: " + ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items()))]
        for kind, secs in sorted(self.recoveries.items()):
            if secs:
                out.append(
                    f"  recovery after {kind}: p50 {statistics.median(secs):.2f}s "
                    f"max {max(secs):.2f}s over {len(secs)}"
                )
        if self.unrecovered:
            out.append(f"  not recovered within the bound: {self.unrecovered}")
        out.append(
            "operations: "
            + ", ".join(f"{k} {n}" for k, n in sorted(self.ops.items()))
            + f"; consistent reads checked {self.reads}; view versions checked "
            f"{self.view_versions}"
        )
        if self.violations:
            out.append(
                "violations: " + ", ".join(f"{k} {n}" for k, n in sorted(self.violations.items()))
            )
            out += [f"  {v.name}: {v.detail}" for v in self.examples[:10]]
        else:
            out.append("violations: none")
        out.append("VALID" if self.valid else "INVALID")
        return out


def _reader(address: str, history_dir: str, stop: threading.Event, expected: int, n: int):
    rec = Recorder(os.path.join(history_dir, "reader.jsonl"), "reader")
    c = coordinator.connect(address, retry=coordinator.RetryPolicy(max_attempts=2, max_elapsed_s=1))
    while not stop.is_set():
        try:
            snap = c.snapshot(list(TABLES))
            tables = {t: snap.read(t) for t in TABLES}
        except coordinator.SnapviewError:
            time.sleep(0.1)  # the server is down or paused, or no common barrier yet
            continue
        rec.record(OK, "read", {"violations": check(tables, expected, n)}, ts=snap.barrier)
        time.sleep(0.05)
    c.close()


def _view_checks(c, first: dict[str, int]) -> tuple[int, list[tuple[str, int, str]]]:
    """Every common barrier of the views since the newest of their first ones: the four tables
    read at it must hold the bank invariant (each view equals its query at the barrier)."""
    start = max(first.values())
    last = c.snapshot(list(TABLES)).barrier
    plans = c.jobs.plan_barriers("total_from_branches", after=start - 1, upto=last, limit=1 << 20)
    expected: int | None = None
    n = 0  # the number of accounts, read with ``expected``
    checked, bad = 0, []
    for p in plans.barriers:
        try:
            snap = c.snapshot(list(TABLES), barrier=p.barrier)
        except coordinator.BarrierNotReached:
            continue  # a gap: the barrier-sequence check names it
        tables = {t: snap.read(t) for t in TABLES}
        if expected is None:
            n = tables["accounts"].num_rows
            expected = sum(tables["accounts"].column("balance").to_pylist())
        for d in check(tables, expected, n):
            bad.append(("bank views", p.barrier, d))
        checked += 1
    return checked, bad


def _store_facts(lmdb_path: str) -> tuple[list[int], dict[str, list[int]], list]:
    """After the server stopped: issued barriers, each view's barrier versions, and locks."""
    from coordinator.server.barriers import issued_barriers, view_barriers
    from kvstore.mvcc.records import Lock
    from kvstore.storage import Storage

    st = Storage(lmdb_path)
    try:
        with st.read_txn() as r:
            issued = list(issued_barriers(r))
            versions = {v: view_barriers(r, v) for v in VIEW_TABLES}
            locks = []
            for k, raw in r.iter_prefix("lock", b""):
                lk = Lock.parse(raw)
                locks.append((k, lk.start_ts, lk.ttl_ms))
    finally:
        st.close()
    return issued, versions, locks


def run(cfg: ChaosConfig, out: Callable[[str], object] = print) -> Summary:
    if cfg.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {cfg.workload!r} ({', '.join(WORKLOADS)})")
    rng = random.Random(cfg.seed)
    work = tempfile.mkdtemp(prefix="snapview-chaos-")
    history = os.path.join(work, "history")
    os.makedirs(history)
    srv = EmbeddedServer(
        os.path.join(work, "data"), extra_args=["--barrier-interval", cfg.barrier_interval]
    ).start()
    if cfg.workload == "append":
        return _run_append(cfg, rng, work, srv, out)
    cluster = Cluster(
        srv,
        history,
        work,
        cfg.rate,
        cfg.accounts,
        cfg.seed,
        ["snapview.chaos.view_driver", srv.address, cfg.master],
        "branch_balance",
    )
    summary = Summary()
    stop_reader = threading.Event()
    reader = None
    checker_client, checker_lease = None, None
    try:
        with coordinator.connect(srv.address) as c:
            bank.setup(c, cfg.accounts)
        cluster.sample_tso("start")
        out(f"chaos: workload {cfg.workload}, seed {cfg.seed}, {cfg.duration:g}s, data in {work}")
        cluster.start_view_driver()
        for _ in range(cfg.writers):
            cluster.start_writer()
        expected = cfg.accounts * bank.START_BALANCE
        reader = threading.Thread(
            target=_reader,
            args=(srv.address, history, stop_reader, expected, cfg.accounts),
            daemon=True,
        )
        reader.start()
        with coordinator.connect(srv.address) as c:
            c.snapshot(list(TABLES), wait_s=120)
            first = {v: c.snapshot([v]).barrier for v in VIEW_TABLES}
        # The checks read every barrier since `first` after the run: hold them against GC (a
        # run longer than the server's --retention would otherwise lose its oldest barriers).
        # Long TTL: the nemesis stops the server, and renewals resume when it is back.
        checker_client = coordinator.connect(srv.address)
        checker_lease = checker_client.lease(
            min(first.values()), ttl_s=cfg.duration + 600, holder="chaos checker"
        )
        nemesis = _nemesis_phase(cfg, rng, cluster, out)
        # ---- heal: everything back up, writers stopped, views caught up
        out("heal")
        cluster.supervise()
        cluster.kill_writers()
        stop_reader.set()
        reader.join(30)
        with coordinator.connect(srv.address) as c:
            ts = c.tso()
            deadline = time.monotonic() + 180
            while c.snapshot(list(TABLES), wait_s=60).barrier < ts:
                if time.monotonic() > deadline:
                    raise RuntimeError("the views did not catch up after healing")
                cluster.supervise()
                time.sleep(0.1)
            state = bank.final_state(c)  # full reads: resolves any lock left on the way
            summary.view_versions, mismatches = _view_checks(c, first)
        checker_lease.release()
        checker_lease = None
        cluster.sample_tso("end")
        cluster.stop_view_driver()
        srv.stop()
        issued, versions, locks = _store_facts(os.path.join(work, "data", "lmdb"))
        ops = load(history)
        violations = (
            checker.check_transfers(ops, state)
            + checker.check_reads(ops)
            + checker.check_view_versions(mismatches)
            + checker.check_barrier_sequences(issued, versions)
            + checker.check_locks(locks, int(time.time() * 1000))
            + checker.check_tso(cluster.tso_samples)
        )
        summary.ops = Counter(f"{o.f} {o.type}" for o in ops if o.type != "invoke")
        summary.reads = sum(1 for o in ops if o.f == "read")
        _summarize(summary, nemesis, violations, out)
        with open(os.path.join(work, "summary.json"), "w") as f:
            json.dump({"faults": summary.faults, "violations": summary.violations}, f)
        return summary
    finally:
        stop_reader.set()
        cluster.kill_writers()
        cluster.kill_view_driver()
        if checker_lease is not None:
            checker_lease.abandon()
        if checker_client is not None:
            checker_client.close()
        srv.stop()
        if not cfg.keep_dir and summary.valid:
            shutil.rmtree(work, ignore_errors=True)


WORKLOADS = ("bank", "append")


def _nemesis_phase(cfg, rng, cluster, out) -> Nemesis:
    faults = list(cfg.faults)
    if not cluster.writers:
        faults = [f for f in faults if f != "kill-writer"]
    nemesis = Nemesis(cluster, rng, faults)
    end = time.monotonic() + cfg.duration
    while time.monotonic() < end:
        time.sleep(min(rng.uniform(0.5, 1.5) * cfg.fault_every, max(0, end - time.monotonic())))
        if time.monotonic() >= end:
            break
        cluster.supervise()
        rec = nemesis.step()
        rt = "not recovered" if rec.recovery_s is None else f"recovered in {rec.recovery_s:.2f}s"
        out(f"  t={cfg.duration - (end - time.monotonic()):5.1f}s {rec.kind}: {rec.detail}; {rt}")
    return nemesis


def _summarize(summary: Summary, nemesis: Nemesis, violations: list, out) -> None:
    for r in nemesis.records:
        summary.faults[r.kind] += 1
        if r.recovery_s is None:
            summary.unrecovered += 1
        else:
            summary.recoveries.setdefault(r.kind, []).append(r.recovery_s)
    summary.violations = Counter(v.name for v in violations)
    summary.examples = violations
    for line in summary.lines():
        out(line)


def _run_append(cfg: ChaosConfig, rng, work: str, srv, out) -> Summary:
    input_dir = os.path.join(work, "input")
    cluster = Cluster(
        srv,
        os.path.join(work, "history"),
        work,
        0,
        0,
        cfg.seed,
        [
            "snapview.chaos.workloads.append",
            "job",
            srv.address,
            input_dir,
            os.path.join(work, "checkpoint"),
            cfg.master,
        ],
        append.JOB,
    )
    gen = append.Generator(input_dir)
    summary = Summary()
    try:
        with coordinator.connect(srv.address) as c:
            append.setup(c)
        cluster.sample_tso("start")
        out(f"chaos: workload append, seed {cfg.seed}, {cfg.duration:g}s, data in {work}")
        cluster.start_view_driver()
        gen.start()
        nemesis = _nemesis_phase(cfg, rng, cluster, out)
        out("heal")
        gen.stop()
        cluster.supervise()
        with coordinator.connect(srv.address) as c:
            deadline = time.monotonic() + 300
            while not gen.written <= set(got := append.counts(c)):
                if time.monotonic() > deadline:
                    break  # the checker names what is missing
                cluster.supervise()
                time.sleep(0.2)
        cluster.sample_tso("end")
        cluster.stop_view_driver()
        srv.stop()
        _, _, locks = _store_facts(os.path.join(work, "data", "lmdb"))
        violations = (
            checker.check_append(gen.written, dict(got))
            + checker.check_locks(locks, int(time.time() * 1000))
            + checker.check_tso(cluster.tso_samples)
        )
        summary.ops = Counter(
            {"append written": len(gen.written), "append found": sum(got.values())}
        )
        _summarize(summary, nemesis, violations, out)
        return summary
    finally:
        gen.stop()
        cluster.kill_view_driver()
        srv.stop()
        if not cfg.keep_dir and summary.valid:
            shutil.rmtree(work, ignore_errors=True)


__all__ = ["WORKLOADS", "ChaosConfig", "Summary", "run"]
