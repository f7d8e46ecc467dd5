"""Group commit: one writer thread runs queued write actions in shared LMDB transactions.

Each action is a function ``fn(ctx) -> result`` over a ``WriteContext``: it reads through
``ctx.reader`` and writes through ``ctx.buf``, both bound to a nested LMDB transaction of its own
(so it sees its own writes and every earlier action of the group). If it returns, the nested
transaction commits into the group's; if it raises, it is aborted and the exception goes to its
caller alone. So every action is atomic on its
own, actions are serialised in queue order, and a whole group costs one LMDB commit (one fsync).

Nobody waits artificially: while the writer commits one group, new requests queue up, and the
next group takes all of them (up to ``max_group`` actions and ``max_group_cost`` mutations, so
one group's work, and so any request's wait for it, stays bounded; see kvstore.limits).

A group that cannot be written because the filesystem is full fails as a whole: every caller of
the group gets the same DiskFull (RESOURCE_EXHAUSTED, naming the data dir), nothing of the group
is applied, and the writer goes on with the next group, so the store works again once space is
freed. A damaged LMDB tree met by an action is DataLoss for that action's caller.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import lmdb

from kvstore.collector_pause import collector_paused
from kvstore.limits import MAX_GROUP_MUTATIONS
from kvstore.storage import DAMAGED_TREE, Reader, Storage, WriteBuffer


@dataclass
class WriteContext:
    reader: Reader
    buf: WriteBuffer


T = TypeVar("T")
# Upper bounds of the group-size buckets (actions per group) that ``group_sizes`` counts in; the
# last count is for groups larger than every bound (snapview_store_group_commit_actions).
GROUP_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
Action = Callable[[WriteContext], Any]


class GroupCommitter:
    def __init__(
        self, storage: Storage, max_group: int = 512, max_group_cost: int = MAX_GROUP_MUTATIONS
    ) -> None:
        self.storage = storage
        self.max_group = max_group
        self.max_group_cost = max_group_cost
        self._queue: deque[tuple[Action, Future[Any]]] = deque()
        self._costs: deque[int] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self.groups = 0
        self.actions = 0
        # Groups committed, by size: group_sizes[i] counts those of at most GROUP_SIZE_BUCKETS[i]
        # actions (and more than the bound before); the last entry, larger ones.
        self.group_sizes = [0] * (len(GROUP_SIZE_BUCKETS) + 1)
        self._thread = threading.Thread(target=self._loop, name="group-commit", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[WriteContext], T], cost: int = 1) -> Future[T]:
        """Queue ``fn``; ``cost`` is its size in mutations (a group takes actions up to
        ``max_group_cost`` of them, so a small action never waits behind an unbounded group)."""
        fut: Future[T] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("store is closed")
            self._queue.append((fn, fut))
            self._costs.append(max(cost, 1))
            self._cond.notify()
        return fut

    def run(self, fn: Callable[[WriteContext], T], cost: int = 1) -> T:
        """Run ``fn`` in the next group and return its result once that group is durable."""
        return self.submit(fn, cost).result()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                group = [self._queue.popleft()]
                spent = self._costs.popleft()
                while (
                    self._queue
                    and len(group) < self.max_group
                    and spent + self._costs[0] <= self.max_group_cost
                ):
                    group.append(self._queue.popleft())
                    spent += self._costs.popleft()
            # A large action (an epoch's commit) builds tens of thousands of acyclic tuples.
            with collector_paused():
                self._commit_group(group)

    def _commit_group(self, group: list[tuple[Action, Future[Any]]]) -> None:
        while True:
            outcomes: list[tuple[bool, Any]] = []
            try:
                txn = self.storage.begin_write()
                try:
                    for fn, _ in group:
                        child = self.storage.env.begin(write=True, parent=txn)
                        ctx = WriteContext(
                            Reader(self.storage, child), WriteBuffer(child, self.storage.cf)
                        )
                        try:
                            result = fn(ctx)
                        except lmdb.MapFullError:
                            child.abort()
                            raise
                        except BaseException as e:  # noqa: BLE001 - handed to its own caller
                            child.abort()
                            if self.storage.resource_error(e) is not None:
                                raise  # the group's transaction is spoilt: all callers learn
                            if isinstance(e, DAMAGED_TREE):
                                e = self.storage.tree_damaged(e)
                            outcomes.append((False, e))
                            continue
                        child.commit()
                        outcomes.append((True, result))
                    txn.commit()
                except BaseException:
                    txn.abort()
                    raise
            except lmdb.MapFullError:
                # Re-run the whole group after growing: actions are deterministic over the state.
                try:
                    self.storage.grow()
                except BaseException as e:  # noqa: BLE001 - the map cannot grow: all callers learn
                    self._fail(group, e)
                    return
                continue
            except BaseException as e:  # noqa: BLE001 - the commit itself failed: all callers learn
                self._fail(group, e)
                return
            break
        self.groups += 1
        self.actions += len(group)
        self.group_sizes[bisect.bisect_left(GROUP_SIZE_BUCKETS, len(group))] += 1
        self._answer(group, outcomes)

    def _fail(self, group: list[tuple[Action, Future[Any]]], exc: BaseException) -> None:
        """The group's transaction failed: every caller gets the same error (DiskFull when the
        filesystem is full), and the writer goes on with the next group."""
        err: BaseException = self.storage.resource_error(exc) or exc
        if isinstance(exc, DAMAGED_TREE):
            err = self.storage.tree_damaged(exc)
        for _, fut in group:
            fut.set_exception(err)

    @staticmethod
    def _answer(group: list[tuple[Action, Future[Any]]], outcomes: list[tuple[bool, Any]]) -> None:
        for (_, fut), (ok, value) in zip(group, outcomes, strict=True):
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)
