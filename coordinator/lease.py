"""A reader lease, held from the client: keeps the GC safepoint at or below a timestamp.

    with client.lease(ts, ttl_s=60, holder="nightly report") as lease:
        client.read("accounts", at=ts)        # safe from GC while the lease is renewed

A ``Lease`` renews itself on a daemon thread every third of its TTL, so it holds for as long as
the process lives and the lease is not released; if the process dies, the server forgets it one
TTL later. ``move_to(ts)`` moves it forward (a change-feed stream that committed an offset).
If a renewal finds the lease gone (the server was unreachable for longer than the TTL, so the
lease expired and stopped holding), the lease is marked ``lost`` and ``check()`` raises
``LeaseNotFound``: its snapshot may have been collected, and reads there may fail with
``SnapshotTooOld`` (never return partial data).

A lease belongs to the process that took it: a child forked from it inherits the object but not
its renewing thread, and the child's ``release()`` (or the end of an inherited ``with`` block)
leaves the lease to the parent instead of releasing it under the parent's reads.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING

from coordinator.errors import LeaseNotFound
from kvstore.errors import SnapviewError
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb

if TYPE_CHECKING:
    from coordinator.client import Client

log = logging.getLogger("snapview.lease")
DEFAULT_LEASE_TTL_S = 60.0


class Lease:
    """A live reader lease (``client.lease``). Thread-safe; a context manager that releases."""

    def __init__(self, client: Client, info: cpb.Lease, renew: bool = True) -> None:
        self.client = client
        self.id: str = info.id
        self.holder: str = info.holder
        self.ts: int = info.ts
        self.ttl_ms: int = info.ttl_ms
        self.expires_ms: int = info.expires_ms
        self.lost: BaseException | None = None
        self.pid = os.getpid()
        """The process that holds the lease (renews and releases it)."""
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if renew:
            self._thread = threading.Thread(
                target=self._renew_loop, name=f"lease-{self.id}", daemon=True
            )
            self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                self.renew()
            except LeaseNotFound as e:
                self.lost = e
                log.warning("reader lease %s of %r was lost: %s", self.id, self.holder, e)
                return
            except SnapviewError as e:  # unreachable for now: the next round tries again
                log.info("renewing reader lease %s failed, will retry: %s", self.id, e)
            except ValueError:  # the client was closed: nobody reads through this lease any more
                return

    def renew(self, ts: int = 0) -> None:
        """Extend the lease by its TTL from now (and move it to ``ts`` if given)."""
        req = cpb.RenewLeaseRequest(id=self.id, ttl_ms=self.ttl_ms, ts=ts)
        with self._mu:
            info = self.client._rpc.unary(self.client._stub.RenewLease, req)
            self.ts, self.expires_ms = info.ts, info.expires_ms

    def move_to(self, ts: int) -> None:
        """Hold ``ts`` instead (forward only): what was below it may be collected."""
        self.check()
        self.renew(ts)

    def check(self) -> None:
        """Raise ``LeaseNotFound`` if a renewal found the lease expired."""
        if self.lost is not None:
            raise LeaseNotFound(str(self.lost))

    def abandon(self) -> None:
        """Stop renewing without telling the server (it may be down): the lease lapses one TTL
        later."""
        self._stop.set()

    def release(self) -> None:
        """Stop renewing and give the lease back (idempotent; never raises for a lost lease). In
        a forked child the lease stays with the process that took it: nothing happens."""
        if self.pid != os.getpid():
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        try:
            self.client.release_lease(self.id)
        except SnapviewError as e:  # it expires by itself one TTL later
            log.info("releasing reader lease %s failed: %s", self.id, e)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease(id={self.id!r}, holder={self.holder!r}, ts={self.ts}, ttl_ms={self.ttl_ms})"
