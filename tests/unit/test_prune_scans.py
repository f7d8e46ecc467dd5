"""``plan.prune_scans``: a Scan under a Project (directly or through Filters) keeps only the
columns they read; nothing above the Project changes, and the delta of a pruned tree equals the
query difference of the whole one on both paths (seeded random trees of
tests/unit/test_columnar_delta.py)."""

from __future__ import annotations

from spark_sink.ivm.ops.operator import consolidate
from spark_sink.ivm.plan import Attr, Call, Col, Filter, Join, Lit, Project, Scan, prune_scans, walk
from tests.unit.test_columnar_delta import _cases, _rules, _want

A = Scan(
    "a", (Attr(1, "id", "bigint", False), Attr(2, "k", "int", True), Attr(3, "v", "bigint", True))
)
B = Scan(
    "b", (Attr(4, "bid", "int", False), Attr(5, "name", "string", True), Attr(6, "r", "int", True))
)
OUT = Attr(10, "id", "bigint", False)


def test_a_scan_under_a_project_and_filters_keeps_what_they_read():
    cond = Call("gt", (Col(3), Lit(0, "bigint")), "boolean")
    root = Project(((OUT, Col(1)),), Filter(cond, A))
    got = prune_scans(root)
    assert isinstance(got, Project) and got.outputs == root.outputs
    assert isinstance(got.child, Filter) and got.child.cond == cond
    assert [a.name for a in got.child.child.columns()] == ["id", "v"]  # the table's order


def test_what_no_project_reads_through_is_left_whole():
    j = Join(A, Project(((Attr(11, "bid", "int", False), Col(4)),), B), (2,), (11,), None)
    got = prune_scans(j)
    assert got.left is A  # read by the join itself: every column stays
    assert [a.name for a in got.right.child.columns()] == ["bid"]
    assert prune_scans(
        Project(((OUT, Col(1)),), Project(((OUT, Col(1)),), A))
    ).child.child.attrs == (A.attrs[0],)


def test_pruned_trees_keep_their_deltas():
    pruned = 0
    for seed, root, old, new in _cases(300):
        cut = prune_scans(root)
        assert cut.columns() == root.columns()
        pruned += sum(len(s.attrs) for s in walk(cut) if isinstance(s, Scan)) < sum(
            len(s.attrs) for s in walk(root) if isinstance(s, Scan)
        )
        want = _want(root, old, new)
        z = _rules(cut, old, new).delta(cut)
        assert consolidate(z.rows, z.weights) == want, (seed, root)
        assert _rules(cut, old, new).delta_arrow(cut).to_counter() == want, (seed, root)
    assert pruned >= 10  # the trees with a Project right above a scan or its filters
