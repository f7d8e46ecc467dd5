"""The batching TSO client: concurrent requests in one process share one Tso RPC.

A background thread takes every request waiting when the previous RPC returns and asks for that
many timestamps at once (PD's client does the same). A timestamp is always obtained by an RPC
that started after it was requested, so a caller never gets a timestamp older than one of a
commit it has already seen: batching keeps the oracle linearizable.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Protocol

import grpc

from snapview_proto.snapview.v1 import coordinator_pb2 as cpb


class _Slot:
    __slots__ = ("event", "value", "error")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.value = 0
        self.error: BaseException | None = None


class TsoBatcher:
    """``get()`` returns one fresh timestamp; ``fetch(n)`` must return the first of n."""

    def __init__(self, fetch: Callable[[int], int], max_batch: int = 10_000) -> None:
        self._fetch = fetch
        self._max_batch = max_batch
        self._cond = threading.Condition()
        self._pending: list[_Slot] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        self.rpcs = 0

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="tso-batcher", daemon=True)
            self._thread.start()

    def get(self) -> int:
        slot = _Slot()
        with self._cond:
            if self._closed:
                raise RuntimeError("client is closed")
            self._ensure_thread()
            self._pending.append(slot)
            self._cond.notify()
        slot.event.wait()
        if slot.error is not None:
            raise slot.error
        return slot.value

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
            try:
                first = self._fetch(len(batch))
                self.rpcs += 1
            except BaseException as e:  # noqa: BLE001 - every waiter learns the failure
                for s in batch:
                    s.error = e
                    s.event.set()
                continue
            for i, s in enumerate(batch):
                s.value = first + i
                s.event.set()


class TsoResponses(Protocol):
    """The responses of an open TsoStream call (a gRPC call iterator)."""

    def __next__(self) -> cpb.TsoResponse: ...

    def cancel(self) -> bool: ...


# How long a fork waits for gRPC to finish a paused TSO stream (see prepare_fork).
FORK_PAUSE_WAIT_S = 0.5
_STREAMS: weakref.WeakSet[TsoStreamFetcher] = weakref.WeakSet()


class TsoStreamFetcher:
    """``fetch(n)`` over one long-lived TsoStream call (PD's way: no per-call set-up), falling
    back to the unary Tso RPC with its retries when the stream breaks; the next fetch opens a
    new stream. Used by one thread at a time (the batcher's), and paused (closed) by a fork.

    ``idle()`` says whether the channel has no streaming call in progress any more; a fork waits
    for it after closing the stream (below)."""

    def __init__(
        self,
        open_stream: Callable[[Iterator[cpb.TsoRequest]], TsoResponses],
        unary_fetch: Callable[[int], int],
        request_cls: type[cpb.TsoRequest],
        idle: Callable[[], bool] = lambda: True,
    ) -> None:
        self._open_stream = open_stream
        self._unary_fetch = unary_fetch
        self._request_cls = request_cls
        self._idle = idle
        self._pid = os.getpid()
        self._mu = threading.Lock()  # the stream's opening and closing (fetch and a fork's pause)
        self._queue: queue.SimpleQueue[cpb.TsoRequest | None] | None = None  # None ends it
        self._responses: TsoResponses | None = None
        _STREAMS.add(self)

    def _requests(self, q: queue.SimpleQueue[cpb.TsoRequest | None]) -> Iterator[cpb.TsoRequest]:
        while True:
            item = q.get()
            if item is None:
                return
            yield item

    def fetch(self, count: int) -> int:
        try:
            with self._mu:
                q, responses = self._queue, self._responses
                if q is None or responses is None:  # (both are set, or neither)
                    q = self._queue = queue.SimpleQueue()
                    responses = self._responses = self._open_stream(self._requests(q))
                q.put(self._request_cls(count=count))
            return next(responses).first
        except (grpc.RpcError, StopIteration):  # broken, or cancelled by a fork's pause
            self.close()
            return self._unary_fetch(count)

    def close(self) -> bool:
        """End the stream (the next fetch opens a new one); whether one was open."""
        with self._mu:
            return self._close()

    def _close(self) -> bool:
        was_open = self._responses is not None
        if self._queue is not None:
            self._queue.put(None)
        if self._responses is not None:
            self._responses.cancel()
        self._queue = self._responses = None
        return was_open

    def pause_for_fork(self, deadline: float) -> None:
        """Close the stream and wait (until ``deadline``, monotonic) for gRPC to finish it."""
        if self._pid != os.getpid():  # a parent's, inherited: not ours to touch
            return
        if not self._mu.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return
        try:
            was_open = self._close()
        finally:
            self._mu.release()
        while was_open and not self._idle() and time.monotonic() < deadline:
            time.sleep(0.001)


def prepare_fork() -> None:
    """Before a fork: close every TSO stream of this process (they reopen on their next use),
    so that no thread of ours is inside gRPC's core when the child is made.

    An open stream keeps a gRPC thread polling in the core. gRPC's own fork handlers then give
    up ("fork_posix.cc ... Other threads are currently calling into gRPC, skipping fork()
    handlers"), and a child that then opens a channel can abort inside gRPC ("Check failed:
    g_active_poller", ev_epoll1_linux.cc): the lifecycle walk's fork step hit it under load.
    So this module registers this function with ``os.register_at_fork`` (below): the one
    process-wide hook snapview installs, documented in docs/design.md §5.7. It acts on this
    module's own streams only, costs nothing in a process without an open stream, and waits at
    most FORK_PAUSE_WAIT_S for gRPC to finish a stream it closed."""
    deadline = time.monotonic() + FORK_PAUSE_WAIT_S
    for stream in list(_STREAMS):
        stream.pause_for_fork(deadline)


# The one fork hook snapview installs (see prepare_fork): without it a child forked while a TSO
# stream is open can abort inside gRPC's core.
os.register_at_fork(before=prepare_fork)
