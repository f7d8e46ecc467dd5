"""Shared generators for the operators' property tests: small random Z-sets over two fixed
schemas, drawn from tiny domains so rows repeat, with NULLs in every column, NaNs of two bit
patterns, -0.0 beside 0.0, and weights from -3 to 3 (0 included)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import Phase, find, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from spark_sink.ivm.ops import reference as ref
from spark_sink.ivm.ops.zset import ArrowZSet

# deterministic (a seeded property test): the same examples on every run, no example database
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None)
# for a delta rule over a history (several steps, each a few operator runs): fewer examples
STEPS = settings(max_examples=50, deadline=None, derandomize=True, database=None)
# how hard a planted-fault test searches for the counterexample it must find (the first one
# found is enough: shrinking it would cost seconds and prove nothing more)
SEARCH = settings(
    max_examples=2000,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.generate,),
)

LEFT = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("f", pa.float64()), ("s", pa.string())])
RIGHT = pa.schema([("j", pa.int64()), ("u", pa.int64()), ("g", pa.float64())])

ints = st.sampled_from([None, 0, 1, 2])
small = st.one_of(st.none(), st.integers(-3, 3))
floats = st.sampled_from([None, 0.0, -0.0, 1.5, float("nan"), -float("nan")])
strs = st.sampled_from([None, "a", "b"])
weights = st.integers(-3, 3)

Rows = tuple[list[tuple], list[int]]


def rows_of(
    *columns: SearchStrategy[Any], max_size: int = 8, w: SearchStrategy[int] = weights
) -> SearchStrategy[Rows]:
    pairs = st.lists(st.tuples(st.tuples(*columns), w), max_size=max_size)
    return pairs.map(lambda ps: ([r for r, _ in ps], [w for _, w in ps]))


left_rows = rows_of(ints, small, floats, strs)
right_rows = rows_of(ints, small, floats)

# Tables at successive barriers: bags (every weight positive), so a stateful operator's delta
# rule is checked over the changes a real source makes (a step's change is the next bag minus
# the last, deletions and updates included), with its state carried from step to step
left_bags = rows_of(ints, small, floats, strs, max_size=6, w=st.integers(1, 3))
right_bags = rows_of(ints, small, floats, max_size=6, w=st.integers(1, 3))


def histories(bags: SearchStrategy[Rows]) -> SearchStrategy[list[Rows]]:
    """Two to four successive states of one table."""
    return st.lists(bags, min_size=2, max_size=4)


def arrow(schema: pa.Schema, rw: Rows) -> ArrowZSet:
    return ArrowZSet.from_rows(schema, rw[0], rw[1])


def counter(rw: Rows) -> ref.Counter:
    return ref.zset(rw[0], rw[1])


def rows_counter(t: pa.Table) -> ref.Counter:
    """A table of distinct rows (an aggregate's per-group output) as ``{row: 1}``."""
    out: ref.Counter = {}
    for r in t.to_pylist():
        key = tuple(ref.canon(v) for v in r.values())
        assert key not in out, f"group {key} appears twice"
        out[key] = 1
    return out


def caught(strategy: SearchStrategy[Any], wrong: Any) -> Any:
    """The simplest example on which ``wrong(example)`` is true (a planted fault shows); fails
    the test when the search finds none (the harness would miss that fault)."""
    return find(strategy, wrong, settings=SEARCH)


def null_keys_filled(z: ArrowZSet, keys: tuple[str, ...]) -> ArrowZSet:
    """``z`` with NULLs in ``keys`` replaced by -99 (a join over it lets NULL keys match: the
    planted fault of the join tests)."""
    t = z.table
    for k in keys:
        i = t.schema.get_field_index(k)
        t = t.set_column(i, t.schema.field(i), pc.fill_null(t[k], pa.scalar(-99, t[k].type)))
    return ArrowZSet(t)


def as_zset(out: ArrowZSet | pa.Table) -> ArrowZSet:
    """An operator's output as a Z-set (a table of distinct rows: each weight 1)."""
    return out if isinstance(out, ArrowZSet) else ArrowZSet.from_table(out)


def follow(
    history: list[Rows],
    schema: pa.Schema,
    whole: Callable[[ArrowZSet], ArrowZSet | pa.Table],
    build: Callable[[ArrowZSet], ArrowZSet],
    fold: Callable[[ArrowZSet, ArrowZSet], ArrowZSet],
    delta: Callable[[ArrowZSet, ArrowZSet], ArrowZSet],
) -> tuple[bool, ArrowZSet]:
    """Runs a stateful operator's delta rule over a table's ``history``: the state built from the
    first state, then per step ``delta(state, change)`` and ``state = fold(state, change)``.
    Returns whether every step's rule equalled ``whole(new) - whole(old)``, and the output
    carried from ``whole(first)`` through every step's rule."""
    tables = [arrow(schema, h) for h in history]
    state, out, exact = build(tables[0]), as_zset(whole(tables[0])), True
    for old, new in zip(tables, tables[1:], strict=False):
        change = new - old
        rule = delta(state, change)
        exact &= rule.to_counter() == (as_zset(whole(new)) - as_zset(whole(old))).to_counter()
        state, out = fold(state, change), out + rule
    return exact, out
