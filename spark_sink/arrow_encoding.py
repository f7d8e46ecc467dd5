"""Arrow record batches -> store mutations, in bulk.

The fixed part of every row is assembled as one numpy matrix (one column slice per table
column); variable-length values are sliced from Arrow's own data buffers. Only the final
concatenation of each row's pieces is a per-row step, and it runs at C speed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kvstore.errors import SchemaMismatch
from kvstore.mvcc.keys import MAX_USER_KEY_BYTES
from kvstore.mvcc.records import LockOp, Mutation
from kvstore.rowcodec import ROW_VERSION, decimal128_bytes
from kvstore.schema import FIXED_WIDTH, ROW_ID_COLUMN, VARIABLE, Column
from kvstore.table_info import TableInfo
from spark_source.options import CHANGE_TYPE, COMMIT_TS

_INT_VIEW = {
    "BIGINT": ("<i8", pa.int64()),
    "TIMESTAMP": ("<i8", pa.int64()),
    "INT": ("<i4", pa.int32()),
    "DATE": ("<i4", pa.int32()),
    "DOUBLE": ("<f8", None),
}


def row_ids(epoch: int, partition: int, first_index: int, n: int) -> pa.Array:
    """Deterministic hidden row ids (epoch, partition, index): a retried task writes the same
    ids again, so it overwrites instead of duplicating. Big-endian, so ids sort by origin."""
    ids = np.empty(n, dtype=[("e", ">u8"), ("p", ">u4"), ("i", ">u4")])
    ids["e"], ids["p"] = epoch, partition
    ids["i"] = np.arange(first_index, first_index + n, dtype=np.uint64)
    blob = ids.tobytes()
    return pa.array([blob[i * 16 : (i + 1) * 16] for i in range(n)], pa.binary())


class ArrowEncoder:
    """Encodes batches of one table; column order and types come from the table, not the batch."""

    def __init__(self, info: TableInfo) -> None:
        self.info = info
        self.codec = info.row_codec
        self.columns = info.table_schema.columns

    # ---------------------------------------------------------------- columns

    def _column(self, batch: pa.RecordBatch, col: Column, n: int) -> pa.Array:
        idx = batch.schema.get_field_index(col.name)
        target = col.type.arrow()
        if idx < 0:
            if not col.nullable:
                raise SchemaMismatch(f"table {self.info.name!r}: missing key column {col.name!r}")
            return pa.nulls(n, target)
        arr = batch.column(idx)
        if not col.nullable and arr.null_count:
            raise SchemaMismatch(
                f"table {self.info.name!r} column {col.name!r}: value None in a primary key column"
            )
        if arr.type.equals(target):
            return arr
        try:
            return pc.cast(arr, target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise self._cast_error(arr, col, e) from None

    def _cast_error(self, arr: pa.Array, col: Column, err: Exception) -> SchemaMismatch:
        for v in arr.to_pylist():
            try:
                pc.cast(pa.array([v], arr.type), col.type.arrow(), safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return SchemaMismatch(
                    f"table {self.info.name!r} column {col.name!r}: value "
                    f"{v!r:.80} does not fit {col.type.ddl()} ({arr.type})"
                )
        return SchemaMismatch(
            f"table {self.info.name!r} column {col.name!r}: {arr.type} does "
            f"not convert to {col.type.ddl()}: {err}"
        )

    def check_columns(self, names: list[str]) -> None:
        """Refuse a batch that names a column the table does not have."""
        known = {c.name for c in self.columns}
        for name in names:
            if name not in known:
                raise SchemaMismatch(
                    f"table {self.info.name!r}: unknown column {name!r} (columns: "
                    f"{', '.join(c.name for c in self.info.table_schema.visible_columns)})"
                )

    def check_sink(self, names: list[str], mode: str) -> None:
        """Driver-side checks before any epoch opens: the mode fits the table, every column is
        the table's (feed columns aside), and every key column is present."""
        if mode == "append" and not self.info.hidden_row_id:
            raise SchemaMismatch(
                f"table {self.info.name!r} has a primary key; append is for "
                "append-only tables (use upsert)"
            )
        if mode != "append" and self.info.hidden_row_id:
            raise SchemaMismatch(f"table {self.info.name!r} is append-only; use mode append")
        names = [n for n in names if n not in (CHANGE_TYPE, COMMIT_TS)]
        self.check_columns(names)
        if mode != "append":
            for k in self.info.table_schema.primary_key:
                if k not in names:
                    raise SchemaMismatch(
                        f"table {self.info.name!r}: the rows lack primary key column {k!r}"
                    )

    # ---------------------------------------------------------------- rows and keys

    def encode_rows(self, batch: pa.RecordBatch) -> list[bytes]:
        """The encoded row of every record (same bytes as RowCodec.encode)."""
        n = batch.num_rows
        codec = self.codec
        fixed = np.zeros((n, codec.fixed_size), dtype=np.uint8)
        fixed[:, 0] = ROW_VERSION
        var_pieces: list[list[bytes]] = []
        for i, col in enumerate(self.columns):
            arr = self._column(batch, col, n)
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
            nulls = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
            if nulls is not None:
                fixed[:, 1 + i // 8] |= nulls.astype(np.uint8) << (i % 8)
            off, kind = codec.offsets[i], col.type.kind
            w = FIXED_WIDTH[kind]
            if kind in VARIABLE:
                sizes, pieces = _var_pieces(arr, nulls)
                fixed[:, off : off + 4] = sizes.astype("<u4").view(np.uint8).reshape(n, 4)
                var_pieces.append(pieces)
            elif kind == "BOOLEAN":
                vals = arr.fill_null(False).to_numpy(zero_copy_only=False)
                fixed[:, off] = vals.astype(np.uint8)
            elif kind == "DECIMAL":
                raw = decimal128_bytes(arr)
                if nulls is not None:
                    raw = np.where(nulls[:, None], 0, raw)
                fixed[:, off : off + 16] = raw
            else:
                dtype, as_int = _INT_VIEW[kind]
                src = arr.cast(as_int) if as_int is not None and arr.type != as_int else arr
                vals = src.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype)
                fixed[:, off : off + w] = vals.view(np.uint8).reshape(n, w)
        blob = fixed.tobytes()
        fs = codec.fixed_size
        heads = [blob[j * fs : (j + 1) * fs] for j in range(n)]
        if not var_pieces:
            return heads
        if len(var_pieces) == 1:
            return [h + p for h, p in zip(heads, var_pieces[0], strict=True)]
        return [b"".join(parts) for parts in zip(heads, *var_pieces, strict=True)]

    def encode_keys(self, rows: list[bytes]) -> list[bytes]:
        """The key of every encoded row, in bulk (``RowCodec.keys``); SchemaMismatch as
        ``KeyCodec`` raises it for a key over the length limit."""
        keys = self.codec.keys(rows, self.info.prefix)
        if keys and self.codec.var_idx and max(map(len, keys)) > MAX_USER_KEY_BYTES:
            j = next(j for j, k in enumerate(keys) if len(k) > MAX_USER_KEY_BYTES)
            kc, idx = self.info.key_codec, self.info.table_schema.index
            vals = self.codec.decode_stored(rows[j])
            kc.encode_values(tuple(vals[idx[k]] for k in self.info.table_schema.primary_key))
        return keys

    def mutations(
        self,
        batch: pa.RecordBatch,
        mode: str,
        epoch: int = 0,
        partition: int = 0,
        first_index: int = 0,
    ) -> list[Mutation]:
        """Mutations for ``mode``: upsert (PUT by primary key), delete (DELETE the keys the rows
        name), append (PUT with hidden row ids (epoch, partition, index))."""
        self.check_columns([c for c in batch.schema.names])
        if mode == "append":
            if not self.info.hidden_row_id:
                raise SchemaMismatch(
                    f"table {self.info.name!r} has a primary key; append is for "
                    "append-only tables (use upsert)"
                )
            batch = batch.append_column(
                ROW_ID_COLUMN, row_ids(epoch, partition, first_index, batch.num_rows)
            )
        elif self.info.hidden_row_id:
            raise SchemaMismatch(f"table {self.info.name!r} is append-only; use mode append")
        rows = self.encode_rows(batch)
        keys = self.encode_keys(rows)
        if mode == "delete":
            return [(LockOp.DELETE, k, b"") for k in keys]
        return [(LockOp.PUT, k, v) for k, v in zip(keys, rows, strict=True)]


def _var_pieces(arr: pa.Array, nulls: np.ndarray | None) -> tuple[np.ndarray, list[bytes]]:
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    off_dtype = np.dtype(np.int64) if large else np.dtype(np.int32)
    n = len(arr)
    offs = np.frombuffer(arr.buffers()[1], dtype=off_dtype)[arr.offset : arr.offset + n + 1]
    offs = offs.astype(np.int64)
    starts: np.ndarray = offs[:-1]
    ends: np.ndarray = offs[1:]
    if nulls is not None:
        ends = np.where(nulls, starts, ends)  # a null slot may still span bytes in Arrow
    data = arr.buffers()[2]
    blob = data.to_pybytes() if data is not None else b""
    pieces = [blob[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    return ends - starts, pieces


__all__ = ["ArrowEncoder", "row_ids"]
