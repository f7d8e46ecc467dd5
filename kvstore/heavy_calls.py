"""A bound on the calls that read a whole change at once (kvstore.limits describes the others).

A change scan (``ScanChanges``) or a dry-run rollback reads every changed key of an interval;
each one streams in bounded chunks (LocalStore.scan_changes_chunks), but each still holds a
window of keys, a chunk of images and a worker thread of the server's pool for as long as it
runs. ``HeavyCalls`` lets at most ``limit`` of them run at once: a further call waits up to
``wait_s`` for one to end, then is refused with ``ServerBusy`` (RESOURCE_EXHAUSTED naming the
limit), which clients retry with backoff. A view job's epoch reads its sources with
ScanChanges, so the refusal must be retryable, never final.

The hold's owner is the call: it ends when the call returns, fails or is cancelled (a
streamed call's generator is closed when its client goes away or its deadline passes).

**Turns.** The server's Python work runs under one GIL, so heavy calls streaming at once gain
no throughput from computing at once: they only give every light call (a lease, a one-row
commit, a heartbeat) more CPU-bound threads to wait behind at each GIL hand-over. ``in_turns``
makes them take turns, first come first served, for each chunk they compute: at any moment at
most one heavy call computes, and light calls share the GIL with that one alone. (Measured with
scripts/soak_bounds.py, docs/performance.md "Bounds soak".)
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from kvstore.errors import InvalidArgument, ServerBusy

DEFAULT_MAX_HEAVY_CALLS = 4
# Long enough for a call that is just finishing to hand its slot over; short enough that a
# waiting call does not keep a thread of the server's pool for long (it retries instead).
HEAVY_CALL_WAIT_S = 1.0

T = TypeVar("T")


class _Turns:
    """A first-come-first-served turn (a ticket lock): a thread that ends its turn and asks for
    the next one queues behind those already waiting, which a plain lock does not promise."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._issued = 0
        self._serving = 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        with self._cv:
            ticket = self._issued
            self._issued += 1
            while self._serving != ticket:
                self._cv.wait()
        try:
            yield
        finally:
            with self._cv:
                self._serving += 1
                self._cv.notify_all()


class HeavyCalls:
    """At most ``limit`` heavy calls at a time (see the module)."""

    def __init__(
        self, limit: int = DEFAULT_MAX_HEAVY_CALLS, wait_s: float = HEAVY_CALL_WAIT_S
    ) -> None:
        if limit < 1:
            raise InvalidArgument(f"--max-heavy-calls must be at least 1, got {limit}")
        self.limit = limit
        self.wait_s = wait_s
        self._slots = threading.BoundedSemaphore(limit)
        self._turns = _Turns()
        self._mu = threading.Lock()
        self.running = 0
        self.refused = 0

    @contextmanager
    def hold(self, what: str) -> Iterator[None]:
        """Run the block as one heavy call ``what``; raises ServerBusy if all ``limit`` slots
        stay taken for ``wait_s``."""
        if not self._slots.acquire(timeout=self.wait_s):
            with self._mu:
                self.refused += 1
            raise ServerBusy(
                f"{what}: the server is running {self.limit} heavy calls (change scans and "
                f"dry-run rollbacks), its limit (serve --max-heavy-calls {self.limit}); none "
                f"ended within {self.wait_s:g}s. Retry later"
            )
        with self._mu:
            self.running += 1
        try:
            yield
        finally:
            with self._mu:
                self.running -= 1
            self._slots.release()

    def in_turns(self, items: Iterable[T]) -> Iterator[T]:
        """``items``, each one computed in this server's heavy-call turn (see the module): the
        caller's work between two items (sending one) is outside it."""
        it = iter(items)
        while True:
            with self._turns.turn():
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item
