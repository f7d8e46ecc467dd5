"""The store's view of time: where fresh timestamps come from and how old a lock is.

A store inside ``snapview serve`` runs on the TSO (``coordinator.server.tso.TimestampOracle``
implements ``TsoClock``). Then two guarantees hold that a bare store cannot give:

* **No timestamp from the future.** A commit_ts, start_ts or GC safepoint above ``issued()`` did
  not come from the TSO; taking it would make a row invisible or stop every writer (issue 11).
* **Lock age on one clock that never goes back.** A lock's age is ``physical_ms()`` minus the
  physical part of its start_ts. Both come from the TSO, whose physical part never goes back and
  advances at the pace of the monotonic clock even while the wall clock is stepped back, so an
  abandoned lock expires after its TTL whatever the wall clock did.

A bare store (tests, benchmarks) may be given any ``() -> int`` timestamp source; it then checks
no upper bound and measures lock age on the wall clock.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class TsoClock(Protocol):
    """A timestamp source that knows what it has handed out."""

    def __call__(self) -> int:
        """One fresh timestamp, greater than every one issued before."""
        ...

    def issued(self) -> int:
        """An upper bound on every timestamp issued so far (by this process or an earlier one
        on the same data dir); it never decreases."""
        ...

    def physical_ms(self) -> int:
        """Milliseconds on the TSO's physical clock: never goes back; advances at least at the
        pace of the monotonic clock."""
        ...


def wall_ms() -> int:
    """The wall clock in ms: what a bare store ages locks on."""
    return int(time.time() * 1000)
