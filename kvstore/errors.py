"""The error hierarchy of the store.

Two families, kept apart on purpose:

* ``RequestError`` subclasses are malformed or impossible requests. Each carries the gRPC status
  code name the service answers with (``INVALID_ARGUMENT``, ``NOT_FOUND``, ...) and a message that
  names the table, key or field at fault. kvstore does not import grpc; the service maps ``code``.
* ``TxnError`` subclasses are Percolator outcomes (a lock in the way, a conflict, a rolled-back
  transaction). They travel as data in responses, never as status codes, and the client turns them
  back into these exceptions. Each carries its key and timestamps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def _fmt_key(key: bytes) -> str:
    return key.hex() if len(key) <= 64 else key[:64].hex() + "..."


NAME_IN_MESSAGE_CHARS = 80
MAX_MESSAGE_CHARS = 2000


def cut(value: object, limit: int = NAME_IN_MESSAGE_CHARS) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters with the full
    length noted: a message must never repeat a 10k-character name or a 1 MB schema (gRPC's
    header limit would turn the answer into RESOURCE_EXHAUSTED "Stream removed")."""
    text = repr(value)
    if len(text) <= limit:
        return text
    n = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:limit]}... ({n} characters)"


def status_message(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """The text a server sends as a status's details: ``message`` cut to ``limit``."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... ({len(message) - limit} more characters)"


class SnapviewError(Exception):
    """Base of every error snapview raises on purpose."""

    code = "INTERNAL"


# ---------------------------------------------------------------- request errors (status codes)


class RequestError(SnapviewError):
    """A request the server refuses; ``code`` is the gRPC status code name."""

    code = "INVALID_ARGUMENT"


_BY_NAME: dict[str, type[RequestError]] = {}


def register_error(cls: type[RequestError]) -> type[RequestError]:
    """Class decorator: lets a client rebuild ``cls`` from a failed call.

    The server sends the class name in a trailer beside the status code; ``error_class`` maps it
    back. Only registered classes are rebuilt (never a name looked up in a module), and a name can
    be registered once. The coordinator registers its own errors in ``coordinator.errors``."""
    if not (isinstance(cls, type) and issubclass(cls, RequestError)):
        raise TypeError(f"{cls!r} is not a RequestError subclass")
    known = _BY_NAME.get(cls.__name__)
    if known is not None and known is not cls:
        raise ValueError(f"error class name {cls.__name__!r} is registered twice")
    _BY_NAME[cls.__name__] = cls
    return cls


def error_class(name: str) -> type[RequestError] | None:
    """The registered RequestError class called ``name``, or None."""
    return _BY_NAME.get(name)


@register_error
class InvalidArgument(RequestError):
    code = "INVALID_ARGUMENT"


@register_error
class RequestTooLarge(InvalidArgument):
    """A request above what one request may carry (kvstore.limits); the client splits."""


@register_error
class SchemaMismatch(InvalidArgument):
    """A row or key does not fit its table's schema. The message names table and column."""


@register_error
class KeyPrewrittenTwice(InvalidArgument):
    """A transaction prewrote a key it had already locked, with a different mutation: two rows
    with one primary key in one epoch. (The same mutation again is a retry, and idempotent.)
    Build it with ``of``; a client gets the server's message alone (``key`` is then empty)."""

    key: bytes = b""
    start_ts: int = 0

    @classmethod
    def of(cls, key: bytes, start_ts: int, where: str = "") -> KeyPrewrittenTwice:
        err = cls(
            f"{where or 'key ' + key.hex()}: transaction start_ts={start_ts} already wrote a "
            "different row for this primary key (give each key one row per transaction)"
        )
        err.key, err.start_ts = key, start_ts
        return err


@register_error
class ValueTooLarge(InvalidArgument):
    """A value is larger than the store accepts (4 MiB by default: LocalStore.max_value_bytes).
    Hint: split the row, or keep large blobs outside the store and store a reference."""


@register_error
class NotFound(RequestError):
    code = "NOT_FOUND"


@register_error
class TableNotFound(NotFound):
    def __init__(self, table: str | int) -> None:
        self.table: str | int | None = table  # None: rebuilt from a message naming no table
        what = f"table {cut(table)}" if isinstance(table, str) else f"table id {table}"
        super().__init__(f"{what} does not exist")

    @classmethod
    def dropped(cls, name: str, table_id: int) -> TableNotFound:
        """A request naming the id of a table that was dropped (for good: ids are never
        reused, so retrying with the same id cannot help)."""
        err = cls.__new__(cls)
        NotFound.__init__(
            err,
            f"table {name!r} (id {table_id}) was dropped; a table created later under the same "
            "name is another table",
        )
        err.table = table_id  # the id the request named: what a client's cache refreshes by
        return err

    @classmethod
    def from_message(cls, message: str) -> TableNotFound:
        """Rebuild the error a server sent (the client side of a NOT_FOUND for a table)."""
        err = cls.__new__(cls)
        NotFound.__init__(err, message)
        m = re.match(r"table '([^']*)'", message)
        by_id = re.match(r"table id (\d+) ", message) or re.search(
            r"\(id (\d+)\) was dropped", message
        )
        err.table = int(by_id.group(1)) if by_id else m.group(1) if m else None
        return err


@register_error
class AlreadyExists(RequestError):
    code = "ALREADY_EXISTS"


@register_error
class FailedPrecondition(RequestError):
    code = "FAILED_PRECONDITION"


@register_error
class SnapshotTooOld(FailedPrecondition):
    """A read or change scan at a timestamp below the GC safepoint: the versions it needs may be
    collected, so it is refused rather than answered with partial data. The message names the
    table, the timestamp asked for and the safepoint. Read at a newer timestamp, or hold a reader
    lease (``client.lease``, ``client.snapshot(..., lease_s=)``) while a snapshot is in use."""


@register_error
class Unavailable(RequestError):
    code = "UNAVAILABLE"


@register_error
class TableFenced(Unavailable):
    """A write into a table while a revision holds the table's fence (``kvstore.actions.fence``).
    UNAVAILABLE, so the client's RetryPolicy retries it: a writer waits for the moment a
    revision takes, then goes on (and conflicts, as any transaction, if the revision wrote one
    of its keys after it started)."""


@register_error
class PermissionDenied(RequestError):
    code = "PERMISSION_DENIED"


# ---------------------------------------------------------------- Percolator outcomes (data)


class TxnError(SnapviewError):
    """A Percolator outcome on one key. Never sent as a status code."""

    code = "ABORTED"


class KeyIsLocked(TxnError):
    """Another transaction holds a lock on ``key``; resolve it through its primary or wait.

    ``keys``: every key of the request the same transaction's locks stand in the way of, as far
    as the action that raised this looked (``key`` first; kvstore.actions.get.lock_in_way). A
    caller resolves these, not the whole transaction (which may hold millions of locks)."""

    def __init__(
        self,
        key: bytes,
        primary: bytes,
        start_ts: int,
        ttl_ms: int,
        op: int = 0,
        txn_size: int = 0,
        keys: Sequence[bytes] = (),
    ) -> None:
        self.key, self.primary, self.start_ts, self.ttl_ms = key, primary, start_ts, ttl_ms
        self.op, self.txn_size = op, txn_size
        self.keys: tuple[bytes, ...] = tuple(keys) or (key,)
        super().__init__(
            f"key {_fmt_key(key)} is locked by txn start_ts={start_ts} "
            f"(primary {_fmt_key(primary)}, ttl {ttl_ms} ms)"
        )


class WriteConflict(TxnError):
    """A write with commit_ts >= start_ts exists on ``key``; retry the transaction."""

    def __init__(
        self,
        key: bytes,
        primary: bytes,
        start_ts: int,
        conflict_start_ts: int,
        conflict_commit_ts: int,
        where: str | None = None,
    ) -> None:
        self.key, self.primary, self.start_ts = key, primary, start_ts
        self.conflict_start_ts, self.conflict_commit_ts = conflict_start_ts, conflict_commit_ts
        self.where = where
        """The key as a person reads it (``table 'accounts' key (1,)``), when the raiser knew
        the table's definition; else the message shows the key's bytes."""
        super().__init__(
            f"write conflict on {where or 'key ' + _fmt_key(key)}: txn start_ts={start_ts} "
            f"meets a write start_ts={conflict_start_ts} commit_ts={conflict_commit_ts}"
        )

    def named(self, where: str) -> WriteConflict:
        """The same conflict, its key named ``where``."""
        return WriteConflict(
            self.key,
            self.primary,
            self.start_ts,
            self.conflict_start_ts,
            self.conflict_commit_ts,
            where,
        )


class TxnLockNotFound(TxnError):
    """Commit found neither the txn's lock nor its write on ``key``."""

    def __init__(self, key: bytes, start_ts: int) -> None:
        self.key, self.start_ts = key, start_ts
        super().__init__(f"lock of txn start_ts={start_ts} on key {_fmt_key(key)} not found")


class TxnRolledBack(TxnError):
    """The txn was rolled back on ``key``: a commit or a late prewrite must fail."""

    def __init__(self, key: bytes, start_ts: int) -> None:
        self.key, self.start_ts = key, start_ts
        super().__init__(f"txn start_ts={start_ts} was rolled back on key {_fmt_key(key)}")


class TxnAlreadyCommitted(TxnError):
    """A rollback met the txn's commit record on ``key``."""

    def __init__(self, key: bytes, start_ts: int, commit_ts: int) -> None:
        self.key, self.start_ts, self.commit_ts = key, start_ts, commit_ts
        super().__init__(
            f"txn start_ts={start_ts} is already committed at {commit_ts} on key {_fmt_key(key)}"
        )


@register_error
class Aborted(RequestError):
    """The operation was overtaken (e.g. an epoch attempt rolled back); start it again."""

    code = "ABORTED"


@register_error
class Unauthenticated(RequestError):
    code = "UNAUTHENTICATED"


@register_error
class DataLoss(RequestError):
    """A stored record is damaged (its checksum does not match, or the data file is truncated or
    its header is overwritten). The message names the table and key, or the file. The damaged
    record is never served; ``snapview check --data-dir DIR`` lists every damaged record."""

    code = "DATA_LOSS"


@register_error
class ResourceExhausted(RequestError):
    """The server ran out of a resource it needs to apply the request; nothing of it applied."""

    code = "RESOURCE_EXHAUSTED"


@register_error
class ServerBusy(ResourceExhausted):
    """The server runs as many heavy calls (change scans, dry-run rollbacks) as its
    ``--max-heavy-calls`` allows and none ended within the wait; nothing was read. The message
    names the limit. Transient: ``RemoteStore`` and the coordinator client retry it with
    backoff, as they retry UNAVAILABLE."""


@register_error
class DiskFull(ResourceExhausted):
    """The filesystem holding the data dir is full: the write was not applied (nothing of its
    group was), reads keep working, and writes work again once space is freed. The message names
    the data dir and how much space is left."""
