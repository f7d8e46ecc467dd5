"""TimestampOracle.try_allocate: the never-blocking allocation the server's event loop uses."""

from __future__ import annotations

import threading
import time

from coordinator.server.tso import TimestampOracle
from kvstore.mvcc.timestamp import physical_ms
from kvstore.store import LocalStore


def test_try_allocate_interleaves_with_allocate(tmp_path):
    """Values from both calls are strictly increasing, and a count reserves that many."""
    s = LocalStore(str(tmp_path / "lmdb"), sync=False)
    tso = TimestampOracle(s)
    got = []
    for i in range(2000):
        v = tso.try_allocate(3) if i % 2 else tso.allocate(3)
        if v is not None:
            got.append(v)
    assert len(got) > 1500
    assert all(b >= a + 3 for a, b in zip(got, got[1:], strict=False))
    s.close()


def test_try_allocate_never_waits_for_the_lock(tmp_path):
    s = LocalStore(str(tmp_path / "lmdb"), sync=False)
    tso = TimestampOracle(s)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with tso._lock:
            held.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    try:
        assert tso.try_allocate(1) is None
    finally:
        release.set()
        t.join()
    assert tso.try_allocate(1) is not None
    s.close()


def test_try_allocate_leaves_persisting_the_window_to_allocate(tmp_path):
    """When the window must be extended (a disk write), try_allocate returns None and issues
    nothing; allocate then extends it, and every timestamp stays below the persisted mark."""
    s = LocalStore(str(tmp_path / "lmdb"), sync=False)
    tso = TimestampOracle(s, window_ms=50)
    nones = 0
    last = 0
    for i in range(3000):
        if i % 100 == 0:
            time.sleep(0.002)  # >= 60 ms in all: the 50 ms window must be extended
        v = tso.try_allocate(1)
        if v is None:
            nones += 1
            v = tso.allocate(1)
        assert v > last
        last = v
        with s.storage.read_txn() as r:
            assert physical_ms(v) < int(r.get("meta", b"tso/high_water"))
    assert nones > 0
    s.close()
