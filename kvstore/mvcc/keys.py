"""Key encodings.

* ``user_key`` = 4-byte big-endian table id + memcomparable encoding of the primary-key columns.
  Byte order of user keys equals the order of primary-key tuples, so a primary-key range is one
  LMDB range and a table is one prefix.
* ``versioned_key(user_key, ts)`` = user_key + 8-byte big-endian ``~ts`` (the timestamp's
  complement). Versions of one key sort by key ascending, then by timestamp **descending**, so a
  cursor positioned at ``versioned_key(k, read_ts)`` lands on the newest version at or below
  read_ts.
* ``changes_key`` = table id + commit_ts (big-endian) + user_key: the change index in commit order.
* ``txn_lock_key`` = start_ts (big-endian) + user_key: every lock of one transaction is a prefix.
  The same layout keys the ``txn_ranges`` CF, where start_ts + first user_key -> last user_key
  stands for all of a bulk prewrite's locks (see kvstore.actions.prewrite).
"""

from __future__ import annotations

import struct

from kvstore.errors import SchemaMismatch
from kvstore.schema import TableSchema, to_storage

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
TS_MASK = (1 << 64) - 1
# LMDB keys are at most 511 bytes; the longest derived key is the change index (12 + user key).
MAX_USER_KEY_BYTES = 480
# The table id of snapview's own Percolator keys (epoch and rollback primaries): the system table.
SYSTEM_TABLE_ID = 0
SIGN64 = 1 << 63
SIGN32 = 1 << 31
SIGN128 = 1 << 127


def table_prefix(table_id: int) -> bytes:
    return _U32.pack(table_id)


def table_id_of(user_key: bytes) -> int:
    return _U32.unpack_from(user_key)[0]


def encode_ts(ts: int) -> bytes:
    """8 bytes that sort newer timestamps first."""
    return _U64.pack(ts ^ TS_MASK)


def decode_ts(b: bytes) -> int:
    return _U64.unpack(b)[0] ^ TS_MASK


def versioned_key(user_key: bytes, ts: int) -> bytes:
    return user_key + _U64.pack(ts ^ TS_MASK)


def parse_versioned_key(key: bytes) -> tuple[bytes, int]:
    return key[:-8], _U64.unpack_from(key, len(key) - 8)[0] ^ TS_MASK


def changes_key(user_key: bytes, commit_ts: int) -> bytes:
    return user_key[:4] + _U64.pack(commit_ts) + user_key


def parse_changes_key(key: bytes) -> tuple[int, bytes]:
    """Returns (commit_ts, user_key)."""
    return _U64.unpack_from(key, 4)[0], key[12:]


def txn_lock_key(start_ts: int, user_key: bytes) -> bytes:
    return _U64.pack(start_ts) + user_key


def escape_bytes(b: bytes) -> bytes:
    """A STRING's UTF-8 or a BINARY value as a key column: 0x00 becomes 0x00 0xFF and the value
    ends with 0x00 0x01, so a prefix sorts before its extensions and the encoding is
    order-preserving for arbitrary bytes. (Every encoder of such key columns calls this.)"""
    return b.replace(b"\x00", b"\x00\xff") + b"\x00\x01"


def _unescape_bytes(b: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while True:
        i = b.index(b"\x00", pos)
        out += b[pos:i]
        marker = b[i + 1]
        if marker == 0x01:
            return bytes(out), i + 2
        if marker != 0xFF:
            raise ValueError("bad escape in key")
        out += b"\x00"
        pos = i + 2


class KeyCodec:
    """Memcomparable encoding of one table's primary key (order-preserving, prefix-free)."""

    def __init__(self, table_id: int, schema: TableSchema) -> None:
        self.table_id = table_id
        self.schema = schema
        self.prefix = table_prefix(table_id)

    def encode_values(self, values: tuple) -> bytes:
        """Encode primary-key values already in stored form (see schema.to_storage)."""
        if len(values) != len(self.schema.key_columns):
            raise ValueError(f"{len(values)} values for {len(self.schema.key_columns)} key columns")
        return self.encode_prefix(values)

    def encode_prefix(self, values: tuple) -> bytes:
        """Encode the first ``len(values)`` key columns. Every key whose leading columns are
        ``values`` lies in [encode_prefix(values), prefix_end(encode_prefix(values))): each
        component is fixed-width or escaped, so the encoding is prefix-free."""
        out = [self.prefix]
        for col, v in zip(self.schema.key_columns, values, strict=False):
            kind = col.type.kind
            if kind in ("BIGINT", "TIMESTAMP"):
                out.append(_U64.pack((v + SIGN64) & TS_MASK))
            elif kind in ("INT", "DATE"):
                out.append(_U32.pack((v + SIGN32) & 0xFFFFFFFF))
            elif kind == "BOOLEAN":
                out.append(b"\x01" if v else b"\x00")
            elif kind == "DOUBLE":
                bits = struct.unpack(">Q", struct.pack(">d", v))[0]
                bits = bits ^ TS_MASK if bits & SIGN64 else bits | SIGN64
                out.append(_U64.pack(bits))
            elif kind == "DECIMAL":
                out.append(((v + SIGN128) & ((1 << 128) - 1)).to_bytes(16, "big"))
            elif kind == "STRING":
                out.append(escape_bytes(v.encode()))
            else:  # BINARY
                out.append(escape_bytes(v))
        key = b"".join(out)
        if len(key) > MAX_USER_KEY_BYTES:
            raise SchemaMismatch(
                f"table {self.schema.table!r}: primary key of {len(key)} bytes "
                f"exceeds the limit of {MAX_USER_KEY_BYTES} bytes"
            )
        return key

    @staticmethod
    def prefix_end(prefix: bytes) -> bytes:
        """The smallest key above every key that starts with ``prefix``."""
        p = prefix.rstrip(b"\xff")
        return p[:-1] + bytes([p[-1] + 1])

    def encode(self, row: dict) -> bytes:
        """Encode the key of ``row`` (a dict of Python values); names a missing key column."""
        vals = []
        for col in self.schema.key_columns:
            if col.name not in row:
                raise SchemaMismatch(
                    f"table {self.schema.table!r}: missing primary key column {col.name!r}"
                )
            vals.append(to_storage(self.schema.table, col, row[col.name]))
        return self.encode_values(tuple(vals))

    def decode(self, key: bytes) -> tuple:
        """Decode a user key into stored-form key values; raises ValueError when malformed."""
        if key[:4] != self.prefix:
            raise ValueError("key belongs to another table")
        pos, vals = 4, []
        for col in self.schema.key_columns:
            kind = col.type.kind
            if kind in ("BIGINT", "TIMESTAMP"):
                vals.append(_U64.unpack_from(key, pos)[0] - SIGN64)
                pos += 8
            elif kind in ("INT", "DATE"):
                vals.append(_U32.unpack_from(key, pos)[0] - SIGN32)
                pos += 4
            elif kind == "BOOLEAN":
                if key[pos] > 1:
                    raise ValueError("bad boolean")
                vals.append(key[pos] == 1)
                pos += 1
            elif kind == "DOUBLE":
                bits = _U64.unpack_from(key, pos)[0]
                bits = bits ^ SIGN64 if bits & SIGN64 else bits ^ TS_MASK
                vals.append(struct.unpack(">d", _U64.pack(bits))[0])
                pos += 8
            elif kind == "DECIMAL":
                if len(key) < pos + 16:
                    raise ValueError("short decimal")
                vals.append(int.from_bytes(key[pos : pos + 16], "big") - SIGN128)
                pos += 16
            else:
                raw, pos = _unescape_bytes(key, pos)
                vals.append(raw.decode() if kind == "STRING" else raw)
        if pos != len(key):
            raise ValueError("trailing bytes after key")
        return tuple(vals)
