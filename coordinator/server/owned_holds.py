"""Holds with an owner: the one rule for anything a client pins on the server.

A client that opens something the server must keep for it (an open epoch, which holds the GC
safepoint and its primary lock; a correction set, whose epoch is one) **owns** it, and the hold
lasts one TTL after the owner last renewed it, on the TSO's physical clock (which never goes
back, like lock TTLs). Once it lapses it stops holding at once, and whoever finds it lapsed
settles it (an epoch: through its primary, ``EpochManager.settle_lapsed``). So a client that goes
away without a word (stopped, killed with -9, partitioned) pins nothing for longer than the TTL.

The TTL is the larger of the server's (``snapview serve --epoch-ttl``, ``DEFAULT_HOLD_TTL_S``)
and the one the owner asked for (an epoch's lock TTL): a server TTL never cuts a hold shorter
than the lock its owner renews, and the server's is the grace a late heartbeat still finds.

Renewals live in memory: after a restart every hold counts as renewed when the server started,
so its owner gets one full TTL to come back. (Reader leases, ``coordinator.server.leases``,
follow the same rule with a durable record, because a lease has no other one.)
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from coordinator.server.tso import TimestampOracle
from kvstore.errors import InvalidArgument

DEFAULT_HOLD_TTL_S = 60.0  # a sink's or view's epoch heartbeats every ~7 s (its 20 s lock TTL / 3)

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class OwnedHold:
    """One hold: ``owner`` renewed it at ``renewed_ms`` (TSO physical ms) for ``ttl_ms``."""

    owner: str
    ttl_ms: int
    renewed_ms: int

    @property
    def expires_ms(self) -> int:
        return self.renewed_ms + self.ttl_ms

    def lapsed(self, now_ms: int) -> bool:
        """Whether the hold has run out at ``now_ms`` (it holds nothing from then on)."""
        return self.expires_ms <= now_ms


class OwnedHolds(Generic[K]):
    """The renewals of the holds of one kind, by key. Thread-safe."""

    def __init__(self, tso: TimestampOracle, ttl_ms: int) -> None:
        if ttl_ms <= 0:
            raise InvalidArgument(f"a hold TTL (--epoch-ttl) must be positive, got {ttl_ms} ms")
        self.tso, self.ttl_ms = tso, ttl_ms
        self._started_ms = tso.physical_ms()  # what a hold not renewed since the start counts
        self._mu = threading.Lock()
        self._holds: dict[K, OwnedHold] = {}

    def renew(self, key: K, owner: str = "", ttl_ms: int = 0) -> OwnedHold:
        """Renew ``key``'s hold from now, for max(the server's TTL, ``ttl_ms``)."""
        hold = OwnedHold(owner, max(self.ttl_ms, ttl_ms), self.tso.physical_ms())
        with self._mu:
            self._holds[key] = hold
        return hold

    def get(self, key: K) -> OwnedHold:
        """``key``'s hold; one never renewed here counts as renewed when the server started."""
        with self._mu:
            hold = self._holds.get(key)
        return hold if hold is not None else OwnedHold("", self.ttl_ms, self._started_ms)

    def lapsed(self, key: K) -> bool:
        """Whether ``key``'s hold has run out now."""
        return self.get(key).lapsed(self.tso.physical_ms())

    def forget(self, key: K) -> None:
        """The thing held ended (committed, aborted, settled): drop its renewal (idempotent)."""
        with self._mu:
            self._holds.pop(key, None)

    def retain(self, keys: set[K]) -> None:
        """Drop the renewals of everything not in ``keys`` (ended some way not told here)."""
        with self._mu:
            for k in [k for k in self._holds if k not in keys]:
                del self._holds[k]
