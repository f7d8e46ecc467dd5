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


def test_physical_clock_keeps_pace_when_the_wall_clock_steps_back(tmp_path, monkeypatch):
    """With the wall clock stepped back an hour, the TSO's physical clock never goes back and
    keeps advancing at the monotonic clock's pace; timestamps stay strictly increasing."""
    import coordinator.server.tso as tso_mod

    s = LocalStore(str(tmp_path / "lmdb"), sync=False)
    tso = TimestampOracle(s)
    before_ts, before_ms = tso.now(), tso.physical_ms()
    real = tso_mod._wall_ms
    monkeypatch.setattr(tso_mod, "_wall_ms", lambda: real() - 3_600_000)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.2:
        pass  # let 200 ms of monotonic time pass
    after_ms = tso.physical_ms()
    assert after_ms >= before_ms + 190, (before_ms, after_ms)
    assert after_ms < before_ms + 60_000
    assert tso.now() > before_ts
    s.close()


def test_issued_bound_covers_timestamps_from_before_a_restart(tmp_path):
    """issued() bounds everything handed out, also by an earlier process on the data dir, so a
    commit with a timestamp taken before a restart is still accepted."""
    path = str(tmp_path / "lmdb")
    s = LocalStore(path, sync=False)
    tso = TimestampOracle(s)
    last = tso.allocate(1000) + 999
    assert tso.issued() >= last
    s.close()
    s = LocalStore(path, sync=False)
    tso2 = TimestampOracle(s)
    assert tso2.issued() >= last
    s.close()


def test_abandoned_lock_expires_on_the_tso_clock_after_a_backward_step(tmp_path, monkeypatch):
    """A crashed writer's lock, written while the clock ran an hour ahead, expires after its TTL
    once the wall clock is set back: its age is measured on the TSO's physical clock, not the
    wall clock (which would keep it alive for the hour)."""
    import coordinator.server.tso as tso_mod
    from kvstore.mvcc.records import LockOp

    real = tso_mod._wall_ms
    monkeypatch.setattr(tso_mod, "_wall_ms", lambda: real() + 3_600_000)  # running an hour ahead
    s = LocalStore(str(tmp_path / "lmdb"), sync=False)
    tso = TimestampOracle(s)
    s.use_clock(tso)
    info = s.create_table("t", "id BIGINT, v BIGINT", ["id"])
    k = info.key_codec.encode({"id": 1})
    start = tso.now()
    s.prewrite([(LockOp.PUT, k, info.row_codec.encode({"id": 1, "v": 1}))], k, start, ttl_ms=100)
    monkeypatch.setattr(tso_mod, "_wall_ms", real)  # the wall clock is set right: back an hour
    deadline = time.monotonic() + 5
    while True:
        try:
            assert s.get(k, tso.now()) is None  # the lock was rolled back: the row never was
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    assert time.monotonic() < deadline
    s.close()
