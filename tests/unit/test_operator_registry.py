"""The operator registry (``spark_sink.ivm.ops.operator``): every plan node type has exactly one
operator, the delta rules dispatch through it alone, and a new node type is added by one
operator module without touching the rules' runner."""

from __future__ import annotations

import typing
from dataclasses import dataclass

import pytest

from spark_sink.ivm import plan
from spark_sink.ivm.delta import DeltaRules, operator_tree, plan_accesses
from spark_sink.ivm.ops import operator as op_mod
from spark_sink.ivm.ops.operator import Operator, ZSet, consolidate, operator_for, register
from spark_sink.ivm.plan import Aggregate, Attr, Call, Col, Filter, Join, Lit, Project, Scan
from tests.unit.net_change import cut, net_change

A = Attr(1, "id", "bigint", False)
K = Attr(2, "k", "int", True)
V = Attr(3, "v", "int", True)
B_ID = Attr(4, "bid", "int", False)
B_NAME = Attr(5, "name", "string", True)


class _Inputs:
    """Two in-memory versions of a(id, k, v) and b(bid, name)."""

    def __init__(self, old: dict, new: dict) -> None:
        self.old, self.new = old, new

    def columns(self, table):
        return {"a": ("id", "k", "v"), "b": ("bid", "name")}[table]

    def primary_key(self, table):
        return {"a": ("id",), "b": ("bid",)}[table]

    def changes(self, table):
        return net_change(self.old[table], self.new[table])

    def fetch(self, access, side, values, columns=None):
        rows = list((self.new if side == "new" else self.old)[access.table].values())
        return cut(rows, self.columns(access.table), columns)


def _tree():
    """SELECT id, v + 1 FROM a JOIN b ON a.k = b.bid WHERE v > 0."""
    a = Scan("a", (A, K, V))
    b = Scan("b", (B_ID, B_NAME))
    cond = Call("gt", (Col(3), Lit(0, "int")), "boolean")
    j = Join(Filter(cond, a), b, (2,), (4,), None)
    out = Attr(6, "v1", "int", True)
    return Project(((A, Col(1)), (out, Call("add", (Col(3), Lit(1, "int")), "int"))), j)


def test_every_node_type_has_one_operator():
    for t in typing.get_args(plan.Node):
        assert operator_for(_blank(t)).node_type is t


def _blank(t):
    """An instance of node type ``t`` (fields left empty: only its type is looked at)."""
    return t.__new__(t)


def test_a_second_operator_for_a_node_type_is_refused():
    operator_for(_tree())  # the registry is loaded

    class Again(Operator[Filter]):
        node_type = Filter

    with pytest.raises(TypeError, match="two operators for Filter"):
        register(Again)


def test_a_node_type_without_an_operator_is_unsupported():
    @dataclass(frozen=True)
    class Intersect:
        left: object
        right: object

    with pytest.raises(plan.Unsupported, match="Intersect has no operator"):
        operator_for(Intersect(None, None))


def test_the_delta_rules_run_through_the_registry():
    """A join's delta, computed by the operators, equals the difference of the query's results
    at the two versions (computed here without the engine)."""
    old = {"a": {1: (1, 10, 5), 2: (2, 20, 0)}, "b": {10: (10, "x"), 20: (20, "y")}}
    new = {"a": {1: (1, 20, 5), 2: (2, 20, 3), 3: (3, 10, 7)}, "b": {10: (10, "x2")}}

    def result(s):
        return {
            (i, v + 1): 1
            for (i, k, v) in s["a"].values()
            if v > 0 and k in {bid for bid, _ in s["b"].values()}
        }

    z = DeltaRules(_Inputs(old, new)).delta(_tree())
    want = {r: 1 for r in result(new)}
    for r in result(old):
        want[r] = want.get(r, 0) - 1
    assert consolidate(z.rows, z.weights) == {r: w for r, w in want.items() if w}


def test_a_new_node_type_is_one_operator_module(monkeypatch):
    """What an operator module does, done here: a new node type (EXCEPT ALL's left-only rows,
    say, as a toy: rows of the child with k = 20 dropped) registers its operator and the rules
    maintain a tree holding it, with no change to the rules' runner."""

    @dataclass(frozen=True)
    class DropTwenty:
        child: object

        def inputs(self):
            return (self.child,)

        def columns(self):
            return self.child.columns()

    class DropTwentyOp(Operator):
        node_type = DropTwenty

        def delta(self, rules, node):
            d = rules.delta(node.child)
            keep = [i for i, r in enumerate(d.rows) if r[1] != 20]
            return ZSet(d.ids, [d.rows[i] for i in keep], [d.weights[i] for i in keep])

        def explain(self, node):
            return "DropTwenty: the change without k = 20"

    monkeypatch.setitem(op_mod._REGISTRY, DropTwenty, DropTwentyOp())
    tree = DropTwenty(Scan("a", (A, K, V)))
    old = {"a": {1: (1, 10, 5)}, "b": {}}
    new = {"a": {1: (1, 20, 5), 2: (2, 10, 1)}, "b": {}}
    z = DeltaRules(_Inputs(old, new)).delta(tree)
    assert consolidate(z.rows, z.weights) == {(1, 10, 5): -1, (2, 10, 1): 1}
    assert operator_tree(tree) == [
        "DropTwenty: the change without k = 20",
        "  Scan a (id, k, v): its change between two barriers",
    ]


def test_explain_tree_and_accesses_come_from_the_operators():
    lines = operator_tree(_tree())
    assert [line.split(":")[0] for line in lines] == [
        "Project",
        "  inner Join",
        "    Filter",
        "      Scan a (id, k, v)",
        "    Scan b (bid, name)",
    ]
    # the join reads b by its key (its primary key) and a by k (through an index on k)
    got = plan_accesses(_tree(), {"a": ("id",), "b": ("bid",)}.__getitem__)
    assert [(x.table, x.kind, x.columns) for x in got] == [
        ("b", "pk", ("bid",)),
        ("a", "index", ("k",)),
    ]


def test_an_aggregate_line_names_its_functions():
    agg = Aggregate(
        (Col(2),),
        ("int",),
        (plan.AggCall("sum", (Col(3),), "bigint", "int"),),
        ((K, plan.GroupRef(0)), (Attr(7, "s", "bigint", True), plan.AggRef(0))),
        Scan("a", (A, K, V)),
    )
    assert operator_tree(agg)[0].startswith("Aggregate SUM(...)")


def test_state_tables_are_declared_by_their_operators_and_built_by_role():
    """A stateful operator declares its state tables (an aggregate its groups and values, an
    outer join its match counts, a lookup by a non-key column its index), named as the store
    names state tables; every role declared has one Spark builder (spark_sink.ivm.state_builds),
    and a second builder for a role is refused."""
    from kvstore.table_info import STATE_INFIX, owner_of_state
    from spark_sink.ivm import state_builds
    from spark_sink.ivm.ops.scan import index_table
    from spark_sink.ivm.ops.state_table import STATE_INFIX as OPS_INFIX
    from spark_sink.ivm.ops.state_table import state_name
    from spark_sink.ivm.plan import AggCall, AggRef, GroupRef

    assert OPS_INFIX == STATE_INFIX
    assert owner_of_state(state_name("v", "groups")) == "v"
    a, b = Scan("a", (A, K, V)), Scan("b", (B_ID, B_NAME))
    agg = Aggregate(
        (Col(2),),
        ("int",),
        (AggCall("count", (), "bigint", ""), AggCall("max", (Col(3),), "int", "int")),
        ((K, GroupRef(0)), (Attr(7, "m", "int", True), AggRef(1))),
        a,
    )
    left = Join(a, b, (2,), (4,), None, "left")
    roles = {
        st.role
        for node, i in ((agg, 0), (left, 0))
        for st in operator_for(node).state_tables(node, "v", i)
    }
    access = op_mod.Access("a", ("k",), "index", "k")
    ix = index_table("v", access, {"id": "BIGINT", "k": "INT", "v": "INT"}, ("id",))
    assert (ix.name, ix.primary_key, ix.ddl) == (
        "v__sv_ix_a_k",
        ("k", "p_id"),
        "k INT, p_id BIGINT",
    )
    roles.add(ix.role)
    assert roles == {"groups", "values", "matches", "index"}
    assert operator_for(b).state_tables(b, "v", 0) == []  # a scan keeps none of its own
    import importlib
    import pkgutil

    for m in pkgutil.iter_modules(state_builds.__path__):
        importlib.import_module(f"{state_builds.__name__}.{m.name}")
    assert roles <= set(state_builds._BUILDERS)
    with pytest.raises(TypeError, match="two builders for state role 'groups'"):
        state_builds.builds("groups")(lambda ctx, st, info: None)
