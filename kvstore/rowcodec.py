"""Schema-driven row codec: one compact binary layout, encoded per row, decoded in bulk to Arrow.

Layout (little-endian, Arrow's own byte order for fixed-width values):

    version(1) = 0x01 | null bitmap (1 bit per column, set = null) | fixed slots | variable area

Fixed slots, one per column in schema order: BIGINT/DOUBLE/TIMESTAMP 8 bytes, INT/DATE 4, BOOLEAN
1, DECIMAL 16 (unscaled two's complement, as Arrow's decimal128), STRING/BINARY 4 (the byte length;
the bytes follow in the variable area, in column order). Every row of a table has the same fixed
part, so a column is a strided gather over the concatenated rows: ``decode_arrow`` decodes a whole
batch with a handful of numpy operations instead of a Python loop per row.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from kvstore.errors import SchemaMismatch
from kvstore.mvcc.keys import escape_bytes
from kvstore.schema import FIXED_WIDTH, VARIABLE, TableSchema, from_storage, to_storage

ROW_VERSION = 1
_FMT = {
    "BIGINT": "q",
    "INT": "i",
    "DOUBLE": "d",
    "BOOLEAN": "?",
    "DATE": "i",
    "TIMESTAMP": "q",
    "DECIMAL": "16s",
    "STRING": "I",
    "BINARY": "I",
}
_NP = {"BIGINT": "<i8", "INT": "<i4", "DOUBLE": "<f8", "DATE": "<i4", "TIMESTAMP": "<i8"}
_ZERO = {
    "BIGINT": 0,
    "INT": 0,
    "DOUBLE": 0.0,
    "BOOLEAN": False,
    "DATE": 0,
    "TIMESTAMP": 0,
    "DECIMAL": bytes(16),
    "STRING": 0,
    "BINARY": 0,
}


class RowCodec:
    """Encodes rows of one table schema and decodes them singly or in bulk into Arrow."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.columns = schema.columns
        self.ncols = len(self.columns)
        self.bitmap_bytes = (self.ncols + 7) // 8
        self._fixed = struct.Struct("<" + "".join(_FMT[c.type.kind] for c in self.columns))
        self.fixed_start = 1 + self.bitmap_bytes
        self.fixed_size = self.fixed_start + self._fixed.size
        self.offsets = []
        off = self.fixed_start
        for c in self.columns:
            self.offsets.append(off)
            off += FIXED_WIDTH[c.type.kind]
        self.var_idx = [i for i, c in enumerate(self.columns) if c.type.kind in VARIABLE]
        visible = {c.name for c in schema.visible_columns}
        self.visible = [c.name in visible for c in self.columns]

    # ------------------------------------------------------------------ encode

    def encode(self, row: dict) -> bytes:
        """Encode a dict of Python values. Raises SchemaMismatch naming the column at fault:
        an unknown column, a missing key column, or a value of the wrong type or range."""
        table = self.schema.table
        for name in row:
            if name not in self.schema.index:
                raise SchemaMismatch(
                    f"table {table!r}: unknown column {name!r} (columns: "
                    f"{', '.join(c.name for c in self.schema.visible_columns)})"
                )
        for k in self.schema.primary_key:
            if k not in row:
                raise SchemaMismatch(f"table {table!r}: missing primary key column {k!r}")
        return self.encode_stored([to_storage(table, c, row.get(c.name)) for c in self.columns])

    def encode_stored(self, values: list) -> bytes:
        """Encode values already in stored form, in schema order (None for null)."""
        bitmap = 0
        fixed = []
        var = []
        for i, (c, v) in enumerate(zip(self.columns, values, strict=True)):
            kind = c.type.kind
            if v is None:
                bitmap |= 1 << i
                fixed.append(_ZERO[kind])
            elif kind in VARIABLE:
                b = v.encode() if kind == "STRING" else v
                var.append(b)
                fixed.append(len(b))
            elif kind == "DECIMAL":
                fixed.append(v.to_bytes(16, "little", signed=True))
            else:
                fixed.append(v)
        return b"".join(
            [
                bytes([ROW_VERSION]),
                bitmap.to_bytes(self.bitmap_bytes, "little"),
                self._fixed.pack(*fixed),
                *var,
            ]
        )

    # ------------------------------------------------------------------ decode

    def decode_stored(self, data: bytes) -> list:
        bitmap = int.from_bytes(data[1 : self.fixed_start], "little")
        fixed = self._fixed.unpack_from(data, self.fixed_start)
        pos = self.fixed_size
        out = []
        for i, c in enumerate(self.columns):
            kind = c.type.kind
            v = fixed[i]
            if kind in VARIABLE:
                raw = data[pos : pos + v]
                pos += v
                v = raw.decode() if kind == "STRING" else bytes(raw)
            elif kind == "DECIMAL":
                v = int.from_bytes(v, "little", signed=True)
            out.append(None if bitmap >> i & 1 else v)
        return out

    def decode(self, data: bytes, include_hidden: bool = False) -> dict:
        """Decode one row into a dict of Python values (Decimal, date, datetime, ...)."""
        vals = self.decode_stored(data)
        return {
            c.name: from_storage(c, v)
            for c, v, vis in zip(self.columns, vals, self.visible, strict=True)
            if include_hidden or vis
        }

    def validate(self, data: bytes, key_hint: str = "") -> None:
        """Check that ``data`` is a well-formed row of this schema; raises SchemaMismatch."""
        table = self.schema.table
        where = f"table {table!r}{key_hint}: "
        if len(data) < self.fixed_size or data[0] != ROW_VERSION:
            raise SchemaMismatch(
                f"{where}row of {len(data)} bytes is not an encoded row of this "
                f"schema (needs version {ROW_VERSION}, >= {self.fixed_size} bytes)"
            )
        bitmap = int.from_bytes(data[1 : self.fixed_start], "little")
        if bitmap >> self.ncols:
            raise SchemaMismatch(f"{where}null bitmap names columns beyond the schema")
        for i, c in enumerate(self.columns):
            if not c.nullable and bitmap >> i & 1:
                raise SchemaMismatch(f"{where}column {c.name!r} is null but may not be")
            if c.type.kind == "BOOLEAN" and data[self.offsets[i]] > 1:
                raise SchemaMismatch(f"{where}column {c.name!r} has a bad BOOLEAN byte")
        lens = [struct.unpack_from("<I", data, self.offsets[i])[0] for i in self.var_idx]
        if self.fixed_size + sum(lens) != len(data):
            raise SchemaMismatch(
                f"{where}row length {len(data)} does not match its column "
                f"lengths ({self.fixed_size + sum(lens)})"
            )
        pos = self.fixed_size
        for i, n in zip(self.var_idx, lens, strict=True):
            if self.columns[i].type.kind == "STRING":
                try:
                    data[pos : pos + n].decode()
                except UnicodeDecodeError:
                    raise SchemaMismatch(
                        f"{where}column {self.columns[i].name!r} is not valid UTF-8"
                    ) from None
            pos += n

    def first_invalid(self, values: list[bytes]) -> int | None:
        """Index of the first value that ``validate`` would refuse, or None: the same checks,
        vectorized over the batch (UTF-8 through Arrow's validator)."""
        n = len(values)
        if n == 0:
            return None
        lens = np.fromiter(map(len, values), dtype=np.int64, count=n)
        bad = lens < self.fixed_size
        if bad.any():
            return int(np.flatnonzero(bad)[0])
        buf = np.frombuffer(b"".join(values), dtype=np.uint8)
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        bad = buf[starts] != ROW_VERSION
        bitmap = buf[starts[:, None] + np.arange(1, self.fixed_start)]
        for i, c in enumerate(self.columns):
            is_null = (bitmap[:, i // 8] >> (i % 8)) & 1 == 1
            if not c.nullable:
                bad |= is_null
            if c.type.kind == "BOOLEAN":
                bad |= buf[starts + self.offsets[i]] > 1
        if self.ncols % 8:
            bad |= (bitmap[:, -1] >> (self.ncols % 8)) != 0
        var_total = np.zeros(n, dtype=np.int64)
        for i in self.var_idx:
            raw = buf[starts[:, None] + np.arange(self.offsets[i], self.offsets[i] + 4)]
            var_total += raw.view("<u4").reshape(n)
        bad |= var_total + self.fixed_size != lens
        if bad.any():
            return int(np.flatnonzero(bad)[0])
        var_off = np.full(n, self.fixed_size, dtype=np.int64)
        for i in self.var_idx:
            raw = buf[starts[:, None] + np.arange(self.offsets[i], self.offsets[i] + 4)]
            sizes = raw.view("<u4").reshape(n).astype(np.int64)
            if self.columns[i].type.kind == "STRING":
                try:
                    self._slice_var(values, var_off, sizes, pa.string(), None).validate(full=True)
                except pa.ArrowInvalid:
                    for j, v in enumerate(values):
                        a = int(var_off[j])
                        try:
                            v[a : a + int(sizes[j])].decode()
                        except UnicodeDecodeError:
                            return j
            var_off = var_off + sizes
        return None

    def key_bytes(self, values: list[bytes], prefix: bytes) -> np.ndarray | None:
        """The memcomparable keys of the rows, derived from their fixed slots in bulk, as an
        (n, key length) uint8 array; None when a key column is variable-length (STRING). Rows
        must be valid (see first_invalid)."""
        cols = [self.schema.index[k] for k in self.schema.primary_key]
        if any(self.columns[i].type.kind in VARIABLE for i in cols):
            return None
        buf, starts = _rows_buffer(values)
        parts = [np.broadcast_to(np.frombuffer(prefix, dtype=np.uint8), (len(values), len(prefix)))]
        parts += [self._key_part(buf, starts, i) for i in cols]
        return np.concatenate(parts, axis=1)

    def keys(self, values: list[bytes], prefix: bytes) -> list[bytes]:
        """The memcomparable key of every encoded row: the bytes ``KeyCodec.encode_values``
        gives for its key values, made in bulk (fixed-width key columns from their slots with
        numpy, STRING and BINARY ones sliced from each row and escaped at C speed, about 20
        times faster per row than decoding it and encoding its key). Rows must be valid (see
        first_invalid); the key length limit is the caller's to check."""
        n = len(values)
        if n == 0:
            return []
        mat = self.key_bytes(values, prefix)
        if mat is not None:
            return _split_rows(mat)
        buf, starts = _rows_buffer(values)
        var_at: dict[int, tuple[list[int], list[int]]] = {}  # column -> each row's [a, b)
        off = np.full(n, self.fixed_size, dtype=np.int64)
        for i in self.var_idx:
            sizes = self._key_part(buf, starts, i).view("<u4").reshape(n).astype(np.int64)
            var_at[i] = (off.tolist(), (off + sizes).tolist())
            off = off + sizes
        pieces: list[list[bytes]] = []  # per run of key columns, each row's bytes
        run = [np.broadcast_to(np.frombuffer(prefix, dtype=np.uint8), (n, len(prefix)))]
        for i in (self.schema.index[k] for k in self.schema.primary_key):
            if self.columns[i].type.kind not in VARIABLE:
                run.append(self._key_part(buf, starts, i))
                continue
            if run:
                pieces.append(_split_rows(np.concatenate(run, axis=1)))
                run = []
            a, b = var_at[i]
            pieces.append([escape_bytes(v[x:y]) for v, x, y in zip(values, a, b, strict=True)])
        if run:
            pieces.append(_split_rows(np.concatenate(run, axis=1)))
        return [b"".join(parts) for parts in zip(*pieces, strict=True)]

    def _key_part(self, buf: np.ndarray, starts: np.ndarray, i: int) -> np.ndarray:
        """Column ``i``'s memcomparable key bytes of every row, (n, width) uint8, from its fixed
        slot (for a STRING or BINARY column: the slot itself, its little-endian length)."""
        kind = self.columns[i].type.kind
        w = FIXED_WIDTH[kind]
        raw = np.ascontiguousarray(
            buf[starts[:, None] + np.arange(self.offsets[i], self.offsets[i] + w)]
        )
        return fixed_key_bytes(raw, kind)

    def decode_arrow(
        self, values: list[bytes], include_hidden: bool = False, skip: int = 0
    ) -> pa.RecordBatch:
        """Decode many encoded rows into one Arrow RecordBatch, column by column, vectorized.

        ``skip`` bytes are ignored at the front of every value (a write record's header, so the
        scan can hand over its records without copying each row out)."""
        schema = self.schema.arrow_schema(include_hidden)
        n = len(values)
        if n == 0:
            return pa.RecordBatch.from_pylist([], schema=schema)
        lens = np.fromiter(map(len, values), dtype=np.int64, count=n)
        buf = np.frombuffer(b"".join(values), dtype=np.uint8)
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        starts += skip

        def gather(off: int, width: int) -> np.ndarray:
            idx = starts[:, None] + np.arange(off, off + width, dtype=np.int64)
            return buf[idx]

        bitmap = gather(1, self.bitmap_bytes)
        var_off = np.full(n, self.fixed_size + skip, dtype=np.int64)  # within each value
        arrays = []
        for i, c in enumerate(self.columns):
            kind = c.type.kind
            nulls = (bitmap[:, i // 8] >> (i % 8)) & 1 == 1 if c.nullable else None
            mask = nulls if nulls is not None and bool(nulls.any()) else None  # None: no nulls
            raw = gather(self.offsets[i], FIXED_WIDTH[kind])
            if kind in VARIABLE:
                sizes = raw.view("<u4").reshape(n).astype(np.int64)
                arr = self._slice_var(values, var_off, sizes, c.type.arrow(), mask)
                var_off = var_off + sizes
            elif kind == "BOOLEAN":
                arr = pa.array(raw.reshape(n) != 0, mask=mask)
            elif kind == "DECIMAL":
                validity = _validity(mask) if mask is not None else None
                arr = pa.Array.from_buffers(
                    c.type.arrow(), n, [validity, pa.py_buffer(raw.tobytes())]
                )
            else:
                np_arr = raw.view(_NP[kind]).reshape(n)
                arr = pa.array(np_arr, type=c.type.arrow(), mask=mask)
            if include_hidden or self.visible[i]:
                arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    @staticmethod
    def _slice_var(
        values: list[bytes],
        var_off: np.ndarray,
        sizes: np.ndarray,
        typ: pa.DataType,
        nulls: np.ndarray | None,
    ) -> pa.Array:
        # Slicing each value and joining runs at C speed and touches only the bytes needed,
        # where a numpy byte-index gather would build an index as large as the data.
        ends = var_off + sizes
        pieces = zip(values, var_off.tolist(), ends.tolist(), strict=True)
        data = b"".join([v[a:b] for v, a, b in pieces])
        n = len(values)
        out_off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=out_off[1:])
        if len(data) >= 1 << 31:
            typ = pa.large_string() if typ == pa.string() else pa.large_binary()
            offsets = out_off
        else:
            offsets = out_off.astype(np.int32)
        validity = _validity(nulls) if nulls is not None else None
        return pa.Array.from_buffers(
            typ, n, [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)]
        )


def _validity(nulls: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(~nulls, bitorder="little").tobytes())


def decimal128_bytes(arr: pa.Array) -> np.ndarray:
    """The 16 little-endian bytes of each value of the DECIMAL128 array ``arr``, its unscaled
    two's complement integer as Arrow and the row layout both hold it, (n, 16) uint8 (a NULL's
    bytes are whatever Arrow left there). A view of ``arr``'s buffer, not a copy."""
    n = len(arr)
    buf = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
    return buf[arr.offset * 16 : (arr.offset + n) * 16].reshape(n, 16)


def fixed_key_bytes(raw: np.ndarray, kind: str) -> np.ndarray:
    """The memcomparable key bytes (KeyCodec's) of fixed-width values of ``kind``, given as
    their stored little-endian bytes, (n, width) uint8 -> (n, width) uint8: integers with the
    sign bit flipped, big-endian; a DOUBLE's bits ordered; a DECIMAL's 16 bytes likewise; a
    BOOLEAN (and a variable column's length slot) as is."""
    n, w = raw.shape
    if kind in ("BIGINT", "TIMESTAMP", "INT", "DATE"):
        u = raw.view(f"<u{w}").reshape(n) ^ np.array(1 << (8 * w - 1), dtype=f"<u{w}")
        return u.astype(f">u{w}").view(np.uint8).reshape(n, w)
    if kind == "DOUBLE":
        bits = raw.view("<u8").reshape(n)
        sign = np.uint64(1 << 63)
        key = np.where(bits & sign, ~bits, bits | sign)
        return key.astype(">u8").view(np.uint8).reshape(n, 8)
    if kind == "DECIMAL":
        be = raw[:, ::-1].copy()
        be[:, 0] ^= 0x80
        return be
    return raw


def _rows_buffer(values: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The rows joined into one uint8 buffer, and where each row starts in it."""
    n = len(values)
    lens = np.fromiter(map(len, values), dtype=np.int64, count=n)
    buf = np.frombuffer(b"".join(values), dtype=np.uint8)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    return buf, starts


def _split_rows(mat: np.ndarray) -> list[bytes]:
    """Each row of a uint8 matrix as bytes."""
    width = mat.shape[1]
    blob = np.ascontiguousarray(mat).tobytes()
    return [blob[j * width : (j + 1) * width] for j in range(mat.shape[0])]
