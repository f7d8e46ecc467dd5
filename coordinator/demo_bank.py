"""``snapview demo bank``: transfers from several processes, snapshot reads that prove the total
never changes. Runs on the embedded default (a ``snapview serve`` child on a temporary dir).

(The materialized-view version of this demo replaces it when MaterializedView lands.)
"""

from __future__ import annotations

import multiprocessing as mp
import random
import shutil
import tempfile
import time

import coordinator
from coordinator.embedded import EmbeddedServer

BRANCHES = 10
START_BALANCE = 1000


def _transfer_worker(address: str, accounts: int, seed: int, stop, done, conflicts) -> None:
    rng = random.Random(seed)
    c = coordinator.connect(address)
    while not stop.is_set():
        a, b = rng.sample(range(accounts), 2)
        amount = rng.randint(1, 50)
        try:
            with c.transaction() as t:
                ra = t.get("accounts", {"id": a})
                rb = t.get("accounts", {"id": b})
                if ra["balance"] < amount:
                    continue
                t.put("accounts", {**ra, "balance": ra["balance"] - amount})
                t.put("accounts", {**rb, "balance": rb["balance"] + amount})
            with done.get_lock():
                done.value += 1
        except coordinator.WriteConflict:
            with conflicts.get_lock():
                conflicts.value += 1
    c.close()


def run_bank_demo(
    duration_s: float = 10.0, accounts: int = 1000, writers: int = 3, out=print
) -> int:
    """Run the demo; returns 0 if every snapshot read saw the exact total, else 1."""
    data_dir = tempfile.mkdtemp(prefix="snapview-demo-")
    srv = EmbeddedServer(data_dir).start()
    out(f"snapview serve started on {srv.address} (data dir {data_dir})")
    ctx = mp.get_context("spawn")
    stop, done, conflicts = ctx.Event(), ctx.Value("q", 0), ctx.Value("q", 0)
    procs = []
    violations = reads = 0
    try:
        c = coordinator.connect(srv.address)
        c.create_table("accounts", "id BIGINT, branch INT, balance BIGINT", primary_key=["id"])
        with c.transaction() as t:
            for i in range(accounts):
                t.put("accounts", {"id": i, "branch": i % BRANCHES, "balance": START_BALANCE})
        expected = accounts * START_BALANCE
        out(
            f"created {accounts} accounts in {BRANCHES} branches, total {expected}; "
            f"{writers} transfer processes for {duration_s:g}s"
        )
        procs = [
            ctx.Process(
                target=_transfer_worker, args=(srv.address, accounts, seed, stop, done, conflicts)
            )
            for seed in range(writers)
        ]
        for p in procs:
            p.start()
        start = time.monotonic()
        next_print = start + 1.0
        while time.monotonic() - start < duration_s:
            ts = c.tso()
            table = c.read("accounts", at=ts)
            total = sum(table.column("balance").to_pylist())
            reads += 1
            if total != expected or table.num_rows != accounts:
                violations += 1
            if time.monotonic() >= next_print:
                next_print += 1.0
                out(
                    f"t={time.monotonic() - start:4.1f}s read_ts={ts} rows={table.num_rows} "
                    f"total={total} transfers={done.value} conflicts={conflicts.value} "
                    f"snapshot_reads={reads} violations={violations}"
                )
        stop.set()
        for p in procs:
            p.join(30)
        final = sum(c.read("accounts").column("balance").to_pylist())
        out(
            f"done: {done.value} transfers, {conflicts.value} conflicts retried, {reads} snapshot "
            f"reads, {violations} violations, final total {final} (expected {expected})"
        )
        c.close()
        return 0 if violations == 0 and final == expected else 1
    finally:
        stop.set()
        for p in procs:
            if p.is_alive():
                p.kill()
        srv.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
