"""``snapview topology``: jobs and tables, who writes what from what, as text, JSON or Graphviz
DOT (``--format dot``: tables filled by their lag, ``lag_level``)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from snapview.commands.common import Subparsers, add_verb, client_args, connect

if TYPE_CHECKING:
    from coordinator.reports import DelayInfo, TopologyInfo


def add_topology(sub: Subparsers) -> None:
    tp = add_verb(sub, cmd_topology)
    out = client_args(tp, formats=("text", "json", "dot"))
    out.add_argument(
        "--dot", dest="format", action="store_const", const="dot", help=argparse.SUPPRESS
    )


# How `topology --format dot` colors a table by its lag (TableDelay.barriers_behind): at most
# LAG_GREEN_MAX barriers behind the newest issued barrier is green, at most LAG_YELLOW_MAX
# yellow, more red; so is a table whose writer job FAILED or was LOST.
LAG_GREEN_MAX = 1

LAG_YELLOW_MAX = 10

LAG_COLORS = {"green": "palegreen", "yellow": "khaki1", "red": "salmon"}

BROKEN_JOB_STATES = ("failed", "lost")


def lag_level(barriers_behind: int, job_state: str) -> str:
    """green, yellow or red (see LAG_GREEN_MAX and LAG_YELLOW_MAX)."""
    if job_state in BROKEN_JOB_STATES or barriers_behind > LAG_YELLOW_MAX:
        return "red"
    return "green" if barriers_behind <= LAG_GREEN_MAX else "yellow"


def topology_dot(topo: TopologyInfo, delay: DelayInfo | None = None) -> str:
    """Graphviz DOT of the lineage: tables are nodes (views double-circled), each job an edge
    from every source to its sink, labelled with the job. With ``delay``, each table is filled
    by its lag (lag_level) and says how far behind it is."""
    lag = {d.table: d for d in delay.tables} if delay is not None else {}
    lines = ["digraph snapview {", "  rankdir=LR;"]
    if delay is not None:
        g, y = LAG_GREEN_MAX, LAG_YELLOW_MAX
        legend = (
            f"lag: {LAG_COLORS['green']} <= {g} barrier(s) behind, {LAG_COLORS['yellow']} <= {y}, "
            f"{LAG_COLORS['red']} more or writer job failed/lost"
        )
        lines += [f"  // {legend}", f'  label="{legend}"; labelloc=b; fontsize=10;']
    for t in topo.tables:
        shape = "doubleoctagon" if t.kind == "view" else "box"
        d = lag.get(t.table)
        if d is None:
            lines.append(f'  "{t.table}" [shape={shape}];')
            continue
        color = LAG_COLORS[lag_level(d.barriers_behind, d.job_state)]
        state = f", {d.job_state}" if d.job_state else ""
        label = f"{t.table}\\n{d.barriers_behind} behind, e2e {d.e2e_delay_ms} ms{state}"
        lines.append(
            f'  "{t.table}" [shape={shape}, style=filled, fillcolor={color}, label="{label}"];'
        )
    for j in topo.jobs:
        for src in j.sources:
            lines.append(f'  "{src}" -> "{j.sink}" [label="{j.job}"];')
    lines.append("}")
    return "\n".join(lines)


def cmd_topology(args: argparse.Namespace) -> int:
    """jobs and tables: who writes what from what

    --format dot prints the lineage as Graphviz DOT (snapview topology --format dot | dot
    -Tsvg).
    """
    from coordinator.times import with_wall

    with connect(args) as c:
        topo = c.topology()
        delay = c.delay()
    if args.format == "dot":
        print(topology_dot(topo, delay))
        return 0
    behind = {d.table: d.barriers_behind for d in delay.tables}
    jobs: list[dict[str, Any]] = [  # JSON objects
        {
            "job": j.job,
            "kind": j.kind,
            "sink": j.sink,
            "sources": list(j.sources),
            "strategy": j.strategy,
            "last_committed": j.last_committed,
            "query": j.query,
        }
        for j in topo.jobs
    ]
    tables = [
        {
            "table": t.table,
            "kind": t.kind,
            "writer": t.writer,
            "barriers_behind": behind.get(t.table, 0),
        }
        for t in topo.tables
    ]
    if args.format == "json":
        print(json.dumps({"jobs": jobs, "tables": tables}))
        return 0
    for t in tables:
        print(
            f"table {t['table']:24} {t['kind']:5} writer={t['writer'] or '-'} "
            f"behind={t['barriers_behind']}"
        )
    for j in jobs:
        src = ", ".join(j["sources"]) or "(external)"
        extra = f" strategy={j['strategy']}" if j["strategy"] else ""
        if j["kind"] == "view" and j["last_committed"]:  # a view's epochs are its barriers
            extra += f" at barrier {with_wall(j['last_committed'])}"
        print(f"job   {j['job']:24} {j['kind']:5} {src} -> {j['sink']}{extra}")
    return 0
