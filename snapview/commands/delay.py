"""``snapview delay``: barrier lag and E2E delay of every table, and under each view its
critical path, marking the job that adds the most (design.md section 5.5)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from snapview.commands.common import Subparsers, add_verb, client_args, connect


def add_delay(sub: Subparsers) -> None:
    dl = add_verb(
        sub,
        "delay",
        "barrier lag and E2E delay of every table, and which job adds the delay",
        "behind: barriers issued since the table's newest version; lag_ms: how old that\n"
        "barrier is; e2e_ms: from the barrier to the commit of its version.\n\n"
        "Under each view, its critical path at that barrier: from the view upstream to a root,\n"
        "following the input that arrived last. own: what that table's job took (from its last\n"
        "input to its commit); wait: how long it waited for that input. The own times add up\n"
        "to e2e_ms; * marks the bottleneck (the largest own). See design.md section 5.5.",
    )
    client_args(dl)
    dl.set_defaults(func=cmd_delay)


def cmd_delay(args: argparse.Namespace) -> int:
    from coordinator.times import format_ts, with_wall

    with connect(args) as c:
        d = c.delay()
    rows: list[dict[str, Any]] = [  # JSON objects
        {
            "table": t.table,
            "kind": t.kind,
            "job": t.job,
            "barrier": t.barrier,
            "barrier_time": format_ts(t.barrier),
            "barriers_behind": t.barriers_behind,
            "barrier_lag_ms": t.barrier_lag_ms,
            "e2e_delay_ms": t.e2e_delay_ms,
            "job_state": t.job_state,
            "bottleneck": next((p.table for p in t.path if p.bottleneck), ""),
            "path": [
                {
                    "table": p.table,
                    "job": p.job,
                    "barrier": p.barrier,
                    "own_ms": p.own_ms,
                    "wait_ms": p.wait_ms,
                    "bottleneck": p.bottleneck,
                    "estimated": p.estimated,
                }
                for p in t.path
            ],
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
