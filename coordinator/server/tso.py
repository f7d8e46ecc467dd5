"""The timestamp oracle: hybrid physical/logical timestamps, strictly increasing across restarts.

Like PD, it persists a high-water mark a window ahead of the physical time it hands out
(``tso/high_water`` in the meta CF, through the group committer, fsynced). Every timestamp issued
has a physical part below the persisted mark, and after a restart (even kill -9) the oracle starts
at or above the mark, so no timestamp is ever issued twice or goes backwards, even if the wall
clock does.
"""

from __future__ import annotations

import threading
import time

from coordinator.server.meta import TSO_HIGH_WATER
from kvstore.failpoints import fail_point
from kvstore.group_commit import WriteContext
from kvstore.mvcc.timestamp import LOGICAL_MASK, compose
from kvstore.store import LocalStore

WINDOW_MS = 3000


class TimestampOracle:
    def __init__(self, store: LocalStore, window_ms: int = WINDOW_MS) -> None:
        self.store = store
        self.window_ms = window_ms
        self._lock = threading.Lock()
        with store.storage.read_txn() as r:
            raw = r.get("meta", TSO_HIGH_WATER)
        self._high_water = int(raw) if raw else 0
        # Everything issued before the restart had physical < high_water.
        self._physical = max(int(time.time() * 1000), self._high_water)
        self._logical = 0
        self._persist(self._physical + window_ms)

    def _persist(self, high_water: int) -> None:
        def act(ctx: WriteContext) -> None:
            ctx.buf.put("meta", TSO_HIGH_WATER, str(high_water).encode())

        self.store.run_write(act)
        fail_point("tso.window.persisted")
        self._high_water = high_water

    def allocate(self, count: int = 1) -> int:
        """Reserve ``count`` consecutive timestamps; returns the first. Each is greater than every
        timestamp issued before, by this process or any earlier one on the same data dir."""
        if not 1 <= count <= LOGICAL_MASK:
            raise ValueError(f"count must be in [1, {LOGICAL_MASK}]")
        with self._lock:
            now = int(time.time() * 1000)
            if now > self._physical:
                self._physical, self._logical = now, 0
            if self._logical + count > LOGICAL_MASK:
                self._physical += 1
                self._logical = 0
            first = compose(self._physical, self._logical)
            self._logical += count
            # Extend the window before it runs out, and always before issuing past it.
            if self._physical >= self._high_water - self.window_ms // 2:
                self._persist(self._physical + self.window_ms)
            return first

    def try_allocate(self, count: int = 1) -> int | None:
        """``allocate(count)`` if that can be done without waiting, else None: when another
        thread holds the oracle or the window would have to be persisted first (a disk write).
        For an event loop, which must not block; on None it calls ``allocate`` off the loop."""
        if not 1 <= count <= LOGICAL_MASK:
            raise ValueError(f"count must be in [1, {LOGICAL_MASK}]")
        if not self._lock.acquire(blocking=False):
            return None
        try:
            physical, logical = self._physical, self._logical
            now = int(time.time() * 1000)
            if now > physical:
                physical, logical = now, 0
            if logical + count > LOGICAL_MASK:
                physical, logical = physical + 1, 0
            if physical >= self._high_water - self.window_ms // 2:
                return None  # allocate() extends the window before issuing from it
            self._physical, self._logical = physical, logical + count
            return compose(physical, logical)
        finally:
            self._lock.release()

    def now(self) -> int:
        """One fresh timestamp."""
        return self.allocate(1)

    @property
    def high_water_ms(self) -> int:
        return self._high_water
