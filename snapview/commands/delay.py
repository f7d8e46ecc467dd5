"""``snapview delay``: barrier lag and E2E delay of every table, and under each view its
critical path, marking the job that adds the most (design.md section 5.5)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from snapview.commands.common import TEXT_JSON, Subparsers, add_verb, connect


def add_delay(sub: Subparsers) -> None:
    add_verb(sub, cmd_delay, formats=TEXT_JSON)


def cmd_delay(args: argparse.Namespace) -> int:
    """barrier lag and E2E delay of every table, and which job adds the delay

    behind: barriers issued since the table's newest version; lag_ms: how old that
    barrier is; e2e_ms: from the barrier to the commit of its version.

    Under each view, its critical path at that barrier: from the view upstream to a root,
    following the input that arrived last. own: what that table's job took (from its last
    input to its commit); wait: how long it waited for that input. The own times add up
    to e2e_ms; * marks the bottleneck (the largest own). See design.md section 5.5.
    """
    from coordinator.times import format_ts, with_wall

    with connect(args) as c:
        d = c.delay()
    # JSON objects: each TableDelay as it is (its path included), with the barrier's wall time
    # and the bottleneck's table beside it.
    rows: list[dict[str, Any]] = [
        dataclasses.asdict(t)
        | {
            "barrier_time": format_ts(t.barrier),
            "bottleneck": next((p.table for p in t.path if p.bottleneck), ""),
        }
        for t in d.tables
    ]
    if args.format == "json":
        newest = {
            "newest_barrier": d.newest_barrier,
            "newest_barrier_time": format_ts(d.newest_barrier),
        }
        print(json.dumps({**newest, "tables": rows}))
        return 0
    print(f"newest barrier {with_wall(d.newest_barrier)}")
    print(
        f"{'table':24} {'kind':5} {'job':20} {'barrier':>20} {'barrier time':29} {'behind':>6} "
        f"{'lag_ms':>7} {'e2e_ms':>7} job state"
    )
    for r in rows:
        print(
            f"{r['table']:24} {r['kind']:5} {r['job'] or '-':20} {r['barrier']:>20} "
            f"{r['barrier_time']:29} {r['barriers_behind']:>6} {r['barrier_lag_ms']:>7} "
            f"{r['e2e_delay_ms']:>7} {r['job_state'] or '-'}"
        )
        if r["kind"] == "view":
            for line in delay_path_lines(r["path"], r["barrier"]):
                print(line)
    return 0


def delay_path_lines(path: list[dict[str, Any]], barrier: int) -> list[str]:
    """A view's critical path, indented under its row: one line per table, upstream last, with
    its job's own time and wait; * marks the bottleneck."""
    out = []
    for i, p in enumerate(path):
        arrow = "  <- " if i else "     "
        note = (
            " (root reached time unknown: taken at the barrier's issue)" if p["estimated"] else ""
        )
        if p["barrier"] != barrier:
            note += f" (its version at barrier {p['barrier']})"
        out.append(
            f"{arrow}{p['table']:24} job {p['job'] or '-':20} own_ms {p['own_ms']:>7} "
            f"wait_ms {p['wait_ms']:>7}{' *' if p['bottleneck'] else ''}{note}"
        )
    return out
