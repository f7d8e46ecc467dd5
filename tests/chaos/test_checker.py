"""Checker self-tests: planted violations must be named (and a clean history passes)."""

from __future__ import annotations

from snapview.chaos.checker import (
    BankState,
    check_append,
    check_barrier_sequences,
    check_locks,
    check_reads,
    check_transfers,
    check_tso,
)
from snapview.chaos.history import FAIL, INFO, INVOKE, OK, Op


def _transfer(pid, tid, kind, src=0, dst=1, amount=5):
    v = {"id": tid, "src": src, "dst": dst, "amount": amount}
    return [Op(pid, INVOKE, "transfer", v), Op(pid, kind, "transfer", v, ts=100)]


def _state(ledger, start=100, accounts=3):
    bal = {a: start for a in range(accounts)}
    for t in ledger.values():
        bal[t["src"]] -= t["amount"]
        bal[t["dst"]] += t["amount"]
    return BankState(start, bal, dict(ledger))


def _row(src=0, dst=1, amount=5):
    return {"src": src, "dst": dst, "amount": amount}


def test_clean_history_passes():
    ops = _transfer("w1", "a", OK) + _transfer("w1", "b", FAIL) + _transfer("w2", "c", INFO)
    assert check_transfers(ops, _state({"a": _row()})) == []
    assert check_transfers(ops, _state({"a": _row(), "c": _row()})) == []  # info: either way


def test_lost_write_is_named():
    ops = _transfer("w1", "a", OK) + _transfer("w1", "b", OK)
    v = check_transfers(ops, _state({"a": _row()}))
    assert [x.name for x in v] == ["lost-write"] and "transfer b" in v[0].detail


def test_failed_op_present_is_named():
    ops = _transfer("w1", "a", FAIL)
    assert [x.name for x in check_transfers(ops, _state({"a": _row()}))] == ["failed-op-present"]


def test_half_visible_transaction_is_named():
    """The ledger row and the debit committed, the credit did not."""
    ops = _transfer("w1", "a", INFO)
    state = _state({"a": _row(0, 1, 5)})
    state.balances[1] -= 5  # the credit to account 1 is missing
    names = [x.name for x in check_transfers(ops, state)]
    assert names == ["partial-or-duplicate-write"]


def test_duplicated_application_is_named():
    ops = _transfer("w1", "a", OK)
    state = _state({"a": _row(0, 1, 5)})
    state.balances[0] -= 5
    state.balances[1] += 5  # applied twice
    assert {x.name for x in check_transfers(ops, state)} == {"partial-or-duplicate-write"}


def test_gap_and_repeat_in_a_barrier_sequence_are_named():
    issued = [10, 20, 30, 40, 50]
    assert check_barrier_sequences(issued, {"v": [20, 30, 40]}) == []
    gap = check_barrier_sequences(issued, {"v": [10, 20, 40, 50]})
    assert [(x.name, x.ts) for x in gap] == [("barrier-gap", 30)]
    rep = check_barrier_sequences(issued, {"v": [10, 20, 20, 30]})
    assert [(x.name, x.ts) for x in rep] == [("barrier-repeat", 20)]


def test_duplicated_epoch_in_an_append_stream_is_named():
    assert check_append({1, 2}, {1: 1, 2: 1}) == []
    v = check_append({1, 2, 3}, {1: 1, 2: 2})
    assert sorted(x.name for x in v) == ["duplicate-element", "lost-element"]


def test_reads_locks_and_tso():
    bad = Op("reader", OK, "read", {"violations": ["branch_balance differs"]}, ts=7)
    good = Op("reader", OK, "read", {"violations": []}, ts=8)
    assert [x.name for x in check_reads([good, bad])] == ["consistent-read-violation"]
    now = 10_000
    assert check_locks([(b"k", (now - 100) << 18, 3000)], now) == []
    assert [x.name for x in check_locks([(b"k", (now - 5000) << 18, 3000)], now)] == ["lock-left"]
    assert check_tso([("a", 1), ("b", 2)]) == []
    assert [x.name for x in check_tso([("a", 5), ("restart", 5)])] == ["tso-went-back"]
