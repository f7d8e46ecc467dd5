"""The TinyKV / TiKV test vocabulary over a real LocalStore (real LMDB, no mocks).

``Kv`` speaks in small integer keys (``must_prewrite_put``, ``must_commit``, ``must_locked``,
``must_written`` ...) and ``must_err`` expects an error. It lives in the package, not under
``tests/``, for the reason TiKV exports its ``must_*`` helpers: whatever engine stands behind the
store's interface one day is held to the same scenarios, written in the same words. It depends on
nothing but the store (no test framework), and nothing in production imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kvstore import actions
from kvstore.mvcc import Lock, LockOp, Write, WriteKind, versioned_key
from kvstore.store import LocalStore
from kvstore.table_info import TableInfo


class Kv:
    """A table ``kv(k BIGINT, v STRING)`` and helpers that speak in keys 1, 2, 3 ..."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.info: TableInfo = store.create_table("kv", "k BIGINT, v STRING", ["k"])

    def key(self, k: int) -> bytes:
        return self.info.key_codec.encode({"k": k})

    def row(self, k: int, v: str) -> bytes:
        return self.info.row_codec.encode({"k": k, "v": v})

    def value_of(self, raw: bytes | None) -> str | None:
        return None if raw is None else self.info.row_codec.decode(raw)["v"]

    # ---------------------------------------------------------------- actions

    def must_prewrite_put(
        self, k: int, v: str, primary: int, start_ts: int, ttl_ms: int = 3000
    ) -> None:
        self.store.prewrite(
            [(LockOp.PUT, self.key(k), self.row(k, v))], self.key(primary), start_ts, ttl_ms
        )

    def must_prewrite_delete(self, k: int, primary: int, start_ts: int, ttl_ms: int = 3000) -> None:
        self.store.prewrite(
            [(LockOp.DELETE, self.key(k), b"")], self.key(primary), start_ts, ttl_ms
        )

    def must_commit(self, k: int, start_ts: int, commit_ts: int) -> None:
        self.store.commit(start_ts, commit_ts, [self.key(k)])

    def must_rollback(self, k: int, start_ts: int) -> None:
        self.store.rollback(start_ts, [self.key(k)])

    def must_put(self, k: int, v: str, start_ts: int, commit_ts: int) -> None:
        self.must_prewrite_put(k, v, k, start_ts)
        self.must_commit(k, start_ts, commit_ts)

    # ---------------------------------------------------------------- state

    def lock(self, k: int) -> Lock | None:
        with self.store.storage.read_txn() as r:
            return r.get_lock(self.key(k))

    def write_at(self, k: int, commit_ts: int) -> Write | None:
        with self.store.storage.read_txn() as r:
            raw = r.get("write", versioned_key(self.key(k), commit_ts))
        return None if raw is None else Write.parse(raw)

    def must_locked(self, k: int, start_ts: int) -> None:
        lock = self.lock(k)
        assert lock is not None, f"key {k} is not locked"
        assert lock.start_ts == start_ts

    def must_unlocked(self, k: int) -> None:
        assert self.lock(k) is None, f"key {k} is still locked: {self.lock(k)}"

    def must_written(self, k: int, start_ts: int, commit_ts: int, kind: WriteKind) -> None:
        w = self.write_at(k, commit_ts)
        assert w is not None, f"no write record for key {k} at {commit_ts}"
        assert (w.kind, w.start_ts) == (kind, start_ts)

    def must_get(self, k: int, ts: int, expected: str | None) -> None:
        assert self.value_of(self.store.get(self.key(k), ts)) == expected

    def read_raw(self, k: int, ts: int) -> bytes | None:
        with self.store.storage.read_txn() as r:
            return actions.get(r, self.key(k), ts)


E = TypeVar("E", bound=BaseException)


def must_err(exc_type: type[E], fn: Callable[..., object], *args: object, **kwargs: object) -> E:
    """Call ``fn`` and return the ``exc_type`` it raises; fail if it raises nothing."""
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        return e
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise {exc_type.__name__}")
