"""``snapview status``: the server's version, TSO, table and job counts and space used."""

from __future__ import annotations

import argparse
import json

from snapview.commands.common import TEXT_JSON, Subparsers, add_verb, connect


def add_status(sub: Subparsers) -> None:
    add_verb(sub, cmd_status, formats=TEXT_JSON)


def cmd_status(args: argparse.Namespace) -> int:
    """server status

    Version, TSO, table and job counts, space used.
    """
    from coordinator.times import format_ts

    with connect(args) as c:
        s = c.status()
    fields = {
        "version": s.version,
        "tso": s.tso,
        "tso_time": format_ts(s.tso),
        "tables": s.tables,
        "jobs": s.jobs,
        "data_dir": s.data_dir,
        "uptime_ms": s.uptime_ms,
        "map_size_bytes": s.map_size_bytes,
        "used_bytes": s.used_bytes,
        "group_commits": s.group_commits,
        "grouped_actions": s.grouped_actions,
    }
    if args.format == "json":
        print(json.dumps(fields))
    else:
        for k, v in fields.items():
            print(f"{k:16} {v}")
    return 0
