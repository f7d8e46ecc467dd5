"""The batching TSO client: concurrent requests in one process share one Tso RPC.

A background thread takes every request waiting when the previous RPC returns and asks for that
many timestamps at once (PD's client does the same). A timestamp is always obtained by an RPC
that started after it was requested, so a caller never gets a timestamp older than one of a
commit it has already seen: batching keeps the oracle linearizable.
"""

from __future__ import annotations

import queue
import threading
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


class TsoStreamFetcher:
    """``fetch(n)`` over one long-lived TsoStream call (PD's way: no per-call set-up), falling
    back to the unary Tso RPC with its retries when the stream breaks; the next fetch opens a
    new stream. Used by one thread at a time (the batcher's)."""

    def __init__(
        self,
        open_stream: Callable[[Iterator[cpb.TsoRequest]], TsoResponses],
        unary_fetch: Callable[[int], int],
        request_cls: type[cpb.TsoRequest],
    ) -> None:
        self._open_stream = open_stream
        self._unary_fetch = unary_fetch
        self._request_cls = request_cls
        self._queue: queue.SimpleQueue[cpb.TsoRequest | None] | None = None  # None ends it
        self._responses: TsoResponses | None = None

    def _requests(self, q: queue.SimpleQueue[cpb.TsoRequest | None]) -> Iterator[cpb.TsoRequest]:
        while True:
            item = q.get()
            if item is None:
                return
            yield item

    def fetch(self, count: int) -> int:
        try:
            q, responses = self._queue, self._responses
            if q is None or responses is None:  # (both are set, or neither)
                q = self._queue = queue.SimpleQueue()
                responses = self._responses = self._open_stream(self._requests(q))
            q.put(self._request_cls(count=count))
            return next(responses).first
        except (grpc.RpcError, StopIteration):
            self.close()
            return self._unary_fetch(count)

    def close(self) -> None:
        if self._queue is not None:
            self._queue.put(None)
        if self._responses is not None:
            self._responses.cancel()
        self._queue = self._responses = None
