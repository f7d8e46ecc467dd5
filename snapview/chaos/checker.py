"""The chaos checker: reads a run's history and final state, and names every violation.

Pure functions over data, so each can be fed a planted history (tests/chaos/test_checker.py): a
checker that cannot fail proves nothing. Each violation carries a name, the op or table, and the
timestamps involved.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from snapview.chaos.history import FAIL, INFO, OK, Op, completions


@dataclass(frozen=True)
class Violation:
    name: str
    detail: str
    ts: int = 0


@dataclass
class BankState:
    """What the bank workload left in the store, read after healing."""

    start_balance: int
    balances: dict[int, int]  # account -> final balance
    ledger: dict[str, dict]  # transfer id -> {"src", "dst", "amount"}


@dataclass
class Result:
    violations: list[Violation] = field(default_factory=list)
    checked: Counter = field(default_factory=Counter)

    @property
    def valid(self) -> bool:
        return not self.violations

    def by_name(self) -> Counter:
        return Counter(v.name for v in self.violations)


def check_transfers(ops: list[Op], state: BankState) -> list[Violation]:
    """Every acknowledged transfer is in the ledger and applied to both balances exactly once;
    no failed one is present; an unknown (info) one is fully present or fully absent."""
    out = []
    known = set()
    for (_, tid), op in completions([o for o in ops if o.f == "transfer"]).items():
        known.add(tid)
        present = tid in state.ledger
        if op.type == OK and not present:
            out.append(Violation("lost-write", f"transfer {tid} {op.value} acknowledged", op.ts))
        elif op.type == FAIL and present:
            out.append(Violation("failed-op-present", f"transfer {tid} failed ({op.error})"))
    for tid in state.ledger:
        if tid not in known:
            out.append(Violation("phantom-write", f"ledger row {tid} was never invoked"))
    # Balances follow from the ledger: a half-applied or twice-applied transfer breaks this.
    expect: defaultdict[int, int] = defaultdict(lambda: state.start_balance)
    for t in state.ledger.values():
        expect[t["src"]] -= t["amount"]
        expect[t["dst"]] += t["amount"]
    for acct, bal in sorted(state.balances.items()):
        if bal != expect[acct]:
            out.append(
                Violation(
                    "partial-or-duplicate-write",
                    f"account {acct} holds {bal}, the ledger says {expect[acct]}",
                )
            )
    return out


def check_reads(ops: list[Op]) -> list[Violation]:
    """Every consistent read taken during the run held the invariant."""
    return [
        Violation("consistent-read-violation", "; ".join(op.value.get("violations", [])), op.ts)
        for op in ops
        if op.f == "read" and op.type == OK and op.value.get("violations")
    ]


def check_barrier_sequences(issued: list[int], versions: dict[str, list[int]]) -> list[Violation]:
    """Each view has a version at every barrier issued between its first and its last, once."""
    out = []
    issued = sorted(issued)
    for view, seq in versions.items():
        if not seq:
            continue
        for b, n in Counter(seq).items():
            if n > 1:
                out.append(Violation("barrier-repeat", f"view {view} has barrier {b} {n} times", b))
        have = set(seq)
        lo, hi = min(seq), max(seq)
        for b in issued:
            if lo < b < hi and b not in have:
                out.append(Violation("barrier-gap", f"view {view} skipped barrier {b}", b))
    return out


def check_view_versions(mismatches: list[tuple[str, int, str]]) -> list[Violation]:
    """Mismatches between a committed view version and its query recomputed at its barrier."""
    return [Violation("view-version-mismatch", f"view {v}: {d}", b) for v, b, d in mismatches]


def check_locks(locks: list[tuple[bytes, int, int]], now_ms: int) -> list[Violation]:
    """No lock is left older than its TTL after healing. ``locks``: (key, start_ts, ttl_ms)."""
    out = []
    for key, start_ts, ttl_ms in locks:
        age = now_ms - (start_ts >> 18)
        if age > ttl_ms:
            out.append(
                Violation(
                    "lock-left", f"lock on {key.hex()} is {age} ms old (ttl {ttl_ms})", start_ts
                )
            )
    return out


def check_tso(samples: list[tuple[str, int]]) -> list[Violation]:
    """TSO values sampled across the run (restarts included) are strictly increasing."""
    return [
        Violation("tso-went-back", f"{label}: {ts} after {prev_label}: {prev}", ts)
        for (prev_label, prev), (label, ts) in zip(samples, samples[1:], strict=False)
        if ts <= prev
    ]


def check_append(acked: set[int], counts: dict[int, int]) -> list[Violation]:
    """Every acknowledged element of the append stream appears exactly once."""
    out = [
        Violation("lost-element", f"element {e} acknowledged, absent") for e in acked - set(counts)
    ]
    out += [
        Violation("duplicate-element", f"element {e} appears {n} times")
        for e, n in counts.items()
        if n > 1
    ]
    return out


__all__ = [
    "BankState",
    "INFO",
    "Result",
    "Violation",
    "check_append",
    "check_barrier_sequences",
    "check_locks",
    "check_reads",
    "check_tso",
    "check_transfers",
    "check_view_versions",
]
