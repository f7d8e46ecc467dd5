"""The plain Python model of what the user did: tables with their committed versions, views and
the queries that define them, streams and their input files, leases held.

Every root table is ``id BIGINT, g BIGINT, v BIGINT, amt DECIMAL(12,2)`` keyed by ``id``. A
table keeps its history as versions: a version became visible at some commit ts in
``(lo, hi]`` (``lo == hi`` when the commit ts is known, as for a transaction), so the state a
read at ``ts`` must see is exact between versions and one of two neighbours inside a version's
window (a stream's batch commits somewhere between the feed and ``processAllAvailable``).

Views come from a fixed catalog (``VIEWS``) the model can evaluate in Python: the view's name
fixes its query, so recreating a view under the same name builds the same query (issue 24,
item 4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

SCHEMA = "id BIGINT, g BIGINT, v BIGINT, amt DECIMAL(12,2)"
Row = tuple[int, int, Decimal]  # (g, v, amt) of a row, keyed by id
Rows = dict[int, Row]

ROOTS = ("t0", "t1", "t2")
STREAM_TABLE = "st"  # written only by the walk's stream


def _agg(src: dict[str, Rows]) -> dict:
    out: dict[int, list[int]] = {}
    for g, v, _ in src["t0"].values():
        s = out.setdefault(g, [0, 0])
        s[0] += v
        s[1] += 1
    return {g: (s[0], s[1]) for g, s in out.items()}


def _filter(src: dict[str, Rows]) -> dict:
    return {i: (v, amt) for i, (_, v, amt) in src["t1"].items() if amt >= Decimal(10)}


def _join(src: dict[str, Rows]) -> dict:
    b = src["t1"]
    return {i: (v, b[i][1]) for i, (_, v, _) in src["t0"].items() if i in b}


def _proj(src: dict[str, Rows]) -> dict:
    return {i: (v * 2,) for i, (_, v, _) in src[STREAM_TABLE].items()}


@dataclass(frozen=True)
class ViewDef:
    """One view of the catalog: its SQL, key, sources, and the same query in Python (rows keyed
    by the view's key, values the other columns in order)."""

    name: str
    sql: str
    key: str
    sources: tuple[str, ...]
    evaluate: Callable[[dict[str, Rows]], dict]


VIEWS: dict[str, ViewDef] = {
    v.name: v
    for v in (
        ViewDef(
            "v_agg",
            "SELECT g, SUM(v) AS sv, COUNT(*) AS n FROM t0 GROUP BY g",
            "g",
            ("t0",),
            _agg,
        ),
        # A DECIMAL literal in an incremental view (item 6).
        ViewDef("v_dec", "SELECT id, v, amt FROM t1 WHERE amt >= 10", "id", ("t1",), _filter),
        ViewDef(
            "v_join",
            "SELECT a.id, a.v, b.v AS bv FROM t0 a JOIN t1 b ON a.id = b.id",
            "id",
            ("t0", "t1"),
            _join,
        ),
        ViewDef("v_st", f"SELECT id, v * 2 AS y FROM {STREAM_TABLE}", "id", (STREAM_TABLE,), _proj),
    )
}


@dataclass
class Version:
    lo: int
    hi: int
    rows: Rows


@dataclass
class TableModel:
    name: str
    created_ts: int  # a ts taken after the create returned: the incarnation began before it
    versions: list[Version] = field(default_factory=list)

    @property
    def rows(self) -> Rows:
        return self.versions[-1].rows if self.versions else {}

    def commit(self, lo: int, hi: int, rows: Rows) -> None:
        """Record a new state; versions are kept in commit order (by ``hi``)."""
        self.versions.append(Version(lo, hi, dict(rows)))
        self.versions.sort(key=lambda x: x.hi)

    def states_at(self, ts: int) -> list[Rows]:
        """Every state a read at ``ts`` may legally see (one, unless ``ts`` falls inside a
        version's commit window)."""
        out: list[Rows] = [{}]
        for ver in self.versions:
            if ver.hi <= ts:
                out = [ver.rows]
            elif ver.lo < ts:
                out = [*out[-1:], ver.rows]
        return out


@dataclass
class ViewModel:
    name: str
    created_ts: int
    job: object = None  # a running spark_sink ViewJob, or None
    mv: object = None  # the built MaterializedView
    maintained: bool = False  # stepped or run at least once: it has a barrier to read


@dataclass
class StreamModel:
    files: list[Rows] = field(default_factory=list)  # every input file, in order
    consumed: int = 0  # files the current checkpoint has processed
    query: object = None  # the running StreamingQuery, or None
    checkpoint: str = ""
    stopped_ts: int = 0  # when it last stopped (its open epoch may hold GC for one TTL)


@dataclass
class Model:
    tables: dict[str, TableModel] = field(default_factory=dict)
    views: dict[str, ViewModel] = field(default_factory=dict)
    stream: StreamModel = field(default_factory=StreamModel)
    leases: dict[str, tuple[int, object]] = field(default_factory=dict)  # holder -> (ts, Lease)
    barriers: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # table -> (B, ts)
    sink_jobs: set[str] = field(default_factory=set)  # tables with a registered sink job
    sink_stopped: dict[str, float] = field(default_factory=dict)  # job -> when it last wrote
    loaded: set[str] = field(default_factory=set)  # tables a one-off load wrote, ever
    dropped_views: set[str] = field(default_factory=set)  # view names dropped at least once
    incarnation: dict[str, int] = field(default_factory=dict)  # table -> times created
    client_seen: dict[tuple[int, str], int] = field(default_factory=dict)  # -> incarnation

    def add_table(self, t: TableModel, by_client: int) -> None:
        self.tables[t.name] = t
        self.incarnation[t.name] = self.incarnation.get(t.name, 0) + 1
        self.seen(by_client, t.name)

    def seen(self, client: int, table: str) -> None:
        """``client`` used ``table`` as it is now (its cached definition is current)."""
        self.client_seen[(client, table)] = self.incarnation.get(table, 0)

    def stale(self, client: int, table: str) -> bool:
        """``client`` last used an older incarnation of ``table`` (a cached table id)."""
        seen = self.client_seen.get((client, table))
        return seen is not None and seen != self.incarnation.get(table, 0)

    def downstream(self, table: str) -> list[str]:
        """Views in the model that read ``table`` (all catalog views are one level deep)."""
        return [v for v in self.views if table in VIEWS[v].sources]

    def drop(self, table: str, by_client: int = 0) -> list[str]:
        """Forget ``table`` and the views over it; returns the dropped views."""
        gone = self.downstream(table)
        for v in gone:
            self.views.pop(v)
        if table in self.views:
            gone.append(table)
        self.dropped_views.update(gone)
        for t in (table, *gone):  # the dropping client forgets its cached definitions
            self.client_seen.pop((by_client, t), None)
        self.tables.pop(table, None)
        self.views.pop(table, None)
        self.barriers.pop(table, None)
        self.sink_jobs.discard(table)
        return gone

    def sources_at(self, view: str, read_ts: dict[str, int]) -> list[dict[str, Rows]]:
        """Every combination of source states a view read at ``read_ts`` may see."""
        combos: list[dict[str, Rows]] = [{}]
        for s in VIEWS[view].sources:
            t = self.tables.get(s)
            states = t.states_at(read_ts[s]) if t is not None else [{}]
            combos = [{**c, s: st} for c in combos for st in states]
        return combos
