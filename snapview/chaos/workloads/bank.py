"""The bank workload: transfers recorded in a ledger, with the three cascaded bank views.

A transfer moves money between two accounts and writes a ledger row keyed by its op id, in one
transaction. The final state must then satisfy: every acknowledged transfer's ledger row exists,
no failed one's does, and every balance equals the start balance plus the ledger's credits minus
its debits (a half-applied or twice-applied transfer breaks that).

    python -m snapview.chaos.workloads.bank writer ADDRESS PROCESS HISTORY_DIR SEED RATE ACCOUNTS
"""

from __future__ import annotations

import os
import random
import sys
import time

import coordinator
from snapview.chaos.checker import BankState
from snapview.chaos.history import FAIL, INFO, INVOKE, OK, Recorder
from snapview.demos.bank import BRANCHES, START_BALANCE


class _Insufficient(Exception):
    pass


def setup(client: coordinator.Client, accounts: int) -> None:
    client.create_table("accounts", "id BIGINT, branch INT, balance BIGINT", primary_key=["id"])
    client.create_table(
        "ledger", "id STRING, src BIGINT, dst BIGINT, amount BIGINT", primary_key=["id"]
    )
    with client.transaction() as t:
        for i in range(accounts):
            t.put("accounts", {"id": i, "branch": i % BRANCHES, "balance": START_BALANCE})


def writer(address: str, process: str, history_dir: str, seed: int, rate: float, n: int) -> None:
    """Transfer forever (until killed), recording each op."""
    rng = random.Random(seed)
    rec = Recorder(os.path.join(history_dir, f"{process}.jsonl"), process)
    # Short retries: a transfer whose server is gone is recorded as info and the next one tries.
    c = coordinator.connect(address, retry=coordinator.RetryPolicy(max_attempts=4, max_elapsed_s=3))
    i = 0
    while True:
        i += 1
        a, b = rng.sample(range(n), 2)
        v = {"id": f"{process}-{i}", "src": a, "dst": b, "amount": rng.randint(1, 40)}
        rec.record(INVOKE, "transfer", v)
        try:
            with c.transaction() as t:
                ra = t.get("accounts", {"id": a})
                rb = t.get("accounts", {"id": b})
                assert ra is not None and rb is not None  # setup created every account
                if ra["balance"] < v["amount"]:
                    raise _Insufficient
                t.put("accounts", {**ra, "balance": ra["balance"] - v["amount"]})
                t.put("accounts", {**rb, "balance": rb["balance"] + v["amount"]})
                t.put("ledger", {"id": v["id"], "src": a, "dst": b, "amount": v["amount"]})
            assert t.commit_ts is not None  # the transaction wrote
            rec.record(OK, "transfer", v, ts=t.commit_ts)
        except (_Insufficient, coordinator.WriteConflict) as e:
            rec.record(FAIL, "transfer", v, error=type(e).__name__)
        except Exception as e:  # noqa: BLE001 - any other outcome is unknown: info
            rec.record(INFO, "transfer", v, error=f"{type(e).__name__}: {e}"[:200])
        time.sleep(1.0 / rate)


def final_state(client: coordinator.Client) -> BankState:
    accounts = client.read("accounts").to_pylist()
    ledger = {
        r["id"]: {"src": r["src"], "dst": r["dst"], "amount": r["amount"]}
        for r in client.read("ledger").to_pylist()
    }
    return BankState(START_BALANCE, {r["id"]: r["balance"] for r in accounts}, ledger)


if __name__ == "__main__":
    _, cmd, address, process, history_dir, seed, rate, n = sys.argv
    assert cmd == "writer"
    writer(address, process, history_dir, int(seed), float(rate), int(n))
