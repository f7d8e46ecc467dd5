"""A delta epoch computed by the executors: the same delta rules as the driver's, run as one Spark
job over the barrier's change, for a change too large to pass through the driver.

The job has three stages, and no row of a source, of the change or of the view reaches the
driver (each task yields counters; the driver sums one row of them):

1. **Read.** One task per changed source reads its change records (``StoreInputs
   .change_records``: directly from LMDB on the server's host, else over gRPC), each record one
   row (the source, its pre-image, its post-image), so a key's two images stay together.
2. **Slice.** The records are dealt round-robin into ``parts`` slices. Each task runs the delta
   rules (``DeltaRules``, over Arrow where the tree allows it, as the driver's epochs do) over its
   slice as the whole change of the sources (``StoreInputs``'s ``given``): below the view's one
   aggregate (or over the whole plan when it has none), and writes its slice's share of the index
   state tables (each changed key's entries depend on its two images only). This is
   exact because every operator allowed there is linear in the change: a filter and a project
   map rows, a union concatenates, and an inner join's rule ``dL ⋈ R_old + L_new ⋈ dR`` reads
   the other side from the store at a fixed barrier, never from the change, so the slices'
   results add up to the whole change's. Each result row is tagged with a part, a stable hash of
   the GROUP BY values the view's key is made of (or, with no aggregate, of the view's key), and
   each part's rows travel as one Arrow IPC stream (pickled rows where the row rules ran).
3. **Write.** The rows are shuffled by part. Each task consolidates its groups (or keys): it
   folds their change into the group state read by key at the epoch's snapshot
   (``AggregateState``, its columnar fold where it applies), runs the nodes above the aggregate,
   and prewrites the view's and the group state's mutations as secondaries of the epoch's
   primary, as the driver would have (``spark_sink.ivm.mutations``). A group or a view key lives in one part, so no key is written
   by two tasks; a retried task writes the same mutations again under the same start_ts.

The driver commits (or, on any task's error, aborts) the epoch as for a driver delta.

What runs here (``executor_reason`` says why not): a tree of scans, filters, projects, unions
and inner joins, optionally under one aggregate of COUNT, SUM and AVG with only filters and
projects above it, whose view key is made of GROUP BY values. An index lookup at the new barrier
adds the change's new images of its table (``StoreInputs.fetch``), which a slice does not hold
all of: the slice's task is given its table's whole change for that (``_whole_change``, read
once per worker process and epoch). Outer and semi joins, windows, MIN/MAX, DISTINCT aggregates,
scalar subqueries and ORDER BY ... LIMIT decide per key over both sides' changes or keep ordered
state, so a slice cannot: those views take the driver's delta or a build.

Where: ``SNAPVIEW_DELTA_ON`` (read, never set, by this library) is ``auto`` (the cost model
chooses, ``spark_sink.ivm.cost``), ``driver`` or ``executors`` (every delta epoch of an
eligible view runs here: for tests and for comparing the two).
"""

from __future__ import annotations

import datetime
import functools
import os
import pickle
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from coordinator.epoch_attempt import DirectInfo, EpochTarget, Heartbeat
from coordinator.process_clients import client_for
from kvstore.collector_pause import collector_paused
from kvstore.errors import InvalidArgument, SchemaMismatch
from kvstore.table_info import TableInfo
from spark_sink.ivm.aggregate import AggregateState
from spark_sink.ivm.delta import DeltaRules, columnar_reason
from spark_sink.ivm.inputs import StoreInputs, add_images
from spark_sink.ivm.mutations import (
    index_mutations,
    refuse_a_second_row,
    state_mutations,
    view_mutations,
    view_mutations_arrow,
)
from spark_sink.ivm.ops.arrow_expr import HANDED_BACK, arrow_expr, col_name
from spark_sink.ivm.ops.operator import ZSet
from spark_sink.ivm.ops.project import acero_project
from spark_sink.ivm.ops.zset import WEIGHT, ArrowZSet
from spark_sink.ivm.plan import (
    Aggregate,
    Attr,
    Col,
    Expr,
    Filter,
    GroupRef,
    Join,
    Node,
    Project,
    Scan,
    Union,
    walk,
)
from spark_sink.ivm.plan_check import IncrementalPlan
from spark_sink.partition_writer import direct_reader, write_mutations

DELTA_ON_ENV = "SNAPVIEW_DELTA_ON"
READ_BATCH = 20_000  # change records per Arrow batch out of a read task

_SRC, _OLD, _NEW = "__sv_src", "__sv_old", "__sv_new"
_ROW_SLICES = "__sv_row_slices"  # slices whose change the row rules computed (not over Arrow)
_PART, _ROWS, _CHANGES, _LOOKUPS, _MUTATIONS = (
    "__sv_part",
    "__sv_rows",
    "__sv_changes",
    "__sv_lookups",
    "__sv_mutations",
)
_IMAGES = pa.schema([(_SRC, pa.int32()), (_OLD, pa.binary()), (_NEW, pa.binary())])
_KEYED = pa.schema(
    [
        (_PART, pa.int32()),
        (_ROWS, pa.binary()),
        (_CHANGES, pa.int64()),
        (_LOOKUPS, pa.int64()),
        (_MUTATIONS, pa.int64()),
        (_ROW_SLICES, pa.int64()),
    ]
)
_COUNTS = pa.schema(list(_KEYED)[2:])  # a write task's counters: the keyed rows' counters


def delta_on() -> str:
    """Where delta epochs run, by SNAPVIEW_DELTA_ON: ``auto`` (unset: by cost), ``driver`` or
    ``executors``; any other value is refused, naming it."""
    value = os.environ.get(DELTA_ON_ENV, "").strip().lower()
    if value in ("", "auto"):
        return "auto"
    if value in ("driver", "executors"):
        return value
    raise InvalidArgument(
        f"{DELTA_ON_ENV}={os.environ[DELTA_ON_ENV]!r}: expected auto (the default: by cost), "
        "driver or executors"
    )


_LINEAR = (Scan, Filter, Project, Union)


def executor_reason(plan: IncrementalPlan, key_ids: tuple[int, ...] | None) -> str | None:
    """None when the executors can compute ``plan``'s delta over slices of the change (see the
    module docstring), else the first reason they cannot. ``key_ids``: the root's columns that
    are the view's primary key (None for a one-row view)."""
    aggs = [n for n in walk(plan.root) if isinstance(n, Aggregate)]
    if len(aggs) > 1:
        return "more than one aggregate"
    kept = sorted({s.role for s in plan.state} - {"groups", "index"})
    if kept:
        return f"state of role {kept[0]!r} is decided over the whole change"
    below = plan.root
    if aggs:
        agg = aggs[0]
        if any(c.distinct or c.kind not in ("count", "sum", "avg") for c in agg.aggs):
            return "an aggregate other than COUNT, SUM and AVG"
        n = plan.root
        while n is not agg:
            if not isinstance(n, Project | Filter):
                return f"a {type(n).__name__} above the aggregate"
            n = n.child
        below = agg.child
    for n in walk(below):
        if isinstance(n, Join):
            if n.kind != "inner":
                return f"a {n.kind} outer join"
        elif not isinstance(n, _LINEAR):
            return f"a {type(n).__name__}"
    if key_ids is not None and partition_key(plan.root, key_ids) is None:
        return "the view's key is not made of GROUP BY columns"
    return None


def view_key_ids(
    root: Node, columns: list[str], primary_key: tuple[str, ...] | list[str], one_row: bool
) -> tuple[int, ...] | None:
    """The ids of ``root``'s columns that are the view's primary key (the view's visible
    ``columns`` are the root's, in order); None for a one-row view."""
    if one_row:
        return None
    cols = root.columns()
    return tuple(cols[columns.index(k)].id for k in primary_key)


def partition_key(root: Node, key_ids: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """What the write stage is partitioned by, so that every view key (and every group) is
    written by one task: with an aggregate, the positions of the GROUP BY expressions the view's
    key columns are (traced through the projects and filters above it); without, the key's
    positions among the root's columns; () for a one-row view. None when a key column is not a
    GROUP BY value (a key computed above the aggregate)."""
    if key_ids is None:
        return ()
    agg = _aggregate(root)
    if agg is None:
        cols = [a.id for a in root.columns()]
        return tuple(cols.index(i) for i in key_ids)
    ids = list(key_ids)
    n = root
    while n is not agg:
        if isinstance(n, Project):
            exprs = {a.id: e for a, e in n.outputs}
            traced = [exprs.get(i) for i in ids]
            if not all(isinstance(e, Col) for e in traced):
                return None
            ids = [e.id for e in traced if isinstance(e, Col)]
        assert isinstance(n, Project | Filter)  # only these above it (executor_reason)
        n = n.child
    outs = {a.id: e for a, e in agg.outputs}
    groups = [outs.get(i) for i in ids]
    if not all(isinstance(g, GroupRef) for g in groups):
        return None
    return tuple(g.index for g in groups if isinstance(g, GroupRef))


@dataclass(frozen=True)
class ExecutorJob:
    """One epoch's delta on the executors: what every task needs (pickled to them)."""

    root: Node
    infos: dict[str, TableInfo]  # every source
    old: dict[str, int]  # each source's read ts at the previous barrier
    new: dict[str, int]  # and at this one
    state_ts: int  # where the group state is read: the epoch's snapshot
    changed: tuple[str, ...]  # the sources with a change to read
    view: EpochTarget
    groups: EpochTarget | None  # the aggregate's group state table, if the plan has one
    indexes: dict[tuple[str, str], EpochTarget]  # each index state table, by (source, column)
    one_row: bool
    part_by: tuple[int, ...]  # partition_key: GROUP BY positions, or the view key's positions
    parts: int
    direct: DirectInfo | None  # for direct reads on the server's host
    # whether the plan leaves the view's key unproven: each task then checks the keys its
    # part adds against the view (spark_sink.ivm.mutations.keys_new_to_view)
    check_keys: bool = False


def run(session: SparkSession, job: ExecutorJob) -> dict[str, int]:
    """Prewrite the epoch's delta of the view and its group state from the executors; returns
    the counters (``changes`` read, ``lookups``, ``mutations`` prewritten, and ``row_slices``:
    the slices the row rules computed, not the tree over Arrow). Raises what a task
    raised (the caller aborts the epoch: nothing of it is visible)."""
    if not job.changed:
        return {"changes": 0, "lookups": 0, "mutations": 0, "row_slices": 0}
    n = len(job.changed)
    images = session.range(0, n, 1, n).mapInArrow(
        functools.partial(_read_changes, job), from_arrow_schema(_IMAGES)
    )
    keyed = images.repartition(job.parts).mapInArrow(
        functools.partial(_slice_delta, job), from_arrow_schema(_KEYED)
    )
    counts = keyed.repartition(job.parts, _PART).mapInArrow(
        functools.partial(_write_part, job), from_arrow_schema(_COUNTS)
    )
    try:
        row = counts.agg(*[F.sum(c).alias(c) for c in _COUNTS.names]).collect()[0]
    except Exception as e:
        refused = _refusal_in(e)
        if refused is None:
            raise
        raise refused from e
    return {
        "changes": int(row[_CHANGES] or 0),
        "lookups": int(row[_LOOKUPS] or 0),
        "mutations": int(row[_MUTATIONS] or 0),
        "row_slices": int(row[_ROW_SLICES] or 0),
    }


_REFUSAL = re.compile(r"kvstore\.errors\.SchemaMismatch: (.+)")


def _refusal_in(error: BaseException) -> SchemaMismatch | None:
    """The SchemaMismatch a task raised (a view key given a second row), out of the Spark
    error that carries it as text: the caller then sees the same error as from a driver
    delta, naming the view and the key."""
    m = _REFUSAL.search(str(error))
    return SchemaMismatch(m.group(1).strip()) if m else None


def _inputs(job: ExecutorJob, given: dict | None) -> StoreInputs:
    client = client_for(job.view.coordinator, job.view.token)
    return StoreInputs(
        client,
        job.infos,
        job.old,
        job.new,
        job.state_ts,
        {k: t.info for k, t in job.indexes.items()},
        direct=direct_reader(job.direct),
        given=given,
        whole=None if given is None else functools.partial(_whole_change, job),
    )


# A source's whole change, read by a slice's task for an index lookup's gains
# (StoreInputs.whole) and kept for the other slices this worker process runs in the same epoch:
# at most _WHOLE_MAX entries, and none of an earlier epoch of the same job.
_WHOLE: dict[tuple[str, int, int, str], tuple[list[bytes], list[int]]] = {}
_WHOLE_MAX = 4
_whole_lock = threading.Lock()


def _whole_change(job: ExecutorJob, table: str) -> tuple[list[bytes], list[int]]:
    """``table``'s whole change in this epoch as images and weights (read once per worker
    process and epoch)."""
    key = (job.view.job, job.view.epoch, job.view.start_ts, table)
    with _whole_lock:
        got = _WHOLE.get(key)
    if got is not None:
        return got
    raws: list[bytes] = []
    weights: list[int] = []
    for r in _inputs(job, None).change_records(table):
        add_images(raws, weights, r.old, r.new)
    with _whole_lock:
        for k in [k for k in _WHOLE if k[0] == key[0] and k[1:3] != key[1:3]]:
            del _WHOLE[k]
        while len(_WHOLE) >= _WHOLE_MAX:
            del _WHOLE[next(iter(_WHOLE))]
        _WHOLE[key] = (raws, weights)
    return raws, weights


def _read_changes(job: ExecutorJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 1: each source numbered in the batches, its change records as rows."""
    inputs = _inputs(job, None)
    for batch in batches:
        for i in batch.column(0).to_pylist():
            recs = inputs.change_records(job.changed[i])
            for off in range(0, len(recs), READ_BATCH):
                part = recs[off : off + READ_BATCH]
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array([i] * len(part), pa.int32()),
                        pa.array([r.old for r in part], pa.binary()),
                        pa.array([r.new for r in part], pa.binary()),
                    ],
                    schema=_IMAGES,
                )


def _aggregate(root: Node) -> Aggregate | None:
    return next((n for n in walk(root) if isinstance(n, Aggregate)), None)


def part_of(values: tuple, parts: int) -> int:
    """The part of a group (or a view key) by its values: the same in every process (no
    Python ``hash``, which is salted per process), and one part for the values SQL groups
    together (-0.0 with 0.0, every NaN), whether they were decoded as rows or read from Arrow
    (a TIMESTAMP as an aware or a naive UTC datetime)."""
    return zlib.crc32(repr(tuple(_normal(v) for v in values)).encode()) % parts


def _normal(v: object) -> object:
    if isinstance(v, float):
        return "nan" if v != v else 0.0 if v == 0 else v
    if isinstance(v, datetime.datetime) and v.tzinfo is not None:
        return v.astimezone(datetime.UTC).replace(tzinfo=None)
    return v


def _slice_delta(job: ExecutorJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 2: the delta rules over this task's slice of the change, up to the aggregate's
    input (or the view), over Arrow where the tree allows it (``DeltaRules.delta_arrow``), else
    by the row rules; the result cut by part, each part one payload (``_encode``)."""
    given: dict[str, tuple[list[bytes], list[int]]] = {t: ([], []) for t in job.infos}
    written = 0
    for batch in batches:
        srcs = batch.column(0).to_pylist()
        olds = batch.column(1).to_pylist()
        news = batch.column(2).to_pylist()
        for s, o, nw in zip(srcs, olds, news, strict=True):
            add_images(*given[job.changed[s]], o, nw)
    with collector_paused():
        inputs = _inputs(job, given)
        if job.indexes:  # each changed key's index entries: this slice's share, written here
            with Heartbeat.of(job.view):
                for (source, column), tgt in job.indexes.items():
                    muts = index_mutations(inputs, tgt.info, source, column)
                    write_mutations(inputs.client, tgt, muts)
                    written += len(muts)
        below = _below(job.root)
        rules = DeltaRules(inputs)
        payloads = None
        if columnar_reason(below) is None:
            try:
                payloads = _arrow_parts(job, below, rules.delta_arrow(below).table)
            except HANDED_BACK:
                rules = DeltaRules(inputs)  # the row rules take the slice, from scratch
        if payloads is None:
            payloads = _row_parts(job, below, rules, rules.delta(below))
        lookups = rules.lookups + inputs.rows_read
    for p, payload in payloads.items():
        yield _keyed_row(p, payload, 0, 0, 0, 0)
    # this task's counters, in a row of no rows (part 0: any part would do)
    by_rows = int(any(p[:1] == _ROWS_PICKLED for p in payloads.values()))
    yield _keyed_row(0, None, inputs.changes_read, lookups, written, by_rows)


def _keyed_row(
    part: int, payload: bytes | None, changes: int, lookups: int, mutations: int, by_rows: int
) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([part], pa.int32()),
            pa.array([payload], pa.binary()),
            pa.array([changes], pa.int64()),
            pa.array([lookups], pa.int64()),
            pa.array([mutations], pa.int64()),
            pa.array([by_rows], pa.int64()),
        ],
        schema=_KEYED,
    )


def _below(root: Node) -> Node:
    """The node whose change the slices compute: the aggregate's input, or the whole tree."""
    agg = _aggregate(root)
    return agg.child if agg is not None else root


def _key_columns(job: ExecutorJob, below: Node) -> tuple[list[Expr], dict[int, Attr]]:
    """The expressions over ``below``'s columns that a row's part is computed from."""
    agg = _aggregate(job.root)
    cols = below.columns()
    attrs = {a.id: a for a in cols}
    if agg is None:
        return [Col(cols[i].id) for i in job.part_by], attrs
    return [agg.groups[i] for i in job.part_by], attrs


_ARROW, _ROWS_PICKLED = b"A", b"R"  # a payload's first byte: Arrow IPC, or pickled rows


def _arrow_parts(job: ExecutorJob, below: Node, table: pa.Table) -> dict[int, bytes]:
    """The slice's change (columns ``c<id>`` of ``below``, then the weight) cut by part, each
    part an Arrow IPC stream; NotColumnar when a key expression has no Arrow form."""
    exprs, attrs = _key_columns(job, below)
    if table.num_rows == 0:
        return {}
    keys = acero_project(
        table, [arrow_expr(e, attrs) for e in exprs], [f"k{i}" for i in range(len(exprs))]
    )
    values = [keys.column(i).to_pylist() for i in range(keys.num_columns)]
    parts = pa.array(
        [part_of(k, job.parts) for k in zip(*values, strict=True)]
        if values
        else [part_of((), job.parts)] * table.num_rows,
        pa.int32(),
    )
    out = {}
    for p in pc.unique(parts).to_pylist():
        piece = table.filter(pc.equal(parts, p))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, piece.schema) as w:
            w.write_table(piece)
        out[p] = _ARROW + sink.getvalue().to_pybytes()
    return out


def _row_parts(job: ExecutorJob, below: Node, rules: DeltaRules, z: ZSet) -> dict[int, bytes]:
    """``_arrow_parts`` for a change computed by the row rules: each part's rows pickled."""
    exprs, _ = _key_columns(job, below)
    pos = z.pos()
    fns = [rules.compiled(("part", i), e, pos) for i, e in enumerate(exprs)]
    by_part: dict[int, tuple[list[tuple], list[int]]] = {}
    for r, w in zip(z.rows, z.weights, strict=True):
        rows, weights = by_part.setdefault(part_of(tuple(f(r) for f in fns), job.parts), ([], []))
        rows.append(r)
        weights.append(w)
    return {p: _ROWS_PICKLED + pickle.dumps(rw, protocol=5) for p, rw in by_part.items()}


class _ArrowChange(DeltaRules):
    """Rules whose ``below`` node's change is given as Arrow (``table``: its columns ``c<id>``,
    then the weight), taken as rows only if a rule asks for them (a fold handed back)."""

    def __init__(self, inputs: StoreInputs, aggregates: dict, below: Node, table: pa.Table) -> None:
        super().__init__(inputs, aggregates)
        self._below, self._table = below, table

    def delta(self, node: Node) -> ZSet:
        if node is self._below and id(node) not in self._deltas:
            self.given(node, _rows_of(node, self._table))
        return super().delta(node)


def _rows_of(node: Node, table: pa.Table) -> ZSet:
    ids = tuple(a.id for a in node.columns())
    cols = [table[col_name(i)].to_pylist() for i in ids]
    return ZSet(ids, list(zip(*cols, strict=True)), table[WEIGHT].to_pylist())


def _write_part(job: ExecutorJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 3: this task's groups (or view keys) folded, the nodes above run, and the view's
    and the group state's mutations prewritten into the epoch."""
    agg = _aggregate(job.root)
    below = _below(job.root)
    ids = tuple(a.id for a in below.columns())
    tables: list[pa.Table] = []
    z = ZSet(ids)
    changes = lookups = mutations = by_rows = 0
    for batch in batches:
        changes += sum(batch.column(2).to_pylist())
        lookups += sum(batch.column(3).to_pylist())
        mutations += sum(batch.column(4).to_pylist())
        by_rows += sum(batch.column(5).to_pylist())
        for payload in batch.column(1).to_pylist():
            if payload is None:
                continue
            if payload[:1] == _ARROW:
                tables.append(pa.ipc.open_stream(payload[1:]).read_all())
            else:
                rows, weights = pickle.loads(payload[1:])
                z.rows += rows
                z.weights += weights
    if tables and z.rows:  # slices that went both ways (rare): all as rows
        for t in tables:
            more = _rows_of(below, t)
            z.rows += more.rows
            z.weights += more.weights
        tables = []
    if tables or z.rows:
        with Heartbeat.of(job.view), collector_paused():
            inputs = _inputs(job, {})
            client = inputs.client
            view = job.view.info
            table = pa.concat_tables(tables) if tables else None
            groups = job.groups
            state = None
            if agg is not None:
                assert groups is not None  # an aggregate keeps a group state table
                state = AggregateState(agg, groups.info, inputs, view.name)
            aggregates = {} if state is None else {id(agg): state}
            if table is not None:
                rules: DeltaRules = _ArrowChange(inputs, aggregates, below, table)
            else:
                rules = DeltaRules(inputs, aggregates)
                rules.given(below, z)
            if state is not None:
                assert agg is not None and groups is not None  # state exists for an aggregate
                if table is not None:
                    names = [col_name(i) for i in ids]
                    weights = table[WEIGHT].combine_chunks()
                    out = state.delta_of_arrow(rules, agg, below, table, weights, names)
                else:
                    out = state.delta(rules, agg, z)
                rules.given(agg, out)
                muts = state_mutations(groups.info, state.upserts, state.deletes)
                write_mutations(client, groups, muts)
                mutations += len(muts)
            vmuts = None
            change: ZSet | ArrowZSet | None = None
            if agg is None and table is not None and not job.one_row:
                try:
                    change = ArrowZSet(table)
                    vmuts = view_mutations_arrow(view, change)
                except HANDED_BACK:
                    vmuts = None
            if vmuts is None:
                change = rules.delta(job.root)
                vmuts = view_mutations(view, change, job.one_row)
            if job.check_keys and change is not None:
                # a part holds every row of its keys, so its new keys are the change's
                refuse_a_second_row(view, change, inputs, job.state_ts)
            write_mutations(client, job.view, vmuts)
            mutations += len(vmuts)
            lookups += rules.lookups + inputs.rows_read
    yield pa.RecordBatch.from_arrays(
        [
            pa.array([changes], pa.int64()),
            pa.array([lookups], pa.int64()),
            pa.array([mutations], pa.int64()),
            pa.array([by_rows], pa.int64()),
        ],
        schema=_COUNTS,
    )
