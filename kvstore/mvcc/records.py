"""The Lock and Write records of the ``lock`` and ``write`` column families.

The ``txn_locks`` index entry of a lock (key start_ts + user key) holds the Write record that
would commit it (``Lock.write_bytes``), so a transaction commits from its index alone. A bulk
prewrite indexes its locks by one ``txn_ranges`` entry instead (start_ts + first key -> last key);
resolving the transaction then reads those locks themselves. Index entries go when the
transaction resolves (kvstore.actions.resolve_locks).

Encodings use a one-byte kind flag first and prefix-tagged optional fields after the fixed part,
so a record can grow a field without breaking old readers (the TiKV layout):

Lock  = op(1: P/D/L) + start_ts(8) + ttl_ms(8) + txn_size(8) + len(primary)(2) + primary
        [+ b"v" + short value (to the end)]
Write = kind(1: P/D/R/L) + start_ts(8) [+ b"v" + short value (to the end)]

All integers big-endian. A Put whose value is longer than SHORT_VALUE_MAX keeps its value in the
``data`` CF under versioned_key(key, start_ts) instead of inline.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

SHORT_VALUE_MAX = 1024
_LOCK_HEAD = struct.Struct(">cQQQH")
_WRITE_HEAD = struct.Struct(">cQ")
_VALUE_TAG = b"v"
_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")


class LockOp(enum.Enum):
    PUT = b"P"
    DELETE = b"D"
    LOCK = b"L"


Mutation = tuple[LockOp, bytes, bytes]
"""One change a transaction prewrites: (op, user key, encoded row; b"" for DELETE and LOCK)."""


class WriteKind(enum.Enum):
    PUT = b"P"
    DELETE = b"D"
    ROLLBACK = b"R"
    LOCK = b"L"


@dataclass(frozen=True, slots=True)
class Lock:
    """A prewritten, not yet committed or rolled back, mutation of one key."""

    op: LockOp
    primary: bytes
    start_ts: int
    ttl_ms: int
    txn_size: int = 0
    short_value: bytes | None = None

    def to_bytes(self) -> bytes:
        head = Lock.header(self.op, self.primary, self.start_ts, self.ttl_ms, self.txn_size)
        return head if self.short_value is None else head + _VALUE_TAG + self.short_value

    @classmethod
    def parse(cls, b: bytes) -> Lock:
        op, start_ts, ttl, size, plen = _LOCK_HEAD.unpack_from(b)
        pos = _LOCK_HEAD.size + plen
        primary = b[_LOCK_HEAD.size : pos]
        short = None
        if len(b) > pos:
            if b[pos : pos + 1] != _VALUE_TAG:
                raise ValueError("unknown lock field tag")
            short = b[pos + 1 :]
        return cls(LockOp(op), primary, start_ts, ttl, size, short)

    @staticmethod
    def header(op: LockOp, primary: bytes, start_ts: int, ttl_ms: int, txn_size: int) -> bytes:
        """The encoded lock up to its optional value: the same for every key of one prewrite,
        so a bulk prewrite builds it once and appends b"v" + value per key."""
        return _LOCK_HEAD.pack(op.value, start_ts, ttl_ms, txn_size, len(primary)) + primary

    @staticmethod
    def start_ts_of(raw: bytes) -> int:
        """start_ts of an encoded lock, without parsing the rest."""
        return _U64.unpack_from(raw, 1)[0]

    @staticmethod
    def value_offset(raw: bytes) -> int:
        """Where the optional value part (b"v" + short value) of the encoded lock ``raw``
        starts: after the fixed head and the primary, so the same for every lock of a txn."""
        return _LOCK_HEAD.size + _U16.unpack_from(raw, _LOCK_HEAD.size - 2)[0]

    @staticmethod
    def write_bytes(raw: bytes) -> bytes:
        """The encoded Write that commits the encoded lock ``raw``: same kind flag (P/D/L),
        same start_ts, the lock's short value if it has one."""
        return raw[:9] + raw[Lock.value_offset(raw) :]

    def with_ttl(self, ttl_ms: int) -> Lock:
        return Lock(self.op, self.primary, self.start_ts, ttl_ms, self.txn_size, self.short_value)


@dataclass(frozen=True, slots=True)
class Write:
    """A commit (or rollback) record, stored at versioned_key(key, commit_ts).

    A rollback record is stored at versioned_key(key, start_ts): its commit_ts is its start_ts.
    """

    kind: WriteKind
    start_ts: int
    short_value: bytes | None = None

    def to_bytes(self) -> bytes:
        head = _WRITE_HEAD.pack(self.kind.value, self.start_ts)
        return head if self.short_value is None else head + _VALUE_TAG + self.short_value

    @classmethod
    def parse(cls, b: bytes) -> Write:
        kind, start_ts = _WRITE_HEAD.unpack_from(b)
        short = None
        if len(b) > _WRITE_HEAD.size:
            if b[9:10] != _VALUE_TAG:
                raise ValueError("unknown write field tag")
            short = b[10:]
        return cls(WriteKind(kind), start_ts, short)


VALUE_TAG = _VALUE_TAG

# Offsets the bulk scan relies on to read a Put's inline value without parsing each record.
WRITE_VALUE_OFFSET = _WRITE_HEAD.size + 1
