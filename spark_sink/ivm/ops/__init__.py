"""The incremental engine's operators (issue 26), one module per plan node type.

Each node type of ``spark_sink.ivm.plan`` has one ``Operator`` (``operator.py``: the interface,
the registry by node type, row Z-sets and the vocabulary every operator shares), registered in
its module: ``scan.py``, ``filter.py``, ``project.py``, ``join.py`` (inner and outer joins, the
outer part's rule in ``outer_join.py``), ``semi_join.py`` (EXISTS, IN and their negations),
``scalar_filter.py`` (a filter reading uncorrelated scalar subqueries), ``aggregate.py``,
``union.py``, ``window.py`` and ``topk.py`` (ORDER BY ... LIMIT). The
operator owns its node's delta rule and keyed lookup (row-at-a-time today, over ``ZSet``), the
keyed reads they make, the column sets its result is unique on, the expressions it evaluates and
its ``explain()`` line; ``spark_sink.ivm.delta.DeltaRules`` runs an epoch through the registry.

Beside the row rules, the modules hold the columnar kernels. A change set is an ``ArrowZSet``
(``zset.py``): an Arrow table of rows plus an int64 ``__weight`` column. Each kernel is a pure
function over ArrowZSets and a small dataclass spec, states its delta rule and the SQL semantics
it keeps (NULLs, overflow), and is checked by a seeded property test (``tests/unit/ivm_ops/``)
against the plain-Python evaluator in ``reference.py``:

- ``filter.py``: WHERE (a row is kept only where the predicate is TRUE).
- ``project.py``: computed columns, weights kept.
- ``join.py``: inner equi-join (hash join, weights multiplied, NULL keys never match) and its
  bilinear delta rule.
- ``aggregate.py``: per-group COUNT(*), SUM and COUNT of integer columns folded from a change.
- ``union.py``: UNION ALL.
- ``outer_join.py``: LEFT/RIGHT/FULL outer equi-join (NULL-padded dangling rows, a NULL key
  always dangles) and its delta rule: the inner delta plus the touched keys' dangling rows
  retracted at the old state and emitted at the new.
- ``values.py``: per-group value multisets (the state MIN/MAX and DISTINCT keep) and the delta
  rule shared by aggregates read from them (touched groups' old rows retracted, new emitted).
- ``minmax.py``: MIN/MAX per group under deletions (NULLs ignored, NaN above every value).
- ``distinct.py``: COUNT(DISTINCT x) per group, and SELECT DISTINCT with its delta rule.
- ``keys.py``: the keys a change touches, and a Z-set narrowed to them (``restrict_to_keys``),
  the in-memory stand-in for the keyed reads the wiring will make, so a stateful rule's cost
  follows the change.

Nothing here imports pyspark: the algebra stays apart from Spark, and converting Catalyst's plan
or building state on Spark belongs in other modules.

**Wired in so far** (each with the row rules as its fallback and its reference):

- The view's tree over Arrow: a tree of Scan, Filter, Project, inner and outer Join and UNION
  ALL whose expressions ``arrow_expr.py`` translates (comparisons, AND/OR/NOT, IS NULL, IN of
  literals over integral, STRING, BOOLEAN, DATE and DECIMAL values; checked integral and exact
  DECIMAL arithmetic; casts that neither truncate nor round binary; IF, CASE, COALESCE;
  ``tests/unit/test_arrow_expr.py`` holds it to the row evaluator) takes the columnar path
  (``DeltaRules.delta_arrow``; the view's PUTs and DELETEs from ``spark_sink.ivm.view_change``;
  ``tests/unit/test_columnar_delta.py`` holds it to a plain evaluator and to the row path).
- ``aggregate.fold_changes`` folds the change of every grouped or global COUNT/SUM/AVG of
  integral and DECIMAL inputs (columns or translated expressions), over a source or a tree
  that runs over Arrow, and MIN/MAX and COUNT(DISTINCT x) of integral, DATE, TIMESTAMP,
  DECIMAL and STRING columns keep their values tables over Arrow
  (``spark_sink.ivm.aggregate_columnar``, the columnar aggregate path; its references
  ``tests/unit/test_aggregate_columnar.py`` and ``test_aggregate_values_columnar.py``).
- Index state tables follow their source's change over Arrow (``spark_sink.ivm.index_state``).

Not wired in: windows (their Arrow kernel exists beside the row rule, tested against the
reference, but the row rule maintains those views), DOUBLE arithmetic and comparisons, DOUBLE
sums (kept exact as a compensated pair by the row rule), MIN/MAX of DOUBLE and BINARY, global
MIN/MAX and DISTINCT, SUM(DISTINCT x) and FILTER clauses; the reference kernels
of the stateful operators (``outer_join.delta_outer_join``, ``minmax``, ``distinct``) take their
state as in-memory ArrowZSets, where the wired paths read it by key.

**State:** an operator declares the state tables it keeps (``Operator.state_tables``; the
layouts and roles in ``state_table.py``), and their build on Spark is a module of
``spark_sink.ivm.state_builds`` named after the operator, found by the table's role.
"""
