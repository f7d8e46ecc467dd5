"""The columnar incremental engine's operators (issue 26), one module per operator.

A change set is an ``ArrowZSet`` (``zset.py``): an Arrow table of rows plus an int64
``__weight`` column. Each operator module exposes pure functions over ArrowZSets and small
dataclass specs, states its delta rule and the SQL semantics it keeps (NULLs, overflow), and is
checked by a seeded property test (``tests/unit/ivm_ops/``) against the plain-Python evaluator in
``reference.py``:

- ``filter.py``: WHERE (a row is kept only where the predicate is TRUE).
- ``project.py``: computed columns, weights kept.
- ``join.py``: inner equi-join (hash join, weights multiplied, NULL keys never match) and its
  bilinear delta rule.
- ``aggregate.py``: per-group COUNT(*), SUM and COUNT of integer columns folded from a change.
- ``union.py``: UNION ALL.

Nothing here imports pyspark: the algebra stays apart from Spark, and converting Catalyst's plan
or building state on Spark belongs in other modules.

**Not wired in yet.** No view is maintained by this package today: ``spark_sink.ivm.delta``
(row-at-a-time Z-sets of tuples) still maintains every incremental view. The plan for wiring it
in, operator by operator with the Spark differential tests as judge: an operator registry keyed
by ``spark_sink.ivm.plan`` node type (Scan, Filter, Project, Join, Union, Aggregate, Window), a
converter per node from ``plan.py``'s expressions and columns to these specs (pyarrow compute
expressions where the kernel matches Spark, Spark's evaluator from ``expressions.py`` over a batch
where it does not), then changes and keyed reads delivered as Arrow instead of tuples. Outer
joins, MIN/MAX, DISTINCT, exact DOUBLE and DECIMAL sums, and windows are not ported yet.
"""
