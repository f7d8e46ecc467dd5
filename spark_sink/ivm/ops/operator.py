"""What an operator of the incremental engine is, and the registry that finds one by plan node.

Every node type of ``spark_sink.ivm.plan`` (Scan, Filter, Project, Join, Aggregate, Union,
Window) has one ``Operator`` in its own module of this package, registered for that node type
with ``@register``. The operator owns what is particular to its node:

- ``delta``: the change of the node's result between the old and the new barrier, from its
  inputs' changes (``rules.delta(child)``) and keyed reads (``rules.lookup``);
- ``lookup``: the node's rows at one barrier whose columns equal given values, read by key
  through the nodes below (never a whole input);
- ``lookup_accesses`` / ``plan_accesses``: the keyed reads those two will make, worked out at
  build so a view whose reads cannot be keyed is refused before it runs;
- ``unique_sets``: the column sets on which its result is proven unique (a view's key);
- ``expressions``: every expression it evaluates with the row evaluator, and the columns each
  sees, so an expression the engine cannot evaluate is refused at build;
- ``explain``: its one line of ``explain()``'s operator tree.

``spark_sink.ivm.delta.DeltaRules`` runs an epoch by asking the registry for each node's
operator; nothing else dispatches on node types. A new operator (INTERSECT, say) is one module
here plus, in ``spark_sink.ivm.plan``, its node dataclass and the arm that converts Catalyst's
node into it.

This module also holds the vocabulary every operator shares: row Z-sets (``ZSet``), the two
barriers (``OLD``, ``NEW``), keyed access to a stored table (``Access``), what an epoch gives
the rules (``Inputs``) and ``NeedsBuild``. Nothing here imports pyspark.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_sink.ivm.delta import DeltaRules
    from spark_sink.ivm.ops.state_table import StateTable
    from spark_sink.ivm.ops.zset import ArrowZSet
    from spark_sink.ivm.plan import Attr, Expr, Node

OLD, NEW = "old", "new"

N = TypeVar("N", bound="Node")

PkOf = Callable[[str], tuple[str, ...]]  # a table's primary key columns (() if it has none)
Sets = list[frozenset[int]]


class NeedsBuild(Exception):
    """This epoch's change cannot be applied to the kept state exactly (a NaN in a DOUBLE sum,
    a NULL window partition, ...): the epoch is a build instead. ``str(e)`` says why; it is
    raised before the delta writes anything."""


@dataclass
class ZSet:
    """Rows over the columns ``ids`` (Spark expression ids), each with a weight."""

    ids: tuple[int, ...]
    rows: list[tuple] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def pos(self) -> dict[int, int]:
        return {c: i for i, c in enumerate(self.ids)}

    def values(self, cols: tuple[int, ...]) -> set[tuple]:
        """The distinct non-NULL tuples of ``cols`` (NULL never matches an equi-join)."""
        p = self.pos()
        idx = [p[c] for c in cols]
        out = set()
        for r in self.rows:
            t = tuple(r[i] for i in idx)
            if None not in t:
                out.add(t)
        return out

    def net_by_key(self, cols: tuple[int, ...]) -> dict[tuple, int]:
        """Per distinct non-NULL tuple of ``cols``, the sum of its rows' weights (a key whose
        weights cancel stays, with 0): the change a count state steps by (``MatchCounts``)."""
        p = self.pos()
        idx = [p[c] for c in cols]
        out: dict[tuple, int] = {}
        for r, w in zip(self.rows, self.weights, strict=True):
            k = tuple(r[i] for i in idx)
            if None not in k:  # a NULL key matches no join key: no count carries it
                out[k] = out.get(k, 0) + w
        return out


def consolidate(rows: Iterable[tuple], weights: Iterable[int]) -> dict[tuple, int]:
    """Sum the weights of equal rows; rows whose weights cancel are dropped."""
    acc: dict[tuple, int] = {}
    for r, w in zip(rows, weights, strict=True):
        acc[r] = acc.get(r, 0) + w
    return {r: w for r, w in acc.items() if w}


def columns_of(rows: list[tuple], idx: Sequence[int], width: int) -> list[tuple]:
    """``rows`` (each ``width`` wide) cut to the positions ``idx``, in that order, as tuples
    in a new list: the same tuples when ``idx`` is every position in order, else one C-level
    pick a row."""
    if list(idx) == list(range(width)):
        return list(rows)
    if len(idx) == 1:
        (i,) = idx
        return [(r[i],) for r in rows]
    return list(map(itemgetter(*idx), rows))


@dataclass(frozen=True)
class Access:
    """How rows of ``table`` are found by the values of ``columns``: ``pk`` (point reads of the
    table), ``prefix`` (a range read of the table per value of the leading primary-key columns
    ``prefix``, which ``columns`` hold) or ``index`` (a prefix read of the index on
    ``index_column``, then point reads)."""

    table: str
    columns: tuple[str, ...]
    kind: str  # pk | prefix | index
    index_column: str = ""
    prefix: tuple[str, ...] = ()


def choose_access(table: str, columns: tuple[str, ...], pk: tuple[str, ...]) -> Access:
    """By the primary key when ``columns`` cover it; else by its longest leading part they
    cover (TPC-H's lineitem by ``l_orderkey``, partsupp by ``ps_partkey``): one range read of
    the table itself per value, and no index to keep; else through an index on ``columns[0]``.

    Decision: a leading key column is taken over an index whatever its selectivity. A composite
    key usually leads with its parent's key (an order's lines, a part's suppliers), whose rows
    are few; a table keyed (region, id) looked up by (region, name) would read a whole region
    where an index on name reads one row, which a view over such a table can avoid by keying
    its table the other way."""
    if pk and set(pk) <= set(columns):
        return Access(table, columns, "pk")
    n = 0
    while n < len(pk) and pk[n] in columns:
        n += 1
    if n:
        return Access(table, columns, "prefix", prefix=pk[:n])
    return Access(table, columns, "index", columns[0])


class Inputs(Protocol):
    """What one epoch gives the delta rules (``spark_sink.ivm.inputs.StoreInputs``)."""

    def changes(self, table: str) -> tuple[list[tuple], list[int]]:
        """The table's net change between its old and new read ts: full rows in column order,
        with weights."""
        ...

    def fetch(
        self, access: Access, side: str, values: set[tuple], columns: tuple[str, ...] | None = None
    ) -> list[tuple]:
        """The rows of ``access.table`` at its ``side`` ts whose ``access.columns`` may equal
        one of ``values`` (a superset is allowed): full rows in column order, or over the
        columns ``columns`` in that order."""
        ...

    def columns(self, table: str) -> tuple[str, ...]: ...

    def primary_key(self, table: str) -> tuple[str, ...]: ...

    def changes_arrow(self, table: str) -> tuple[pa.Table, pa.Array]:
        """``changes(table)`` as Arrow: the rows over the table's visible columns, and their
        weights (int64)."""
        ...

    def fetch_arrow(self, access: Access, side: str, values: set[tuple]) -> pa.Table:
        """``fetch`` as one Arrow table over the table's visible columns."""
        ...


class Operator(Generic[N]):
    """The rules of the plan node type ``N`` (see the module docstring). The defaults are those
    of a node that passes its inputs' keyed reads through unchanged; each operator overrides
    what differs."""

    node_type: ClassVar[type]

    def delta(self, rules: DeltaRules, node: N) -> ZSet:
        """The change of ``node``'s result between the old and the new barrier."""
        raise NotImplementedError

    def lookup(
        self, rules: DeltaRules, node: N, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ZSet:
        """The rows of ``node``'s result at ``side`` whose ``ids`` equal one of ``values`` (never
        empty here; a superset is allowed: callers re-apply the join), each with weight 1."""
        from spark_sink.ivm.plan import Unsupported

        raise Unsupported(f"a lookup into {type(node).__name__}", code="JOIN")

    def lookup_accesses(
        self, node: N, ids: tuple[int, ...], pk_of: PkOf, out: list[Access]
    ) -> None:
        """Append to ``out`` the keyed reads ``lookup(node, ids, ...)`` will make; raise
        Unsupported when ``ids`` cannot be traced to a stored column."""
        from spark_sink.ivm.delta import lookup_accesses

        for c in node.inputs():
            lookup_accesses(c, ids, pk_of, out)

    def plan_accesses(self, node: N, pk_of: PkOf) -> list[Access]:
        """The keyed reads this node's own ``delta`` makes (not its inputs')."""
        return []

    def unique_sets(self, node: N, pk_of: PkOf) -> Sets:
        """Sets of ``node``'s output column ids on which no two result rows agree; [] when none
        is proven."""
        return []

    def expressions(self, node: N) -> list[tuple[Expr, dict[int, int], dict | None]]:
        """Each expression this node evaluates row by row, with the positions of the columns it
        sees and the aggregate environment (``compile_expr``'s arguments)."""
        return []

    def state_tables(self, node: N, view: str, index: int) -> list[StateTable]:
        """The state tables this node's rules read and write (``ops.state_table``), for the
        view ``view``; ``index``: the node's place among the plan's nodes of its type, in
        pre-order (it names the tables). Their build on Spark is ``spark_sink.ivm.state_builds``'s,
        by role."""
        return []

    def explain(self, node: N) -> str:
        """This node's line in ``explain()``'s operator tree: what it is and how it is kept."""
        return type(node).__name__

    # The columnar form of ``delta`` and ``lookup`` (the same rules over ``ArrowZSet``s whose
    # columns are named ``ops.arrow_expr.col_name(id)``), for the nodes whose
    # ``columnar_reason`` is None. ``DeltaRules.delta_arrow`` takes a whole tree that way or
    # not at all (``delta.columnar_reason``).

    def columnar_reason(self, node: N) -> str | None:
        """None when this node's own rules run over Arrow with Spark's results (its inputs are
        asked on their own), else why not."""
        return f"{type(node).__name__} has no columnar rule"

    def delta_arrow(self, rules: DeltaRules, node: N) -> ArrowZSet:
        """``delta`` over Arrow; ``ops.arrow_expr.NotColumnar`` when this epoch's data is not
        taken that way (the row rules then take the epoch)."""
        raise NotImplementedError

    def lookup_arrow(
        self, rules: DeltaRules, node: N, ids: tuple[int, ...], values: set[tuple], side: str
    ) -> ArrowZSet:
        """``lookup`` over Arrow (``values`` may be empty: the result is then empty, with the
        node's Arrow schema)."""
        raise NotImplementedError


_REGISTRY: dict[type, Operator[Any]] = {}
_loading = threading.Lock()
_loaded = False


def register(cls: type[Operator[Any]]) -> type[Operator[Any]]:
    """Class decorator: ``cls`` is the operator of the node type ``cls.node_type``."""
    if cls.node_type in _REGISTRY:
        raise TypeError(f"two operators for {cls.node_type.__name__}")
    _REGISTRY[cls.node_type] = cls()
    return cls


def operator_for(node: Node) -> Operator[Any]:
    """The registered operator of ``node``'s type (the package's modules are imported on first
    use, so adding an operator module is enough to register it)."""
    global _loaded
    if not _loaded:
        with _loading:  # a view job's threads may ask at once: none sees half a registry
            if not _loaded:
                import spark_sink.ivm.ops as pkg

                for m in pkgutil.iter_modules(pkg.__path__):
                    importlib.import_module(f"{pkg.__name__}.{m.name}")
                _loaded = True
    op = _REGISTRY.get(type(node))
    if op is None:
        from spark_sink.ivm.plan import Unsupported

        raise Unsupported(f"{type(node).__name__} has no operator", code="PLAN_NODE")
    return op


def sees(columns: tuple[Attr, ...]) -> dict[int, int]:
    """Column id -> position, for expressions over rows of ``columns``."""
    return {a.id: i for i, a in enumerate(columns)}
