"""The incremental strategy: epoch T writes the view's change between the previous barrier and T,
computed by the delta rules from the sources' changes and keyed reads, together with the state
tables' change, as one epoch transaction.

The first barrier of a view (and the first after its query or state layout changed, recognized
by the plan's fingerprint in the last committed epoch's metadata) is a *build*: the view and its
state tables are made equal to the query's result over the sources at that barrier, by Spark,
diffed against their old contents and written from the executors (spark_sink.executor_diff).
Every later epoch is a *delta*: its reads are the changes of each source since its read ts at the
previous barrier (recorded in that epoch's metadata) and keyed reads; nothing reads a source or
the view whole, and nothing proportional to them reaches the driver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from coordinator.client import Client
from coordinator.epoch_attempt import DirectInfo, EpochAttempt, EpochTarget, OpeningAttempt
from coordinator.jobs import EpochMetadata
from kvstore.collector_pause import collector_paused
from kvstore.mvcc.records import Mutation
from kvstore.table_info import TableInfo
from spark_sink.executor_diff import write_diff
from spark_sink.ivm.aggregate import AggregateState
from spark_sink.ivm.cost import CostModel
from spark_sink.ivm.delta import DeltaRules, columnar_reason
from spark_sink.ivm.executor_delta import (
    DELTA_ON_ENV,
    ExecutorJob,
    delta_on,
    executor_reason,
    partition_key,
    view_key_ids,
)
from spark_sink.ivm.executor_delta import run as run_on_executors
from spark_sink.ivm.inputs import StoreInputs
from spark_sink.ivm.mutations import (
    index_mutations,
    refuse_a_second_row,
    state_mutations,
    view_mutations,
    view_mutations_arrow,
)
from spark_sink.ivm.ops.arrow_expr import HANDED_BACK
from spark_sink.ivm.ops.operator import NeedsBuild, ZSet
from spark_sink.ivm.ops.semi_join import EXISTS, PAIRS
from spark_sink.ivm.ops.zset import ArrowZSet
from spark_sink.ivm.outer import MatchCounts
from spark_sink.ivm.plan import TopK, joins, semi_joins, walk
from spark_sink.ivm.plan_check import IncrementalPlan
from spark_sink.ivm.state_builds import BuildContext, state_df
from spark_sink.ivm.state_builds.topk import topk_view_df
from spark_sink.ivm.topk_state import TopKState
from spark_sink.ivm.unique_keys import key_is_unique
from spark_sink.job_session import register_sources
from spark_sink.partition_writer import direct_reader, write_mutations
from spark_sink.view_epoch import EpochWork, ViewEpoch, ViewSpec, ViewStrategy
from spark_sink.view_progress import Laps

if TYPE_CHECKING:
    from kvstore.direct_reads import DirectReader

INCREMENTAL = "incremental"
# The break-even count when no build has been measured (metadata written by an older version):
# above this many changed keys in one barrier, the epoch is a build under auto.
BULK_CHANGE_KEYS = 100_000
_UNDECIDED = "not decided yet"  # Incremental.executor_why before the view's first delta


@dataclass
class _Writes:
    """A delta computed ahead of its epoch's open: mutations per table, and the counters."""

    tables: dict[str, list[Mutation]]
    counts: dict[str, int]


@dataclass
class _OnExecutors:
    """A delta left to the executors (spark_sink.ivm.executor_delta), run once the epoch is
    open: each source's read ts at the two barriers, and the sources counted unchanged."""

    old: dict[str, int]
    new: dict[str, int]
    unchanged: frozenset[str]


def last_view_epoch(client: Client, job: str) -> EpochMetadata | None:
    """The metadata of view job ``job``'s newest committed epoch, or None if it never committed
    one. A view job's epochs are barriers, not consecutive numbers, so its newest committed epoch
    is what the barrier plan says (``JobClient.last_committed_metadata`` is the same for a sink
    job, whose epochs are numbered 1, 2, ...)."""
    last = client.jobs.plan_barriers(job, limit=1).last_committed
    if not last:
        return None
    info = client.jobs.get_epoch(job, last)
    return EpochMetadata.from_json(info.metadata) if info.metadata else None


def _change_boundary(
    client: Client, direct: DirectReader | None, table: str, lo: int, hi: int, most: int
) -> tuple[int, int]:
    """``store.change_boundary(table, lo, hi, most)``, read directly when this process may
    (kvstore.direct_reads), else (or when the direct read hands it back) by the server."""
    if direct is not None:
        from kvstore.direct import DirectUnavailable  # loaded already: ``direct`` exists

        try:
            return direct.change_boundary(client.describe_table(table).id, lo, hi, most)
        except DirectUnavailable:
            pass
    return client.store.change_boundary(table, lo, hi, most)


def _after(meta: EpochMetadata) -> dict[str, int]:
    """``{"after_epoch": B}``: the barrier (the epoch) ``meta`` was committed for, which the
    next delta claims to follow; empty for metadata that names none."""
    b = meta.fields.get("barrier")
    return {"after_epoch": b} if isinstance(b, int) and not isinstance(b, bool) else {}


class Incremental(ViewStrategy):
    """Maintain a view by delta rules (see the module docstring and docs/design.md §6.4)."""

    name = INCREMENTAL

    def __init__(
        self,
        spec: ViewSpec,
        session: SparkSession,
        plan: IncrementalPlan,
        direct_info: DirectInfo | None = None,
        asked: str = "auto",
    ) -> None:
        super().__init__(spec, session)
        self.asked = asked  # auto: choose per epoch by cost; incremental: always a delta
        self.cost = CostModel()
        self.plan = plan
        self.direct_info = direct_info
        self._paused: contextlib.ExitStack | None = None  # the collector's pause (epoch_scope)
        self._last: EpochMetadata | None = None  # this job's last committed epoch (cache)
        self._last_known = False
        self._clean = False  # the last epoch ended in a commit by this object (_maintain_once)
        # Which path the last delta epoch's view change took (columnar: the tree over Arrow,
        # DeltaRules.delta_arrow; rows: the row rules) and, for rows, why not columnar.
        self.path = ""
        self.why_rows: str | None = None
        self.aggregate_paths: dict[str, str] = {}  # per group state table: its last epoch's path
        # None when a delta may run on the executors (spark_sink.ivm.executor_delta), else why
        # it may not; decided with the view's key, at its first delta (_executors_allowed)
        self.executor_why: str | None = _UNDECIDED
        self._part_by: tuple[int, ...] | None = None
        self._unique_key: bool | None = None  # whether the plan proves the key (_key_is_unique)

    def follow(self, last_committed: int) -> None:
        """Forget the cached last epoch unless it is ``last_committed``, the job's newest
        committed epoch as the coordinator says: another run of the job (a started job of the
        same view, another driver) may have committed since this strategy cached it, and a delta
        from a stale epoch would read changes it has applied already."""
        cached = 0 if self._last is None else _after(self._last).get("after_epoch", -1)
        if self._last_known and cached != last_committed:
            self.forget()

    def forget(self) -> None:
        self._last_known = self._clean = False  # re-read what is committed

    def committed(self, meta: EpochMetadata | None) -> None:
        if meta is None:  # committed by another run: what it wrote is read again
            self.forget()
        else:
            self._last, self._clean = meta, True

    # ------------------------------------------------------------------ one epoch

    @contextlib.contextmanager
    def epoch_scope(self) -> Iterator[None]:
        """A delta epoch allocates tens of thousands of short-lived tuples, lists and dicts and
        makes no reference cycle: the cyclic collector is paused over it (kvstore.collector_pause),
        so the full collections those allocations trigger, each a walk over every tracked
        object of the driver (all of PySpark: 40-50 ms measured), run after the epoch, not
        inside it. A build or a delta on the executors runs Spark: the collector is back on
        before it (``write``)."""
        with contextlib.ExitStack() as paused:
            paused.enter_context(collector_paused())
            self._paused = paused
            try:
                yield
            finally:
                self._paused = None

    def prepare(
        self, epoch: ViewEpoch, opening: OpeningAttempt
    ) -> tuple[bool, str, int, _Writes | _OnExecutors | None]:
        """Decide build or delta and compute a driver delta while the epoch opens:
        OpenTransaction waits its turn at the server's writer (behind another view's commit,
        whose secondaries it resolves next), and the delta only reads, at barriers that are
        already fixed (``_delta_ahead``)."""
        clean, self._clean = self._clean, False
        if not clean:
            # The last epoch did not end in a commit here (or this is the first): an attempt
            # it left may hold locks the reads would meet. The open rolls it back, so it goes
            # first.
            opening.wait()
        return self._delta_ahead(epoch.client, epoch.view, epoch.reads, epoch.laps)

    def write(self, epoch: ViewEpoch, attempt: EpochAttempt, ahead: object) -> EpochWork:
        """Write what ``prepare`` computed (a driver delta), or run the delta on the executors,
        or build: a rebuild requested at the open drops whatever was computed ahead."""
        client, view, laps = epoch.client, epoch.view, epoch.laps
        last = self._last
        assert isinstance(ahead, tuple)
        build, why, keys, writes = ahead  # what _delta_ahead returned
        rebuild = attempt.info.rebuild
        if rebuild:
            build, why, writes = (
                True,
                f"a build: a rebuild was requested (revision {rebuild})",
                None,
            )
        on_executors = not build and isinstance(writes, _OnExecutors)
        if (build or on_executors) and self._paused is not None:
            self._paused.close()  # the collector back on for Spark
        counts = {"changes": 0, "lookups": 0, "mutations": 0}
        if on_executors:
            assert isinstance(writes, _OnExecutors)
            counts = self._executor_delta(client, attempt, view, writes, keys)
            slices = counts.pop("row_slices", 0)
            self.path = "executors"
            self.why_rows = f"{slices} slices by the row rules" if slices else None
            laps.lap("delta")
        elif not build:
            assert isinstance(writes, _Writes)
            counts = writes.counts
            counts["mutations"] = self._write(client, attempt, view, writes.tables)
            laps.lap("write")
        if build:
            counts["mutations"] = self._build(client, attempt, view, epoch.read_ts, laps)
        elapsed = laps.elapsed()
        if build:
            self.cost.record_build(elapsed)
        elif on_executors:
            self.cost.record_executor_delta(keys, elapsed)
        elif keys:
            self.cost.record_delta(keys, elapsed)
        fields = {
            "plan": self.plan.fingerprint,
            "step": "build" if build else "delta",
            "why": why,
            "changed_keys": keys,
            # a delta's view change: over Arrow (columnar), by the row rules (rows) or on
            # the executors
            **({} if build else {"path": self.path}),
            # A delta is the change after `last`'s barrier: the coordinator refuses the
            # commit if another run of the job committed past it meanwhile (a stale cache
            # here), and the retry re-reads what is committed.
            **({} if build or last is None else _after(last)),
            "cost": self.cost.as_field(),
            **counts,
        }
        return EpochWork(
            kind="build" if build else "delta",
            recomputed=build,
            unchanged=not build and counts["changes"] == 0,
            mutations=counts["mutations"],
            changes=counts["changes"],
            lookups=counts["lookups"],
            why=why,
            fields=fields,
        )

    def _delta_ahead(
        self, client: Client, view: TableInfo, reads: dict[str, tuple[int, bool]], laps: Laps
    ) -> tuple[bool, str, int, _Writes | _OnExecutors | None]:
        """What can be done before the epoch is open: decide build or delta, and for a delta
        on the driver compute every table's mutations (reads only). Returns (build?, why,
        changed keys counted, the delta's writes, or what the executors' delta needs, or None
        for a build). State tables are read at a fresh
        TSO timestamp: every epoch of this job committed so far is below it, and none can
        commit after it without this epoch's commit being refused (it names its predecessor)."""
        spec = self.spec
        if not self._last_known:
            self._last = last_view_epoch(client, spec.job)
            self._last_known = True
            if self._last is not None:
                self.cost = CostModel.from_fields(self._last.fields)
        new_ts = {t: ts for t, (ts, _) in reads.items()}
        last = self._last
        if last is None:
            return True, "a build: the view's first barrier", 0, None
        if last.fields.get("plan") != self.plan.fingerprint:
            return True, "a build: the query or its state layout changed", 0, None
        if set(last.sources) != set(new_ts):
            return True, "a build: the sources changed", 0, None
        # This process's reader of the server's LMDB environment (None off its host): the
        # change count and the delta's change scans and keyed reads use it.
        direct = direct_reader(self.direct_info)
        self._executors_allowed(view)
        build, why, keys, unchanged, where = self._choose(client, last.sources, new_ts, direct)
        laps.lap("open")
        if build:
            return build, why, keys, None
        if where == "executors":
            return False, why, keys, _OnExecutors(dict(last.sources), new_ts, unchanged)
        try:
            writes = self._delta(client, view, last.sources, new_ts, laps, unchanged, direct)
        except NeedsBuild as e:  # raised before anything was written
            return True, f"a build: {e}", keys, None
        return False, why, keys, writes

    def _executors_allowed(self, view: TableInfo) -> None:
        """Decide once (the view's layout is fixed by the plan) whether its deltas may run on
        the executors, and by what their write stage is partitioned."""
        if self.executor_why != _UNDECIDED:
            return
        names = [c.name for c in view.table_schema.visible_columns]
        key_ids = view_key_ids(self.plan.root, names, view.primary_key, self.spec.one_row)
        self.executor_why = executor_reason(self.plan, key_ids)
        if self.executor_why is None:
            self._part_by = partition_key(self.plan.root, key_ids)

    def _choose(
        self,
        client: Client,
        old: dict[str, int],
        new: dict[str, int],
        direct: DirectReader | None = None,
    ) -> tuple[bool, str, int, frozenset[str], str]:
        """(build?, why, changed keys counted, sources counted to have no change, where a
        delta runs: "driver" or "executors") for an epoch after the first: under ``auto`` the
        cheapest of a build, a delta on the driver and one on the executors, by this view's
        measured costs (spark_sink.ivm.cost); under ``incremental`` always a delta. Keys are
        counted on the server, up to the break-even count. A delta runs on the executors when
        the plan allows it (``executor_delta.executor_reason``) and SNAPVIEW_DELTA_ON says
        ``executors``, or says ``auto`` and they are estimated faster."""
        strict = self.asked == INCREMENTAL
        on = delta_on()
        executors = self.executor_why is None and on != "driver"
        if self.cost.build_s is None:
            cap = BULK_CHANGE_KEYS  # no build measured (metadata of an older version)
        else:
            cap = self.cost.break_even(executors)
        keys, over, unchanged = self._count_keys(client, old, new, cap, direct)
        est = self.cost.delta_s(keys)
        where = "driver"
        if executors and (on == "executors" or self.cost.executor_delta_s(keys) < est):
            where = "executors"
            est = self.cost.executor_delta_s(keys)
        a_delta = "a delta" if where == "driver" else "a delta on the executors"
        if strict:
            why = f"{a_delta}: strategy incremental ({keys} changed keys)"
            return False, why, keys, unchanged, where
        build_s = self.cost.build_s
        b = f"{build_s:.2f}s" if build_s is not None else "unmeasured"
        if over:
            return (
                True,
                f"a build by cost: {keys}+ changed keys, a delta ~{est:.2f}s >= a build {b}",
                keys,
                unchanged,
                where,
            )
        by = "by cost" if on == "auto" or where == "driver" else f"by {DELTA_ON_ENV}"
        why = f"{a_delta} {by}: {keys} changed keys, ~{est:.3f}s < a build {b}"
        return False, why, keys, unchanged, where

    @staticmethod
    def _count_keys(
        client: Client,
        old: dict[str, int],
        new: dict[str, int],
        cap: int,
        direct: DirectReader | None = None,
    ) -> tuple[int, bool, frozenset[str]]:
        """The changed keys of all sources between the barriers, counted up to ``cap``; whether
        the count reached it; and the sources whose count, made in full, found no change: the
        delta need not scan those (the count and the scan read the same change index, which
        the job's hold on its last epoch keeps from GC)."""
        total = 0
        unchanged: set[str] = set()
        for table, hi in new.items():
            lo = old.get(table, hi)
            if hi <= lo:
                continue
            ts, n = _change_boundary(client, direct, table, lo, hi, max(1, cap - total))
            total += n
            if ts < hi or total >= cap:
                return total, True, frozenset(unchanged)
            if n == 0:
                unchanged.add(table)
        return total, False, frozenset(unchanged)

    # ------------------------------------------------------------------ build

    def _build(
        self, client, attempt: EpochAttempt, view: TableInfo, reads: dict[str, int], laps: Laps
    ) -> int:
        """The view and its state tables equal to the query over ``reads``, by Spark, written
        from the executors; returns the mutations written."""
        spec = self.spec
        register_sources(self.session, spec.coordinator, reads, spec.token)
        # The view and every state table read the same sources: cached for this build, each
        # source is scanned once, not once per table written (Spark substitutes the cache in
        # every plan over these views, the state's plans included).
        cached = list(reads) if self.plan.state else []
        for table in cached:
            self.session.catalog.cacheTable(table)
        try:
            return self._build_cached(client, attempt, view, laps)
        finally:
            for table in cached:
                self.session.catalog.uncacheTable(table)

    def _build_cached(self, client, attempt: EpochAttempt, view: TableInfo, laps: Laps) -> int:
        spec = self.spec
        df = self.session.sql(spec.query)
        laps.lap("analyze")
        out = df.toDF(*spec.column_names) if spec.column_names else df
        ctx = BuildContext(self.session, df, self.plan, client)
        n = 0
        top_state = None
        for st in self.plan.state:
            info = client.describe_table(st.name, refresh=True)
            tgt = attempt.target(spec.coordinator, spec.token, info, "upsert", self.direct_info)
            sdf = state_df(ctx, st, info)  # by the operator's builder (ivm.state_builds)
            if st.role == "topk":  # only at the top of a query (plan_check._check_top_k)
                sdf = sdf.persist()  # read again below, for the view
                top_state = sdf
            # a state table's key is its GROUP BY (or the source's key): unique by making
            n += write_diff(self.session, sdf, tgt, attempt.start_ts, False, unique=True)
        if top_state is not None:
            # ORDER BY ... LIMIT: the view is the state's first rows (ties as the epochs break
            # them), not Spark's LIMIT, which picks among ties as it likes
            out = topk_view_df(top_state, self.plan.root, out.schema)
        try:
            n += write_diff(
                self.session,
                out,
                attempt.target(spec.coordinator, spec.token, view, "upsert", self.direct_info),
                attempt.start_ts,
                spec.one_row,
                unique=self._key_is_unique(client, view),
            )
        finally:
            if top_state is not None:
                top_state.unpersist()
        laps.lap("build")
        return n

    def _key_is_unique(self, client, view: TableInfo) -> bool:
        """Whether the plan proves the view's primary key unique in the query's result
        (spark_sink.ivm.unique_keys): the build then skips its key check, and a delta its check
        of the keys it adds (decided once per strategy: the plan and the sources' keys are
        fixed for a job's life)."""
        if self._unique_key is None:
            self._unique_key = self._prove_key_unique(client, view)
        return self._unique_key

    def _prove_key_unique(self, client, view: TableInfo) -> bool:
        names = [c.name for c in view.table_schema.visible_columns]
        ids = view_key_ids(self.plan.root, names, view.primary_key, self.spec.one_row)
        return ids is not None and key_is_unique(
            self.plan.root, list(ids), lambda t: client.describe_table(t).user_key
        )

    # ------------------------------------------------------------------ delta

    def _delta(
        self,
        client: Client,
        view: TableInfo,
        old: dict[str, int],
        new: dict[str, int],
        laps: Laps,
        unchanged: frozenset[str] = frozenset(),
        direct: DirectReader | None = None,
    ) -> _Writes:
        """The view's and the state tables' change between the barriers of ``old`` and ``new``
        (each source's read ts), as mutations per table, and the epoch's counters; nothing is
        written. ``unchanged``: sources known to have no change between them (not scanned);
        ``direct``: this process's direct reader (StoreInputs)."""
        plan = self.plan
        infos = {t: client.describe_table(t) for t in new}
        indexes = {}
        for st in plan.index_tables():
            indexes[(st.source, st.column)] = client.describe_table(st.name)
        state_ts = client.tso()
        inputs = StoreInputs(client, infos, old, new, state_ts, indexes, unchanged, direct)
        groups, matches = self._epoch_states(client, inputs)
        topks = self._epoch_topks(client, inputs)
        rules = DeltaRules(inputs, {id(g.agg): g for g in groups.values()}, matches, topks)
        writes: dict[str, list[Mutation]] = {}
        self.why_rows = "a one-row view" if self.spec.one_row else columnar_reason(plan.root)
        if self.why_rows is None:
            try:
                za = rules.delta_arrow(plan.root)
                laps.lap("delta")
                writes[view.name] = view_mutations_arrow(view, za)
            except HANDED_BACK as e:
                # the row rules take the epoch and decide it (an error of theirs names the key);
                # an outer join's match counts the columnar attempt stepped are stepped again
                # by them, to the same counts, recorded once (MatchCounts keys them); a tree
                # over Arrow holds no aggregate, so no group state was touched
                self.why_rows = f"this epoch's change: {type(e).__name__}: {e}"
                rules = DeltaRules(inputs, {id(g.agg): g for g in groups.values()}, matches, topks)
        self.path = "rows" if self.why_rows is not None else "columnar"
        change: ZSet | ArrowZSet
        if view.name not in writes:
            change = rules.delta(plan.root)
            laps.lap("delta")
            writes[view.name] = view_mutations(view, change, self.spec.one_row)
        else:
            change = za
        if not self.spec.one_row and not self._key_is_unique(client, view):
            # The build checked the key over the whole result; a delta checks the keys its
            # change adds: none may be in the view already (design.md, "Materialized views", Keys)
            refuse_a_second_row(view, change, inputs, inputs.state_ts)
        for name, g in groups.items():
            writes[name] = state_mutations(g.table, g.upserts, g.deletes)
            for vt in g.values.values():
                writes[vt.info.name] = state_mutations(vt.info, vt.upserts, vt.deletes)
        for m in matches.values():
            writes[m.info.name] = state_mutations(m.info, m.upserts, m.deletes)
        for t in topks.values():
            writes[t.info.name] = state_mutations(t.info, t.upserts, t.deletes)
        for st in plan.index_tables():
            writes[st.name] = index_mutations(
                inputs, indexes[(st.source, st.column)], st.source, st.column
            )
        laps.lap("diff")
        self.aggregate_paths = {name: g.path for name, g in groups.items()}
        counts = {"changes": inputs.changes_read, "lookups": rules.lookups + inputs.rows_read}
        return _Writes(writes, counts)

    def _executor_delta(
        self,
        client: Client,
        attempt: EpochAttempt,
        view: TableInfo,
        on: _OnExecutors,
        keys: int,
    ) -> dict[str, int]:
        """The delta prewritten from the executors (spark_sink.ivm.executor_delta) into the
        open ``attempt``; returns the epoch's counters. The group state is read at the
        snapshot just below the epoch's start_ts: every epoch of this job committed so far is
        in it, and the epoch's own locks (at start_ts) are not."""
        spec = self.spec
        plan = self.plan

        def target(info: TableInfo) -> EpochTarget:
            return attempt.target(spec.coordinator, spec.token, info, "upsert", self.direct_info)

        groups = plan.groups_tables()
        slots = self.session.sparkContext.defaultParallelism
        job = ExecutorJob(
            root=plan.root,
            infos={t: client.describe_table(t) for t in on.new},
            old=on.old,
            new=on.new,
            state_ts=attempt.start_ts - 1,
            changed=tuple(
                t for t in on.new if on.new[t] > on.old.get(t, on.new[t]) and t not in on.unchanged
            ),
            view=target(view),
            groups=target(client.describe_table(groups[0].name)) if groups else None,
            indexes={
                (st.source, st.column): target(client.describe_table(st.name))
                for st in plan.index_tables()
            },
            one_row=spec.one_row,
            part_by=self._part_by or (),
            check_keys=not spec.one_row and not self._key_is_unique(client, view),
            # a few parts per core, more for a large change (a part's state reads and
            # prewrites are a few hundred MB at most)
            parts=max(2 * slots, min(8 * slots, keys // 100_000 + 1)),
            direct=self.direct_info,
        )
        return run_on_executors(self.session, job)

    def _epoch_states(
        self, client: Client, inputs: StoreInputs
    ) -> tuple[dict[str, AggregateState], dict[tuple[int, str], MatchCounts]]:
        """This epoch's state objects, empty: each group state table's AggregateState (by table
        name), each outer join side's MatchCounts (by (id(join node), side)) and each counted semi
        or anti join's (by (id(semi join node), ``semi_join.EXISTS``), and its per-value counts by
        (id(semi join node), ``semi_join.PAIRS``))."""
        plan = self.plan
        groups = {}
        for st in plan.groups_tables():
            info = client.describe_table(st.name)
            values = {
                j: client.describe_table(v.name) for j, v in plan.values_tables(st.index).items()
            }
            groups[st.name] = AggregateState(
                plan.aggs[st.index], info, inputs, self.spec.target, values
            )
        all_joins = joins(plan.root)
        matches = {}
        for st in plan.matches_tables():
            info = client.describe_table(st.name)
            matches[(id(all_joins[st.index]), st.column)] = MatchCounts(
                info, inputs, self.spec.target
            )
        semis = semi_joins(plan.root)
        for st in plan.exists_tables():
            info = client.describe_table(st.name)
            name = PAIRS if st.column == PAIRS else EXISTS
            matches[(id(semis[st.index]), name)] = MatchCounts(info, inputs, self.spec.target)
        return groups, matches

    def _epoch_topks(self, client: Client, inputs: StoreInputs) -> dict[int, TopKState]:
        """This epoch's ordered states of the plan's ORDER BY ... LIMITs, by id(TopK node)."""
        nodes = [n for n in walk(self.plan.root) if isinstance(n, TopK)]
        out = {}
        for st in self.plan.topk_tables():
            node = nodes[st.index]
            out[id(node)] = TopKState(
                node, client.describe_table(st.name), inputs, self.spec.target
            )
        return out

    def _write(
        self, client: Client, attempt: EpochAttempt, view: TableInfo, writes: dict[str, list]
    ) -> int:
        """Prewrite each table's mutations into the attempt; returns how many."""
        n = 0
        for table, muts in writes.items():
            if muts:
                info = view if table == view.name else client.describe_table(table)
                tgt = attempt.target(
                    self.spec.coordinator, self.spec.token, info, "upsert", self.direct_info
                )
                write_mutations(client, tgt, muts)
                n += len(muts)
        return n
