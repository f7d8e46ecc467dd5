"""The timestamp oracle: hybrid physical/logical timestamps, strictly increasing across restarts.

Like PD, it persists a high-water mark a window ahead of the physical time it hands out
(``tso/high_water`` in the meta CF, through the group committer, fsynced). Every timestamp issued
has a physical part below the persisted mark, and after a restart (even kill -9) the oracle starts
at or above the mark, so no timestamp is ever issued twice or goes backwards, even if the wall
clock does.

The physical part follows the wall clock forward but never back: it advances at least at the
pace of the monotonic clock, so while the wall clock is stepped back it keeps moving (lock TTLs,
measured on it, keep expiring; see kvstore.clock) and it rejoins the wall clock once the wall
clock catches up.

When extending the window fails (a full disk), timestamps inside the window already persisted are
still issued, so reads at latest keep working; only past the persisted mark does ``allocate``
fail, with the store's error.
"""

from __future__ import annotations

import logging
import threading
import time

from coordinator.server.meta import TSO_HIGH_WATER
from kvstore.failpoints import fail_point
from kvstore.group_commit import WriteContext
from kvstore.mvcc.timestamp import LOGICAL_MASK, compose
from kvstore.store import LocalStore

WINDOW_MS = 3000
log = logging.getLogger("snapview.tso")


def _wall_ms() -> int:
    return int(time.time() * 1000)


class TimestampOracle:
    """Implements ``kvstore.clock.TsoClock`` for the store it persists into."""

    def __init__(self, store: LocalStore, window_ms: int = WINDOW_MS) -> None:
        self.store = store
        self.window_ms = window_ms
        self._lock = threading.Lock()
        with store.storage.read_txn() as r:
            raw = r.get("meta", TSO_HIGH_WATER)
        self._high_water = int(raw) if raw else 0
        # Everything issued before the restart had physical < high_water.
        self._physical = max(_wall_ms(), self._high_water)
        self._mono = time.monotonic()
        self._logical = 0
        self._issued = compose(self._high_water, 0)
        self.issued_count = 0  # timestamps handed out by this process (snapview_tso_...)
        self._persist(self._physical + window_ms)

    def _persist(self, high_water: int) -> None:
        def act(ctx: WriteContext) -> None:
            ctx.buf.put("meta", TSO_HIGH_WATER, str(high_water).encode())

        self.store.run_write(act)
        fail_point("tso.window.persisted")
        self._high_water = high_water

    def _advance(self) -> None:
        """Move the physical part to max(wall clock, last value + monotonic time since). Caller
        holds the lock."""
        mono = time.monotonic()
        paced = self._physical + int((mono - self._mono) * 1000)
        now = max(_wall_ms(), paced)
        if now > self._physical:
            self._physical, self._logical = now, 0
            self._mono = mono

    def allocate(self, count: int = 1) -> int:
        """Reserve ``count`` consecutive timestamps; returns the first. Each is greater than every
        timestamp issued before, by this process or any earlier one on the same data dir."""
        if not 1 <= count <= LOGICAL_MASK:
            raise ValueError(f"count must be in [1, {LOGICAL_MASK}]")
        with self._lock:
            # Extend the window before it runs out, and always before issuing past it.
            if self._advance_for(count):
                try:
                    self._persist(self._physical + self.window_ms)
                except Exception:
                    if self._physical >= self._high_water:
                        raise
                    log.warning("cannot extend the TSO window; issuing inside the persisted one")
            return self._issue(count)

    def try_allocate(self, count: int = 1) -> int | None:
        """``allocate(count)`` if that can be done without waiting, else None: when another
        thread holds the oracle or the window would have to be persisted first (a disk write).
        For an event loop, which must not block; on None it calls ``allocate`` off the loop."""
        if not 1 <= count <= LOGICAL_MASK:
            raise ValueError(f"count must be in [1, {LOGICAL_MASK}]")
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._advance_for(count):
                return None  # allocate() extends the window before issuing from it
            return self._issue(count)
        finally:
            self._lock.release()

    def _advance_for(self, count: int) -> bool:
        """Advance the clock so that ``count`` timestamps fit at the current physical time;
        whether the window must be extended before they are issued. Caller holds the lock."""
        self._advance()
        if self._logical + count > LOGICAL_MASK:
            self._physical += 1
            self._logical = 0
        return self._physical >= self._high_water - self.window_ms // 2

    def _issue(self, count: int) -> int:
        """Hand out ``count`` timestamps at the current physical time. Caller holds the lock."""
        first = compose(self._physical, self._logical)
        self._logical += count
        self.issued_count += count
        self._issued = max(self._issued, first + count - 1)
        return first

    def now(self) -> int:
        """One fresh timestamp."""
        return self.allocate(1)

    __call__ = now

    def issued(self) -> int:
        """An upper bound on every timestamp issued so far, before a restart included."""
        return self._issued

    def physical_ms(self) -> int:
        """The TSO's physical clock in ms (never goes back; see the module docstring)."""
        with self._lock:
            self._advance()
            return self._physical

    @property
    def high_water_ms(self) -> int:
        return self._high_water
