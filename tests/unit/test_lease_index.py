"""The GC tick's cost does not grow with the reader leases (issue 25, item 3): at 55k leases a
tick used to sort every lease (twice: the leases, then the holds) under the lock that lease
calls need. Structural check, not a timing: the leases' timestamps count their comparisons, and
a tick over 100k leases may make only a handful (O(log n)), where sorting makes millions."""

from __future__ import annotations

import json

import pytest

from coordinator.server.barriers import Barriers
from coordinator.server.core import Core
from coordinator.server.gc import GcManager
from coordinator.server.leases import Lease
from coordinator.server.meta import lease_key
from coordinator.server.registry import Registry
from coordinator.server.tso import TimestampOracle
from kvstore.store import LocalStore

N = 100_000
COMPARISONS = [0]


class CountingTs(int):
    """A timestamp that counts the comparisons made of it."""

    def _count(self, op, other):
        COMPARISONS[0] += 1
        return op(int(self), int(other))

    def __lt__(self, other):
        return self._count(int.__lt__, other)

    def __le__(self, other):
        return self._count(int.__le__, other)

    def __gt__(self, other):
        return self._count(int.__gt__, other)

    def __ge__(self, other):
        return self._count(int.__ge__, other)

    def __eq__(self, other):
        return self._count(int.__eq__, other)

    __hash__ = int.__hash__


@pytest.fixture
def gc_with_leases(tmp_path, monkeypatch):
    """A GC manager loading N durable leases (written straight into ``meta``), every ts a
    CountingTs."""
    store = LocalStore(str(tmp_path / "lmdb"), sync=False)
    tso = TimestampOracle(store)
    store.use_clock(tso)
    base = tso.allocate(N)
    expires = tso.physical_ms() + 3_600_000
    for lo in range(0, N, 10_000):
        recs = [
            Lease(f"{i:016x}", f"holder {i % 97}", base + (i * 7919) % N, 3_600_000, expires, 0)
            for i in range(lo, lo + 10_000)
        ]

        def put(ctx, recs=recs):
            for x in recs:
                ctx.buf.put("meta", lease_key(x.id), x.to_json())

        store.run_write(put)

    def counting(cls, raw):
        fields = json.loads(raw)
        return cls(**{**fields, "ts": CountingTs(fields["ts"])})

    monkeypatch.setattr(Lease, "from_json", classmethod(counting))
    registry = Registry(store)
    barriers = Barriers(store, tso, registry, 1.0)
    gc = GcManager(Core(store, tso, registry, barriers), retention_s=3600, interval_s=0)
    try:
        yield gc, base
    finally:
        store.close()


def test_a_tick_does_not_sort_the_leases(gc_with_leases):
    gc, base = gc_with_leases
    COMPARISONS[0] = 0
    gc.tick()
    holds = gc.holds()
    assert COMPARISONS[0] < 200, f"a tick over {N} leases made {COMPARISONS[0]} comparisons"
    lease_holds = [h for h in holds if h.kind == "lease"]
    assert [h.ts for h in lease_holds] == [base]  # the oldest binds; the rest are counted
    assert f"{N - 1} younger" in lease_holds[0].name
