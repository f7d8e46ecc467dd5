"""Reader leases: a reader's claim that the GC safepoint must not pass its snapshot.

A lease holds one timestamp for a TTL; its holder renews it (and may move it forward, as a
change-feed stream does when it commits an offset). An expired lease stops holding at once and
is swept at the next GC tick; renewing it then fails with ``LeaseNotFound``, because the
safepoint may already have passed it. Leases are durable (``lease/<id>`` in ``meta``), so a
server restart does not free the snapshots its readers hold.

Expiry runs on the TSO's physical clock (never back, like lock TTLs), not the wall clock.
``Leases`` does no locking of its own against the safepoint: the GC manager serialises
``acquire``/``renew`` with its safepoint moves (``coordinator.server.gc``).
"""

from __future__ import annotations

import json
import secrets
import threading
from dataclasses import asdict, dataclass, replace

from coordinator.errors import LeaseNotFound
from coordinator.server.meta import LEASE_PREFIX, check_label, lease_key
from coordinator.server.tso import TimestampOracle
from kvstore.errors import InvalidArgument
from kvstore.group_commit import WriteContext
from kvstore.store import LocalStore

MAX_LEASE_TTL_MS = 7 * 24 * 3600 * 1000  # a week: past that, an abandoned lease is a leak


@dataclass(frozen=True)
class Lease:
    """One reader lease: ``ts`` is held until ``expires_ms`` (the TSO's physical clock)."""

    id: str
    holder: str
    ts: int
    ttl_ms: int
    expires_ms: int
    created_ms: int

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Lease:
        return cls(**json.loads(raw))


class Leases:
    """The leases of one server. Thread-safe for its own state."""

    def __init__(self, store: LocalStore, tso: TimestampOracle) -> None:
        self.store, self.tso = store, tso
        self._mu = threading.Lock()
        with store.storage.read_txn() as r:
            self._leases = {
                k[len(LEASE_PREFIX) :].decode(): Lease.from_json(v)
                for k, v in r.iter_prefix("meta", LEASE_PREFIX)
            }

    @staticmethod
    def _check_ttl(ttl_ms: int) -> None:
        if not 0 < ttl_ms <= MAX_LEASE_TTL_MS:
            raise InvalidArgument(f"lease ttl_ms must be in (0, {MAX_LEASE_TTL_MS}], got {ttl_ms}")

    def _check_ts(self, ts: int) -> None:
        if not 0 < ts <= self.tso.issued():
            raise InvalidArgument(
                f"lease ts {ts} must be a timestamp the TSO has issued (at most {self.tso.issued()})"
            )

    def _persist(self, lease: Lease) -> None:
        self.store.run_write(lambda ctx: ctx.buf.put("meta", lease_key(lease.id), lease.to_json()))

    def acquire(self, holder: str, ts: int, ttl_ms: int) -> Lease:
        """A new lease on ``ts`` for ``ttl_ms``, durable before it is returned. The caller has
        checked that ``ts`` is not below the safepoint."""
        self._check_ttl(ttl_ms)
        self._check_ts(ts)
        check_label("lease", "holder", holder)
        now = self.tso.physical_ms()
        lease = Lease(secrets.token_hex(8), holder or "unnamed", ts, ttl_ms, now + ttl_ms, now)
        self._persist(lease)
        with self._mu:
            self._leases[lease.id] = lease
        return lease

    def get_live(self, lease_id: str) -> Lease:
        """The lease ``lease_id`` if it has not expired; else LeaseNotFound (an expired one is
        forgotten here: it stopped holding when it expired)."""
        now = self.tso.physical_ms()
        with self._mu:
            lease = self._leases.get(lease_id)
        if lease is None:
            raise LeaseNotFound(f"lease {lease_id!r} does not exist (released, or never taken)")
        if lease.expires_ms <= now:
            self.release(lease_id)
            raise LeaseNotFound(
                f"lease {lease_id!r} of {lease.holder!r} on ts {lease.ts} expired "
                f"{now - lease.expires_ms} ms ago and no longer holds the GC safepoint; "
                "renew a lease within its TTL"
            )
        return lease

    def renew(self, lease_id: str, ttl_ms: int, ts: int = 0) -> Lease:
        """Extend a live lease to ``ttl_ms`` from now, moving it to ``ts`` if given (forward
        only). LeaseNotFound if it expired or is unknown."""
        self._check_ttl(ttl_ms)
        lease = self.get_live(lease_id)
        if ts:
            self._check_ts(ts)
            if ts < lease.ts:
                raise InvalidArgument(
                    f"lease {lease_id!r}: ts {ts} is below the ts it holds ({lease.ts}); a "
                    "lease moves forward only (take a new one for an older snapshot)"
                )
        now = self.tso.physical_ms()
        lease = replace(lease, ts=ts or lease.ts, ttl_ms=ttl_ms, expires_ms=now + ttl_ms)
        self._persist(lease)
        with self._mu:
            self._leases[lease_id] = lease
        return lease

    def release(self, lease_id: str) -> bool:
        """Forget a lease (idempotent); whether it existed."""
        with self._mu:
            had = self._leases.pop(lease_id, None) is not None
        if had:
            self.store.run_write(lambda ctx: ctx.buf.delete("meta", lease_key(lease_id)))
        return had

    def live(self) -> list[Lease]:
        """The leases that have not expired, oldest ts first."""
        now = self.tso.physical_ms()
        with self._mu:
            out = [x for x in self._leases.values() if x.expires_ms > now]
        return sorted(out, key=lambda x: (x.ts, x.id))

    def sweep(self) -> int:
        """Forget every expired lease; how many."""
        now = self.tso.physical_ms()
        with self._mu:
            gone = [i for i, x in self._leases.items() if x.expires_ms <= now]
            for i in gone:
                del self._leases[i]
        if gone:

            def act(ctx: WriteContext) -> None:
                for i in gone:
                    ctx.buf.delete("meta", lease_key(i))

            self.store.run_write(act)
        return len(gone)
