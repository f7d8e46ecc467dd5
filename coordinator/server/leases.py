"""Reader leases: a reader's claim that the GC safepoint must not pass its snapshot.

A lease holds one timestamp for a TTL; its holder renews it (and may move it forward, as a
change-feed stream does when it commits an offset). An expired lease stops holding at once and
is swept at the next GC tick; renewing it then fails with ``LeaseNotFound``, because the
safepoint may already have passed it. Leases are durable (``lease/<id>`` in ``meta``), so a
server restart does not free the snapshots its readers hold.

Expiry runs on the TSO's physical clock (never back, like lock TTLs), not the wall clock.
``Leases`` does no locking of its own against the safepoint: the GC manager serialises
``acquire``/``renew`` with its safepoint moves (``coordinator.server.gc``).

**Bounds.** A server holds at most ``max_leases`` live leases (``snapview serve --max-leases``,
default 10,000) and one holder at most ``max_per_holder`` (``--max-leases-per-holder``, 1,000);
one more is refused with ``ResourceExhausted`` (RESOURCE_EXHAUSTED) naming the cap and the
holder. A TTL is at most ``MAX_LEASE_TTL_MS`` (24 h): an abandoned lease pins the store for one
TTL, so that is the longest a client that went away can pin it. Leases stored before a cap was
lowered are kept (they lapse by themselves); only new ones are refused.

**Cost.** Nothing here walks every lease for the GC: the leases are indexed by ts and by expiry
in heaps (``heapq``, with lazy deletion: an entry whose lease was released, renewed or moved no
longer matches the lease and is dropped when it reaches the top; the heaps are rebuilt once
stale entries outnumber live ones), so the GC tick finds the oldest lease and the expired ones
in O(log n) each. Listing pages through the ids in order (a sorted list, ``bisect``).
"""

from __future__ import annotations

import bisect
import heapq
import json
import secrets
import threading
from dataclasses import asdict, dataclass, replace

from coordinator.errors import LeaseNotFound
from coordinator.server.meta import LEASE_PREFIX, check_label, lease_key
from coordinator.server.tso import TimestampOracle
from kvstore.errors import InvalidArgument, ResourceExhausted
from kvstore.group_commit import WriteContext
from kvstore.store import LocalStore

MAX_LEASE_TTL_MS = 24 * 3600 * 1000  # a day: the longest an abandoned lease may pin the store
DEFAULT_MAX_LEASES = 10_000
DEFAULT_MAX_LEASES_PER_HOLDER = 1_000
DEFAULT_PAGE_SIZE = 1_000  # leases in one GcStatus answer when the caller names no page size
MAX_PAGE_SIZE = 10_000  # a larger page_size is taken as this one (about 1 MB of answer)


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


@dataclass(frozen=True)
class LeasePage:
    """One page of the live leases in id order: ``count`` is how many match in all, and
    ``next_after`` the id to continue after ('' when this is the last page)."""

    leases: list[Lease]
    count: int
    next_after: str


class Leases:
    """The leases of one server. Thread-safe for its own state."""

    def __init__(
        self,
        store: LocalStore,
        tso: TimestampOracle,
        max_leases: int = DEFAULT_MAX_LEASES,
        max_per_holder: int = DEFAULT_MAX_LEASES_PER_HOLDER,
    ) -> None:
        if max_leases <= 0 or max_per_holder <= 0:
            raise InvalidArgument(
                f"--max-leases ({max_leases}) and --max-leases-per-holder ({max_per_holder}) "
                "must be positive"
            )
        self.store, self.tso = store, tso
        self.max_leases, self.max_per_holder = max_leases, max_per_holder
        self._mu = threading.Lock()
        self._leases: dict[str, Lease] = {}
        self._by_ts: list[tuple[int, str]] = []  # heap; stale entries skipped (module doc)
        self._by_expiry: list[tuple[int, str]] = []  # heap, likewise
        self._ids: list[str] = []  # sorted: the order pages follow
        self._by_holder: dict[str, list[str]] = {}  # holder -> its ids, sorted
        self._expired: list[str] = []  # dropped from memory, records not yet deleted
        with store.storage.read_txn() as r:
            for _, v in r.iter_prefix("meta", LEASE_PREFIX):
                self._index(Lease.from_json(v))

    # ------------------------------------------------------------------ the index (under _mu)

    def _index(self, lease: Lease) -> None:
        """Add ``lease`` (new) to every index."""
        self._leases[lease.id] = lease
        heapq.heappush(self._by_ts, (lease.ts, lease.id))
        heapq.heappush(self._by_expiry, (lease.expires_ms, lease.id))
        bisect.insort(self._ids, lease.id)
        bisect.insort(self._by_holder.setdefault(lease.holder, []), lease.id)

    def _reindex(self, old: Lease, new: Lease) -> None:
        """``old`` became ``new`` (renewed, moved): push what changed; old entries go stale."""
        self._leases[new.id] = new
        if new.ts != old.ts:
            heapq.heappush(self._by_ts, (new.ts, new.id))
        if new.expires_ms != old.expires_ms:
            heapq.heappush(self._by_expiry, (new.expires_ms, new.id))
        self._compact()

    def _unindex(self, lease_id: str) -> Lease | None:
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return None
        for ids in (self._ids, self._by_holder[lease.holder]):
            del ids[bisect.bisect_left(ids, lease_id)]
        if not self._by_holder[lease.holder]:
            del self._by_holder[lease.holder]
        self._compact()
        return lease

    def _compact(self) -> None:
        """Rebuild a heap once its stale entries outnumber the leases: amortised O(1)."""
        limit = 2 * len(self._leases) + 64
        if len(self._by_ts) > limit:
            self._by_ts = [(x.ts, x.id) for x in self._leases.values()]
            heapq.heapify(self._by_ts)
        if len(self._by_expiry) > limit:
            self._by_expiry = [(x.expires_ms, x.id) for x in self._leases.values()]
            heapq.heapify(self._by_expiry)

    def _top(self, heap: list[tuple[int, str]], field: str) -> Lease | None:
        """The lease at the top of ``heap`` (by ``field``), dropping stale entries on the way."""
        while heap:
            value, lease_id = heap[0]
            lease = self._leases.get(lease_id)
            if lease is not None and getattr(lease, field) == value:
                return lease
            heapq.heappop(heap)
        return None

    def _expire(self, now: int) -> None:
        """Drop every lease expired at ``now`` from memory; ``sweep`` deletes their records
        (never a write here: the safepoint guard calls this on the way to a write)."""
        while (x := self._top(self._by_expiry, "expires_ms")) is not None and x.expires_ms <= now:
            heapq.heappop(self._by_expiry)
            self._unindex(x.id)
            self._expired.append(x.id)

    # ------------------------------------------------------------------ checks

    @staticmethod
    def _check_ttl(ttl_ms: int) -> None:
        if not 0 < ttl_ms <= MAX_LEASE_TTL_MS:
            raise InvalidArgument(
                f"lease ttl_ms must be in (0, {MAX_LEASE_TTL_MS}] (at most 24 h: an abandoned "
                f"lease pins the store for one TTL), got {ttl_ms}"
            )

    def _check_ts(self, ts: int) -> None:
        if not 0 < ts <= self.tso.issued():
            raise InvalidArgument(
                f"lease ts {ts} must be a timestamp the TSO has issued (at most {self.tso.issued()})"
            )

    def _check_caps(self, holder: str) -> None:
        """ResourceExhausted if one more lease would pass a cap (under _mu, expired dropped)."""
        if len(self._leases) >= self.max_leases:
            raise ResourceExhausted(
                f"lease for {holder!r}: the server holds {len(self._leases)} live leases, its cap "
                f"(snapview serve --max-leases {self.max_leases}); release leases no longer "
                "needed (snapview leases release ID)"
            )
        mine = len(self._by_holder.get(holder, ()))
        if mine >= self.max_per_holder:
            raise ResourceExhausted(
                f"lease for {holder!r}: that holder has {mine} live leases, the cap per holder "
                f"(snapview serve --max-leases-per-holder {self.max_per_holder}); release its "
                "leases no longer needed"
            )

    # ------------------------------------------------------------------ operations

    def _persist(self, lease: Lease) -> None:
        self.store.run_write(lambda ctx: ctx.buf.put("meta", lease_key(lease.id), lease.to_json()))

    def _delete(self, ids: list[str]) -> None:
        if ids:

            def act(ctx: WriteContext) -> None:
                for i in ids:
                    ctx.buf.delete("meta", lease_key(i))

            self.store.run_write(act)

    def acquire(self, holder: str, ts: int, ttl_ms: int) -> Lease:
        """A new lease on ``ts`` for ``ttl_ms``, durable before it is returned. The caller has
        checked that ``ts`` is not below the safepoint. ResourceExhausted past a cap."""
        self._check_ttl(ttl_ms)
        self._check_ts(ts)
        check_label("lease", "holder", holder)
        holder = holder or "unnamed"
        now = self.tso.physical_ms()
        lease = Lease(secrets.token_hex(8), holder, ts, ttl_ms, now + ttl_ms, now)
        with self._mu:  # checked and counted at once: concurrent acquires cannot pass a cap
            self._expire(now)
            self._check_caps(holder)
            self._index(lease)
        try:
            self._persist(lease)
        except BaseException:
            with self._mu:
                self._unindex(lease.id)
            raise
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
        new = replace(lease, ts=ts or lease.ts, ttl_ms=ttl_ms, expires_ms=now + ttl_ms)
        self._persist(new)
        with self._mu:
            old = self._leases.get(lease_id)
            if old is None:  # released meanwhile: the release wins
                self._delete([lease_id])
                raise LeaseNotFound(f"lease {lease_id!r} was released while it was renewed")
            self._reindex(old, new)
        return new

    def release(self, lease_id: str) -> bool:
        """Forget a lease (idempotent); whether it existed."""
        with self._mu:
            had = self._unindex(lease_id) is not None
        if had:
            self._delete([lease_id])
        return had

    def sweep(self) -> int:
        """Forget every expired lease; how many. O(k log n) for k expired of n."""
        with self._mu:
            self._expire(self.tso.physical_ms())
            gone, self._expired = self._expired, []
        self._delete(gone)
        return len(gone)

    def oldest(self) -> tuple[Lease | None, int]:
        """The live lease with the oldest ts (None: no lease) and how many leases are live:
        O(log n) (and O(log n) per expired lease dropped), not a walk of the leases."""
        now = self.tso.physical_ms()
        with self._mu:
            self._expire(now)
            return self._top(self._by_ts, "ts"), len(self._leases)

    def page(self, after: str = "", size: int = DEFAULT_PAGE_SIZE, holder: str = "") -> LeasePage:
        """Up to ``size`` (at most MAX_PAGE_SIZE) live leases with ids above ``after``, in id
        order, of ``holder`` only if given. Paging from '' to the end returns every lease that
        lived throughout exactly once."""
        size = min(size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        now = self.tso.physical_ms()
        with self._mu:
            self._expire(now)
            ids = self._by_holder.get(holder, []) if holder else self._ids
            i = bisect.bisect_right(ids, after) if after else 0
            chosen = ids[i : i + size]
            leases = [self._leases[x] for x in chosen]
            more = i + size < len(ids)
            return LeasePage(leases, len(ids), chosen[-1] if more and chosen else "")
