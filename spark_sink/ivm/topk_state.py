"""The ordered state of an ORDER BY ... LIMIT n view (``plan.TopK``): every row of the TopK's
input, keyed by its order key, with its multiplicity.

Layout (``ops.topk.topk_table``): ``o BINARY`` (the key), the input row's columns ``c0, c1, ...`` and
``n BIGINT``. ``o`` is memcomparable: per ORDER BY expression a NULL marker placed first or last
as the query says and the value's key encoding (complemented for DESC), then the whole row
(every column, NULLs first) as the tie-breaker. So the table's key order is Spark's order with
ties resolved by the row, and the first ``n`` rows of the table are the view. A row whose
encoding would pass the store's 480-byte key limit is tied-broken by a prefix of its row
encoding and a 16-byte digest of all of it instead (still one fixed place per row); an ORDER BY
key that alone passes the limit is refused with an error naming the view.

An epoch (``TopKState.step``) reads the first ``n + d`` rows of the table (``d``: the rows the
change deletes, so the new first ``n`` are among them or among the inserted rows) and the
stored multiplicities of the changed rows by key, and records the new multiplicities to write.
Its cost follows the change and ``n``, never the input's size.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvstore.errors import SchemaMismatch
from kvstore.mvcc.keys import MAX_USER_KEY_BYTES, KeyCodec, escape_bytes
from kvstore.schema import Column, TableSchema, parse_type, to_storage
from spark_sink.ivm.aggregate_columnar import COMPLEMENT
from spark_sink.ivm.expressions import compile_expr, ddl_of
from spark_sink.ivm.ops.arrow_expr import result_dtype
from spark_sink.ivm.plan import Col, TopK

if TYPE_CHECKING:
    from kvstore.table_info import TableInfo
    from spark_sink.ivm.inputs import StoreInputs

# Room for the key column's escaping (0x00 doubles) and the table prefix within the limit.
_KEY_ROOM = MAX_USER_KEY_BYTES - 8
_DIGEST = 16


def _order_dtype(node: TopK, e: Any) -> str:
    if isinstance(e, Col):
        return next(a.dtype for a in node.child.columns() if a.id == e.id)
    return result_dtype(e)


class _Encoder:
    """One value's memcomparable bytes (its NULL marker first)."""

    def __init__(self, dtype: str, descending: bool, nulls_first: bool) -> None:
        self.col = Column("v", parse_type(ddl_of(dtype)), nullable=True)
        self.codec = KeyCodec(0, TableSchema("topk", [self.col], ["v"]))
        self.descending = descending
        self.null = b"\x00" if nulls_first else b"\x02"

    def __call__(self, v: Any) -> bytes:
        if v is None:
            return self.null
        kind = self.col.type.kind
        if kind in ("STRING", "BINARY"):  # as the key codec encodes them, past its size limit
            b = escape_bytes(v.encode() if kind == "STRING" else bytes(v))
        else:
            b = self.codec.encode_values((to_storage("topk", self.col, v),))[4:]
        return b"\x01" + (b.translate(COMPLEMENT) if self.descending else b)


class TopKOrder:
    """``o`` of a row of the TopK's input (a tuple over ``node.child.columns()``)."""

    def __init__(self, node: TopK, view: str) -> None:
        pos = {a.id: i for i, a in enumerate(node.child.columns())}
        self.view = view
        self.exprs: list[Callable[[tuple], Any]] = [compile_expr(e, pos) for e, _, _ in node.order]
        self.sort = [
            _Encoder(_order_dtype(node, e), not asc, nulls_first)
            for e, asc, nulls_first in node.order
        ]
        self.row = [_Encoder(a.dtype, False, True) for a in node.child.columns()]

    def __call__(self, row: tuple) -> bytes:
        head = b"".join(enc(f(row)) for f, enc in zip(self.exprs, self.sort, strict=True))
        tail = b"".join(enc(v) for v, enc in zip(row, self.row, strict=True))
        if len(escape_bytes(head + tail)) <= _KEY_ROOM:
            return head + tail
        if len(escape_bytes(head)) > _KEY_ROOM - 2 * _DIGEST - 2:
            raise SchemaMismatch(
                f"view {self.view!r}: an ORDER BY key of {len(head)} bytes passes the store's "
                f"key limit of {MAX_USER_KEY_BYTES} bytes"
            )
        digest = hashlib.blake2b(tail, digest_size=_DIGEST).digest()
        room = _KEY_ROOM - len(escape_bytes(head)) - 2 * _DIGEST - 2
        cut = tail[: room // 2]  # escaping may double every byte
        return head + cut + b"\xff" + digest


def take(rows: list[tuple[bytes, tuple, int]], limit: int) -> list[tuple[tuple, int]]:
    """The first ``limit`` copies of ``rows`` ((o, row, multiplicity), any order) in ``o``
    order: [(row, copies)]."""
    out = []
    left = limit
    for _, row, m in sorted(rows, key=lambda x: x[0]):
        if left <= 0:
            break
        if m > 0:
            out.append((row, min(m, left)))
            left -= min(m, left)
    return out


class TopKState:
    """One TopK's ordered state during one epoch."""

    def __init__(self, node: TopK, info: TableInfo, inputs: StoreInputs, view: str) -> None:
        self.node = node
        self.info = info
        self.inputs = inputs
        self.view = view
        self.order = TopKOrder(node, view)
        self.width = len(node.child.columns())
        self._new: dict[bytes, tuple[tuple, int]] = {}  # o -> (row, new multiplicity)

    @property
    def upserts(self) -> list[list]:
        """[o, c0, ..., n] of each row whose multiplicity changed and is positive."""
        return [[o, *row, m] for o, (row, m) in self._new.items() if m > 0]

    @property
    def deletes(self) -> list[list]:
        """[o, c0, ..., 0] of each row whose multiplicity fell to 0."""
        return [[o, *row, 0] for o, (row, m) in self._new.items() if m == 0]

    def step(self, change: dict[tuple, int]) -> tuple[list, list]:
        """The view's rows before and after the input changes by ``change`` (row -> net
        weight): ([(row, copies)] at the old barrier, the same at the new one); records the new
        multiplicities to write."""
        by_o = {self.order(r): (r, w) for r, w in change.items()}
        gone = sum(-w for _, w in by_o.values() if w < 0)
        first = self.inputs.read_first_rows(self.info, max(1, self.node.limit + gone))
        stored = {r[0]: (tuple(r[1 : 1 + self.width]), int(r[-1])) for r in first}
        missing = [(o,) for o in by_o if o not in stored]
        if missing:
            for k, vals in self.inputs.read_state(self.info, missing).items():
                stored[k[0]] = (tuple(vals[: self.width]), int(vals[-1]))
        read = {r[0] for r in first}
        old = take([(o, r, m) for o, (r, m) in stored.items() if o in read], self.node.limit)
        now = dict(stored)
        for o, (row, w) in by_o.items():
            m = now.get(o, (row, 0))[1] + w
            if m < 0:
                raise SchemaMismatch(
                    f"view {self.view!r}: an ORDER BY ... LIMIT input row would occur {m} times; "
                    "the view's state is inconsistent with its sources (rebuild the view)"
                )
            now[o] = (row, m)
            self._new[o] = (row, m)
        new = take([(o, r, m) for o, (r, m) in now.items()], self.node.limit)
        return old, new
