"""What an incremental epoch reads from the store: each source's net change between its old and
new read ts, and keyed reads (``ScanRanges``) of sources and index state tables. Nothing here
reads a table whole. Rows are decoded in bulk (``decode_rows``: one vectorized
``RowCodec.decode_arrow`` per read, not a dict per row)."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from coordinator.client import Client
from kvstore.errors import KeyIsLocked
from kvstore.mvcc.keys import MAX_USER_KEY_BYTES, SIGN32, SIGN64, KeyCodec, escape_bytes
from kvstore.results import ChangeRecord
from kvstore.rowcodec import RowCodec
from kvstore.schema import Column, from_storage, to_storage
from kvstore.table_info import TableInfo
from spark_sink.ivm.ops.operator import NEW, Access, columns_of
from spark_source.key_ranges import after

if TYPE_CHECKING:
    from kvstore.direct_reads import DirectReader


def encode_key(info: TableInfo, values: tuple | list) -> bytes:
    """The stored key of the row of ``info`` whose primary-key columns hold ``values``."""
    cols = info.table_schema.key_columns
    stored = tuple(to_storage(info.name, c, v) for c, v in zip(cols, values, strict=True))
    return info.key_codec.encode_values(stored)


# Integer key columns packed straight by ``struct``: kind -> (struct code, sign bit, mask,
# smallest, largest). The same bytes as KeyCodec.encode_prefix (tests/unit/test_key_encoding.py).
_FIXED: dict[str, tuple[str, int, int, int, int]] = {
    "BIGINT": ("Q", SIGN64, (1 << 64) - 1, -(1 << 63), (1 << 63) - 1),
    "INT": ("I", SIGN32, (1 << 32) - 1, -(1 << 31), (1 << 31) - 1),
}


class _Slow(Exception):
    """A key value the fast encoders do not take: ``encode_key`` encodes it (or names it)."""


def _column_encoder(kind: str) -> Callable[[object], bytes] | None:
    """A fast encoder of one key column's values of ``kind`` (KeyCodec.encode_prefix's bytes),
    raising _Slow for a value it does not take; None for a kind without one."""
    if kind in _FIXED:
        code, sign, mask, lo, hi = _FIXED[kind]
        pack = struct.Struct(">" + code).pack

        def fixed(v: object) -> bytes:
            if type(v) is not int or not lo <= v <= hi:
                raise _Slow
            return pack((v + sign) & mask)

        return fixed
    if kind in ("BINARY", "STRING"):
        typ = bytes if kind == "BINARY" else str

        def escaped(v: object) -> bytes:
            if type(v) is not typ:
                raise _Slow
            b = v.encode() if isinstance(v, str) else v
            assert isinstance(b, bytes)
            return escape_bytes(b)

        return escaped
    return None


def encode_keys(info: TableInfo, keys: Iterable[tuple | list]) -> list[bytes]:
    """``encode_key`` of each of ``keys``, in order, with the same bytes and the same errors. A
    table whose key columns are all BIGINT or INT packs each key in one ``struct`` call, and one
    whose key columns are BIGINT, INT, STRING or BINARY (a values state table's (group, value
    order) key) joins each column's bytes: several times faster per key (an epoch encodes every
    key it reads or deletes). A value these do not take (not of the column's Python type, out of
    range, a key over the length limit), and every other table's keys, go through
    ``encode_key``."""
    kinds = [c.type.kind for c in info.table_schema.key_columns]
    prefix = info.key_codec.prefix
    if not all(k in _FIXED for k in kinds):
        encs = [_column_encoder(k) for k in kinds]
        if not all(encs):
            return [encode_key(info, k) for k in keys]
        return [_joined(info, prefix, encs, k) for k in keys]  # type: ignore[arg-type]
    specs = [_FIXED[k] for k in kinds]
    pack = struct.Struct(">" + "".join(code for code, *_ in specs)).pack
    n = len(specs)
    if n == 1:  # the common case, without the per-key generator of the general loop
        (_, sign, mask, lo, hi) = specs[0]
        return [
            prefix + pack((k[0] + sign) & mask)
            if len(k) == 1 and type(k[0]) is int and lo <= k[0] <= hi
            else encode_key(info, k)
            for k in keys
        ]
    out = []
    for k in keys:
        if len(k) == n and all(
            type(v) is int and lo <= v <= hi for v, (_, _, _, lo, hi) in zip(k, specs, strict=True)
        ):
            out.append(
                prefix
                + pack(
                    *[(v + sign) & mask for v, (_, sign, mask, _, _) in zip(k, specs, strict=True)]
                )
            )
        else:
            out.append(encode_key(info, k))
    return out


def _joined(
    info: TableInfo, prefix: bytes, encs: list[Callable[[object], bytes]], k: tuple | list
) -> bytes:
    """One key by its columns' fast encoders, or by ``encode_key`` where they do not take it."""
    if len(k) == len(encs):
        try:
            key = prefix + b"".join([e(v) for e, v in zip(encs, k, strict=True)])
        except _Slow:
            pass
        else:
            if len(key) <= MAX_USER_KEY_BYTES:
                return key
    return encode_key(info, k)


def decode_rows(
    columns: list[Column],
    codec: RowCodec,
    raws: list[bytes],
    names: tuple[str, ...] | None = None,
) -> list[tuple]:
    """Encoded rows of a table as tuples over its visible ``columns`` (in order), or over the
    columns ``names`` (in that order), holding the same Python values ``RowCodec.decode`` gives
    (Decimal, date, datetime in ``datetime.UTC``), decoded in bulk: one ``decode_arrow`` and one
    ``to_pylist`` per column, about 20 times faster than a dict per row at a thousand rows. Most
    of the time goes to ``to_pylist`` (a Decimal or a date per value), so a caller that needs a
    few columns of a wide table (TPC-H's lineitem: 16) names them."""
    if not raws:
        return []
    batch = codec.decode_arrow(raws)
    picked = list(zip(columns, batch.columns, strict=True))
    if names is not None:
        by_name = {c.name: (c, arr) for c, arr in picked}
        picked = [by_name[n] for n in names]
    cols = []
    for c, arr in picked:
        if c.type.kind == "TIMESTAMP":  # Arrow's tzinfo is zoneinfo's UTC; decode's is dt.UTC
            cols.append([from_storage(c, v) for v in arr.cast("int64").to_pylist()])
        else:
            cols.append(arr.to_pylist())
    return list(zip(*cols, strict=True))


def _arrow_rows(info: TableInfo, raws: list[bytes]) -> pa.Table:
    """Encoded rows of ``info`` decoded in bulk into one Arrow table over its visible columns
    (an empty one for no rows)."""
    if not raws:
        return info.table_schema.arrow_schema().empty_table()
    return pa.Table.from_batches([info.row_codec.decode_arrow(raws)])


def _decode(
    info: TableInfo, raws: list[bytes], names: tuple[str, ...] | None = None
) -> list[tuple]:
    return decode_rows(info.table_schema.visible_columns, info.row_codec, raws, names)


def add_images(raws: list[bytes], weights: list[int], old: bytes | None, new: bytes | None) -> None:
    """Append one changed key's images to a Z-set of encoded rows: its pre-image (if any) with
    weight -1, its post-image (if any) with +1."""
    if old is not None:
        raws.append(old)
        weights.append(-1)
    if new is not None:
        raws.append(new)
        weights.append(1)


class StoreInputs:
    """``delta.Inputs`` over a client, for one epoch.

    ``old``/``new``: each source's read ts at the previous barrier and at this one.
    ``state_ts``: where state tables are read (the epoch's start_ts: their last committed
    version, which reflects every source at its ``old`` ts). ``unchanged``: sources known to
    have no change between ``old`` and ``new`` (counted on the server): their change is empty
    without a scan. ``direct``: this process's reader of the server's LMDB environment, when it
    is on the server's host (``spark_sink.partition_writer.direct_reader``): change scans and
    keyed reads are then tried there first, and handed to the server when it refuses
    (kvstore.direct_reads says when). ``given``: each source's encoded change images (pre-images
    weighted -1, post-images +1) taken as its change instead of a scan (an executor's slice of
    the change); a keyed read through an index at the new barrier needs the whole change, so a
    plan with one is run over a slice only with ``whole``, a function giving a source's whole
    change images (read by the slice's task, spark_sink.ivm.executor_delta)."""

    def __init__(
        self,
        client: Client,
        infos: dict[str, TableInfo],
        old: dict[str, int],
        new: dict[str, int],
        state_ts: int,
        indexes: dict[tuple[str, str], TableInfo],
        unchanged: frozenset[str] = frozenset(),
        direct: DirectReader | None = None,
        given: dict[str, tuple[list[bytes], list[int]]] | None = None,
        whole: Callable[[str], tuple[list[bytes], list[int]]] | None = None,
    ) -> None:
        self.client = client
        # The change images to use instead of scanning (an executor's slice of the change,
        # spark_sink.ivm.executor_delta): a source not named has no change here. ``whole``
        # gives a source's whole change where a slice is not enough (an index lookup's gains).
        self.given = given
        self.whole = whole
        self._wholes: dict[str, StoreInputs] = {}
        self.direct = direct
        # What a direct read hands back to the server (loaded only with a direct reader: the
        # engine is not imported by a process that does not read directly).
        self._handed_back: tuple[type[Exception], ...] = ()
        if direct is not None:
            from kvstore.direct import DirectUnavailable

            self._handed_back = (DirectUnavailable, KeyIsLocked)
        self.infos = infos
        self.old, self.new = old, new
        self.state_ts = state_ts
        self.indexes = indexes
        self.unchanged = unchanged
        self.scanned: list[str] = []  # the sources whose changes were scanned, in order
        self._changes: dict[str, tuple[list[tuple], list[int]]] = {}
        self._images: dict[str, tuple[list[bytes], list[int]]] = {}
        self._arrow_changes: dict[str, tuple[pa.Table, pa.Array]] = {}
        self._cols = {
            t: tuple(c.name for c in i.table_schema.visible_columns) for t, i in infos.items()
        }
        self.changes_read = 0  # change rows read (pre- and post-images count once each)
        self.rows_read = 0  # rows read by key
        self._count_lock = threading.Lock()

    # ------------------------------------------------------------------ Inputs

    def columns(self, table: str) -> tuple[str, ...]:
        return self._cols[table]

    def primary_key(self, table: str) -> tuple[str, ...]:
        return self.infos[table].user_key

    def changes(self, table: str) -> tuple[list[tuple], list[int]]:
        got = self._changes.get(table)
        if got is None:
            raws, weights = self._change_images(table)
            got = self._changes[table] = (_decode(self.infos[table], raws), weights)
        return got

    def changes_arrow(self, table: str) -> tuple[pa.Table, pa.Array]:
        """``changes(table)`` as Arrow: the images decoded in bulk into one table over the
        table's visible columns (one ``decode_arrow``, no tuple per row), and the weights."""
        got = self._arrow_changes.get(table)
        if got is None:
            raws, weights = self._change_images(table)
            got = _arrow_rows(self.infos[table], raws), pa.array(weights, pa.int64())
            self._arrow_changes[table] = got
        return got

    def _change_images(self, table: str) -> tuple[list[bytes], list[int]]:
        """The encoded old (-1) and new (+1) images of the table's net change, read once per
        epoch."""
        got = self._images.get(table)
        if got is not None:
            return got
        raws: list[bytes] = []
        weights: list[int] = []
        lo, hi = self.old[table], self.new[table]
        if self.given is not None:
            raws, weights = self.given.get(table, ([], []))
        elif hi > lo and table not in self.unchanged:
            self.scanned.append(table)
            for ch in self._scan_changes(table, lo, hi):
                add_images(raws, weights, ch.old, ch.new)
        self.changes_read += len(raws)
        self._images[table] = (raws, weights)
        return raws, weights

    def _gains(self, table: str) -> StoreInputs:
        """Where an index lookup at the new barrier finds the rows that gained a value since the
        index's version: this epoch's change of ``table``, all of it (with a slice ``given``,
        the whole change of ``table`` read by ``whole``, decoded once)."""
        if self.given is None:
            return self
        got = self._wholes.get(table)
        if got is None:
            assert self.whole is not None, "a slice of the change needs its whole for gains"
            got = self._wholes[table] = StoreInputs(
                self.client,
                self.infos,
                self.old,
                self.new,
                self.state_ts,
                {},
                given={table: self.whole(table)},
            )
        return got

    def change_records(self, table: str) -> list[ChangeRecord]:
        """``table``'s net change between its old and new barrier, one record per changed key
        with both its images (read as ``changes`` reads; not counted, not cached)."""
        lo, hi = self.old[table], self.new[table]
        return self._scan_changes(table, lo, hi) if hi > lo else []

    def _scan_changes(self, table: str, lo: int, hi: int) -> list[ChangeRecord]:
        """``scan_changes`` of ``table`` in (lo, hi]: read directly when this process may
        (``direct``), else (or when the direct read hands it back) through the server."""
        if self._direct_for(hi):
            assert self.direct is not None
            try:
                return self.direct.scan_changes(self.infos[table].id, lo, hi)
            except self._handed_back:
                pass
        c = self.client
        return c.with_lock_wait(lambda: c.store.scan_changes(table, lo, hi))

    def _direct_for(self, ts: int) -> bool:
        """Whether a read at ``ts`` may be tried directly: a direct reader exists and ``ts`` is
        settled, which the first such read makes so for the whole epoch with one read answered
        by the server at the epoch's highest ts (kvstore.direct_reads)."""
        if self.direct is None:
            return False
        if ts > self.direct.settled:
            top = max(self.state_ts, *self.new.values())
            # Any key of a source does; this one is no row's in practice (and reading one
            # would do no harm: only the wait matters)
            probe = next(iter(self.infos.values())).prefix + b"\xff" * 9
            c = self.client
            c.with_lock_wait(lambda: c.store.get(probe, top))
            self.direct.settle(top)
        return ts <= self.direct.settled

    def fetch(
        self, access: Access, side: str, values: set[tuple], columns: tuple[str, ...] | None = None
    ) -> list[tuple]:
        table = access.table
        info = self.infos[table]
        ts = self.new[table] if side == NEW else self.old[table]
        if access.kind == "pk":
            pk = self.primary_key(table)
            at = [access.columns.index(p) for p in pk]
            keys = {tuple(v[i] for i in at) for v in values}
            return self.read_by_key(info, keys, ts, columns)
        if access.kind == "prefix":
            return self._read(info, self._prefix_ranges(info, access, values), ts, names=columns)
        # Through the index of access.index_column (the first lookup column).
        col = access.columns.index(access.index_column)
        firsts = {v[col] for v in values}
        ix = self.indexes[(table, access.index_column)]
        ranges = self._index_ranges(ix, firsts)
        ix_names = [c.name for c in ix.table_schema.visible_columns]
        at = [ix_names.index(f"p_{p}") for p in self.primary_key(table)]
        pks = {tuple(r[i] for i in at) for r in self._read(ix, ranges, self.state_ts)}
        # the row's key and the indexed column too: the gains below are told apart by them
        all_names = self.columns(table)
        pk = self.primary_key(table)
        want = all_names if columns is None else columns
        names = tuple(dict.fromkeys([*want, *pk, access.index_column]))
        rows = self.read_by_key(info, pks, ts, names) if pks else []
        if side == NEW:
            # Rows that gained the value since the index's version: the change's new images.
            ci = names.index(access.index_column)
            pk_at = [names.index(p) for p in pk]
            have = {tuple(r[i] for i in pk_at) for r in rows}
            cut = [all_names.index(n) for n in names]
            ch_rows, ch_w = self._gains(table).changes(table)
            for r, w in zip(ch_rows, ch_w, strict=True):
                if w > 0:
                    r = tuple(r[i] for i in cut)
                    if r[ci] in firsts and tuple(r[i] for i in pk_at) not in have:
                        rows.append(r)
        return columns_of(rows, [names.index(n) for n in want], len(names))

    def fetch_arrow(self, access: Access, side: str, values: set[tuple]) -> pa.Table:
        """``fetch`` decoded in bulk into one Arrow table over the table's visible columns (no
        tuple per row); the same rows, in another order."""
        table = access.table
        info = self.infos[table]
        ts = self.new[table] if side == NEW else self.old[table]
        pk = self.primary_key(table)
        if access.kind == "pk":
            at = [access.columns.index(p) for p in pk]
            return self.read_by_key_arrow(info, {tuple(v[i] for i in at) for v in values}, ts)
        if access.kind == "prefix":
            ranges = self._prefix_ranges(info, access, values)
            return _arrow_rows(info, self._read_raw(info, ranges, ts))
        col = access.columns.index(access.index_column)
        firsts = {v[col] for v in values}
        ix = self.indexes[(table, access.index_column)]
        found = _arrow_rows(ix, self._read_raw(ix, self._index_ranges(ix, firsts), self.state_ts))
        pks = set(zip(*(found[f"p_{p}"].to_pylist() for p in pk), strict=True))
        rows = self.read_by_key_arrow(info, pks, ts)
        if side != NEW or not firsts:
            return rows
        # Rows that gained the value since the index's version: the change's new images.
        data, weights = self._gains(table).changes_arrow(table)
        if not data.num_rows:
            return rows
        column = data[access.index_column]
        gained = data.filter(
            pc.and_(pc.greater(weights, 0), pc.is_in(column, pa.array(list(firsts), column.type)))
        )
        if gained.num_rows and rows.num_rows:
            gained = gained.join(
                rows.select(list(pk)), list(pk), join_type="left anti", use_threads=False
            )
        if not gained.num_rows:
            return rows
        # the join left its columns nullable: the same table under the decoded rows' schema
        return pa.concat_tables([rows, gained.select(rows.schema.names).cast(rows.schema)])

    @staticmethod
    def _prefix_ranges(
        info: TableInfo, access: Access, values: set[tuple]
    ) -> list[tuple[bytes, bytes]]:
        """The key ranges of ``info`` holding the rows whose leading key columns
        (``access.prefix``) equal those of ``values`` (over ``access.columns``), in key
        order."""
        at = [access.columns.index(p) for p in access.prefix]
        cols = info.table_schema.key_columns
        ranges = set()
        for v in values:
            stored = tuple(to_storage(info.name, c, v[i]) for c, i in zip(cols, at, strict=False))
            p = info.key_codec.encode_prefix(stored)
            ranges.add((p, KeyCodec.prefix_end(p)))
        return sorted(ranges)

    def _index_ranges(self, ix: TableInfo, firsts: set) -> list[tuple[bytes, bytes]]:
        """The key ranges of an index state table holding the rows of each of ``firsts``."""
        kcol = ix.table_schema.key_columns[0]
        ranges = []
        for v in firsts:
            p = ix.key_codec.encode_prefix((to_storage(ix.name, kcol, v),))
            ranges.append((p, KeyCodec.prefix_end(p)))
        ranges.sort()
        return ranges

    # ------------------------------------------------------------------ reads

    def read_by_key_arrow(self, info: TableInfo, keys: set[tuple], ts: int) -> pa.Table:
        """``read_by_key`` decoded in bulk into one Arrow table, in key order."""
        enc = sorted(encode_keys(info, keys))
        return _arrow_rows(info, self._read_raw(info, [(k, after(k)) for k in enc], ts))

    def read_by_key(
        self, info: TableInfo, keys: set[tuple], ts: int, columns: tuple[str, ...] | None = None
    ) -> list[tuple]:
        """The rows of ``info`` with these primary-key values at ``ts`` (absent ones skipped),
        over its visible columns or over ``columns``."""
        enc = sorted(encode_keys(info, keys))
        return self._read(info, [(k, after(k)) for k in enc], ts, names=columns)

    def read_state(self, info: TableInfo, keys: list[tuple]) -> dict[tuple, list]:
        """State rows by key at ``state_ts``: key tuple -> the non-key values in column order."""
        names = [c.name for c in info.table_schema.visible_columns]
        key_names = [c.name for c in info.table_schema.key_columns]
        ki = [names.index(n) for n in key_names]
        ri = [i for i, n in enumerate(names) if n not in key_names]
        ordered = sorted(encode_keys(info, keys))
        rows = self._read(info, [(k, after(k)) for k in ordered], self.state_ts)
        return {tuple(row[i] for i in ki): [row[i] for i in ri] for row in rows}

    def read_state_arrow(self, info: TableInfo, keys: list[tuple]) -> pa.Table:
        """The state rows of ``keys`` at ``state_ts`` (absent keys skipped), decoded in bulk
        into one Arrow table over the table's visible columns, in key order."""
        ordered = sorted(encode_keys(info, keys))
        return _arrow_rows(
            info, self._read_raw(info, [(k, after(k)) for k in ordered], self.state_ts)
        )

    def read_first_rows(self, info: TableInfo, width: int) -> list[tuple]:
        """The first ``width`` rows of state table ``info`` in key order at ``state_ts``, each
        over its visible columns (one request)."""
        start = info.key_codec.encode_prefix(())
        return self._read(info, [(start, KeyCodec.prefix_end(start))], self.state_ts, width)

    def read_first(
        self, info: TableInfo, prefixes: list[tuple], width: int
    ) -> dict[tuple, list[tuple[bytes, object]]]:
        """The first ``width`` rows (in key order) of each group prefix of a values state table
        at ``state_ts``: prefix -> [(o, v), ...]. One request for all prefixes."""
        cols = info.table_schema.key_columns
        ranges = []
        for p in sorted(prefixes, key=repr):
            stored = tuple(to_storage(info.name, c, v) for c, v in zip(cols, p, strict=False))
            start = info.key_codec.encode_prefix(stored)
            ranges.append((start, KeyCodec.prefix_end(start)))
        ranges.sort()
        names = [c.name for c in cols[: len(prefixes[0])]] if prefixes else []
        all_names = [c.name for c in info.table_schema.visible_columns]
        gi = [all_names.index(n) for n in names]
        oi, vi = all_names.index("o"), all_names.index("v")
        out: dict[tuple, list[tuple[bytes, object]]] = {}
        for row in self._read(info, ranges, self.state_ts, width):
            out.setdefault(tuple(row[i] for i in gi), []).append((row[oi], row[vi]))
        return out

    def _read(
        self,
        info: TableInfo,
        ranges: list[tuple[bytes, bytes]],
        ts: int,
        range_limit: int = 0,
        names: tuple[str, ...] | None = None,
    ) -> list[tuple]:
        """The rows of ``info`` in ``ranges`` at ``ts`` (one ScanRanges), decoded in bulk over
        its visible columns or over ``names``."""
        return _decode(info, self._read_raw(info, ranges, ts, range_limit), names)

    def _read_raw(
        self, info: TableInfo, ranges: list[tuple[bytes, bytes]], ts: int, range_limit: int = 0
    ) -> list[bytes]:
        """The encoded rows of ``info`` in ``ranges`` at ``ts`` (one ScanRanges)."""
        if not ranges:
            return []
        if self._direct_for(ts):
            assert self.direct is not None
            try:
                raws = self.direct.scan_ranges(ranges, ts, range_limit)
            except self._handed_back:
                pass
            else:
                with self._count_lock:
                    self.rows_read += len(raws)
                return raws
        c = self.client
        chunks = c.with_lock_wait(
            lambda: list(c.store.scan_ranges(ranges, ts, range_limit=range_limit))
        )
        with self._count_lock:  # reads may run in threads (AggregateState.delta)
            self.rows_read += sum(len(k) for k, _ in chunks)
        return [v for _, vals in chunks for v in vals]
