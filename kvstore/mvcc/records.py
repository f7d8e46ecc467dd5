"""The Lock and Write records of the ``lock`` and ``write`` column families.

The ``txn_locks`` index entry of a lock (key start_ts + user key) holds the Write record that
would commit it (``Lock.write_bytes``), so a transaction commits from its index alone. A bulk
prewrite indexes its locks by one ``txn_ranges`` entry instead (start_ts + first key -> last key);
resolving the transaction then reads those locks themselves. Index entries go when the
transaction resolves (kvstore.actions.resolve_locks).

Encodings use a one-byte kind flag first and prefix-tagged optional fields after the fixed part,
so a record can grow a field without breaking old readers (the TiKV layout):

Lock  = op(1: P/D/L) + start_ts(8) + ttl_ms(8) + txn_size(8) + len(primary)(2) + primary
        [+ b"v" + short value] + crc(4)
Write = kind(1: P/D/R/L) + start_ts(8) [+ b"v" + short value] + crc(4)
data  = value + crc(4)

All integers big-endian, except the checksum trailer: ``crc`` is zlib's CRC-32 of everything
before it XOR SEAL_XOR, little-endian: the four bytes that bring the CRC-32 of the whole record to
0. A record is checked with one C call (``intact``) without slicing it, and since each intact
record takes the CRC register back to where it started, a run of intact records joined has CRC-32
0 too: a scan checks a whole chunk with one C call (``all_intact``). A Put whose value is longer
than SHORT_VALUE_MAX keeps its value in the ``data`` CF under versioned_key(key, start_ts) instead
of inline (sealed the same way). STORE_FORMAT names this layout; a store records it in its meta
(kvstore.storage), so a data dir of another format is refused at open instead of being read as
damaged everywhere.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass

SHORT_VALUE_MAX = 1024
_LOCK_HEAD = struct.Struct(">cQQQH")
_WRITE_HEAD = struct.Struct(">cQ")
_VALUE_TAG = b"v"
_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")
_CRC_LE = struct.Struct("<I")

STORE_FORMAT = 2
"""The on-disk layout of records: 1 had no checksums, 2 seals every lock, write and data record."""
CRC_BYTES = 4
SEAL_XOR = 0x6DD90A9D
"""zlib.crc32(body + ((zlib.crc32(body) ^ SEAL_XOR) as 4 little-endian bytes)) == 0, every body."""
crc32 = zlib.crc32
pack_crc = _CRC_LE.pack


class ChecksumMismatch(ValueError):
    """A record's checksum does not match its bytes: it was damaged after it was written.
    Readers turn it into kvstore.errors.DataLoss, naming table and key."""


def seal(body: bytes) -> bytes:
    """``body`` with its checksum trailer."""
    return body + _CRC_LE.pack(zlib.crc32(body) ^ SEAL_XOR)


def intact(record: bytes) -> bool:
    """Whether a sealed record's checksum matches (one C call over the whole record)."""
    return zlib.crc32(record) == 0


def all_intact(records: list[bytes]) -> bool:
    """Whether every sealed record of ``records`` is intact, in one C call over them joined.
    (A damaged record moves the CRC register off its start, and no intact record after it can
    bring it back; only a second damage could, by a 1 in 2**32 chance.)"""
    return zlib.crc32(b"".join(records)) == 0


def unseal(record: bytes, what: str) -> bytes:
    """The body of a sealed record; raises ChecksumMismatch naming ``what`` if it is damaged."""
    if zlib.crc32(record):
        raise ChecksumMismatch(f"{what} of {len(record)} bytes fails its checksum")
    return record[:-CRC_BYTES]


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
        return seal(head if self.short_value is None else head + _VALUE_TAG + self.short_value)

    @classmethod
    def parse(cls, raw: bytes) -> Lock:
        """Decode a sealed lock; raises ChecksumMismatch if it is damaged."""
        b = unseal(raw, "lock record")
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
        so a bulk prewrite builds it once and appends b"v" + value and the checksum per key."""
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
        """The encoded Write that commits the encoded (sealed) lock ``raw``: same kind flag
        (P/D/L), same start_ts, the lock's short value if it has one, its own checksum. The
        caller has checked ``raw`` (``intact``): a damaged lock must not become a sound write."""
        body = raw[:9] + raw[Lock.value_offset(raw) : -CRC_BYTES]
        return body + _CRC_LE.pack(zlib.crc32(body) ^ SEAL_XOR)

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
        return seal(head if self.short_value is None else head + _VALUE_TAG + self.short_value)

    @classmethod
    def parse(cls, raw: bytes) -> Write:
        """Decode a sealed write record; raises ChecksumMismatch if it is damaged."""
        b = unseal(raw, "write record")
        kind, start_ts = _WRITE_HEAD.unpack_from(b)
        short = None
        if len(b) > _WRITE_HEAD.size:
            if b[9:10] != _VALUE_TAG:
                raise ValueError("unknown write field tag")
            short = b[10:]
        return cls(WriteKind(kind), start_ts, short)


VALUE_TAG = _VALUE_TAG

# Offsets the bulk scan relies on to read a Put's inline value without parsing each record:
# the value is record[WRITE_VALUE_OFFSET:-CRC_BYTES], present when the record is at least
# WRITE_WITH_VALUE bytes long (a record without a value part is WRITE_VALUE_OFFSET + 3 bytes).
WRITE_VALUE_OFFSET = _WRITE_HEAD.size + 1
WRITE_WITH_VALUE = WRITE_VALUE_OFFSET + CRC_BYTES
