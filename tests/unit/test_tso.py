"""The timestamp oracle and the batching client."""

from __future__ import annotations

import threading
import time

from coordinator.server.tso import TimestampOracle
from coordinator.tso_client import TsoBatcher
from kvstore.mvcc.timestamp import physical_ms
from kvstore.store import LocalStore


def test_tso_strictly_increasing_across_reopen(tmp_path):
    """Timestamps after a reopen exceed every one issued before, even with the wall clock
    pinned in the past (the persisted high-water mark wins)."""
    path = str(tmp_path / "lmdb")
    s = LocalStore(path, sync=False)
    tso = TimestampOracle(s)
    before = [tso.allocate(1) for _ in range(1000)] + [tso.allocate(100)]
    assert before == sorted(set(before))
    hwm = tso.high_water_ms
    s.close()
    s = LocalStore(path, sync=False)
    tso2 = TimestampOracle(s)
    after = tso2.allocate(1)
    assert after > before[-1] + 99
    assert physical_ms(after) >= hwm
    s.close()


def test_tso_window_persisted_ahead(tmp_path):
    """Every issued timestamp's physical part stays below the persisted high-water mark."""
    s = LocalStore(str(tmp_path / "lmdb"), sync=False)
    tso = TimestampOracle(s, window_ms=50)
    for _ in range(200):
        ts = tso.allocate(1)
        with s.storage.read_txn() as r:
            assert physical_ms(ts) < int(r.get("meta", b"tso/high_water"))
        time.sleep(0.001)
    s.close()


def test_batcher_shares_rpcs_and_keeps_values_unique():
    """Concurrent get() calls share fetches and every caller gets a distinct timestamp."""
    counter = [1000]
    lock = threading.Lock()
    gate = threading.Event()

    def fetch(n: int) -> int:
        gate.wait(5)  # hold the first RPC so the others pile up behind it
        with lock:
            first = counter[0]
            counter[0] += n
        return first

    b = TsoBatcher(fetch)
    got: list[int] = []
    glock = threading.Lock()

    def worker():
        for _ in range(50):
            v = b.get()
            with glock:
                got.append(v)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(30)
    assert len(got) == 400 and len(set(got)) == 400
    assert b.rpcs < 400, "no batching happened"
    b.close()


def test_batcher_propagates_errors():
    """A failed fetch fails every caller waiting on it, and later calls work again."""
    calls = [0]

    def fetch(n: int) -> int:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("down")
        return 5

    b = TsoBatcher(fetch)
    try:
        b.get()
        raise AssertionError("expected the fetch error")
    except RuntimeError as e:
        assert "down" in str(e)
    assert b.get() == 5
    b.close()
