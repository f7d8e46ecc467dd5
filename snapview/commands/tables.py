"""``snapview tables`` (list the tables) and ``snapview read`` (print a table as of a
timestamp, a barrier or now)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvstore.errors import InvalidArgument
from snapview.commands.common import TEXT_JSON, Subparsers, add_verb, connect


def add_tables(sub: Subparsers) -> None:
    add_verb(sub, cmd_tables, formats=TEXT_JSON)


def cmd_tables(args: argparse.Namespace) -> int:
    """list tables

    Name, kind (root, view, or state: a view's state table), primary key and schema.
    """
    with connect(args) as c:
        tables = c.tables()
    rows: list[dict[str, Any]] = [  # JSON objects
        {
            "name": t.name,
            "id": t.id,
            "kind": t.kind,
            "schema": t.schema,
            "primary_key": list(t.user_key),
        }
        for t in tables
    ]
    if args.format == "json":
        print(json.dumps(rows))
    elif not rows:
        print("no tables")
    else:
        for r in rows:
            print(
                f"{r['name']:24} {r['kind']:5} pk={','.join(r['primary_key']) or '(row id)':12} "
                f"{r['schema']}"
            )
    return 0


def add_read(sub: Subparsers) -> None:
    r = add_verb(sub, cmd_read, formats=("text", "csv", "json"))
    r.add_argument("table", help="the table or view to read")
    g = r.add_mutually_exclusive_group()
    g.add_argument(
        "--at",
        metavar="TIME",
        help="read as of this snapview timestamp, or date and time: '2026-11-23 18:00:00' "
        "(local time) or ISO 8601 with a zone, '2026-11-23T18:00:00+01:00' (default: latest)",
    )
    g.add_argument(
        "--consistent",
        action="store_true",
        help="read the table's version at its newest barrier (a consistent snapshot)",
    )
    g.add_argument("--barrier", type=int, help="read the table's version at this barrier")


def cmd_read(args: argparse.Namespace) -> int:
    """print a table as of a timestamp

    Without --at, --consistent or --barrier: the latest committed state.
    """
    from coordinator.times import parse_ts, with_wall

    at = None if args.at is None else parse_ts(args.at)
    with connect(args) as c:
        if args.consistent or args.barrier:
            snap = c.snapshot([args.table], barrier=args.barrier or 0)
            at = snap.read_ts(args.table)
            print(
                f"# {args.table} at barrier {with_wall(snap.barrier)}, read ts {at}",
                file=sys.stderr,
            )
        info = c.describe_table(args.table)
        if at is not None and at < info.created_ts:
            # The table's keys hold nothing before it was created: say so, not "(no rows)".
            raise InvalidArgument(
                f"table {args.table!r} did not exist at {with_wall(at)}: it was created at "
                f"{with_wall(info.created_ts)}"
            )
        table = c.read(args.table, at=at)
    fmt = args.format
    if fmt == "json":
        print(json.dumps(table.to_pylist(), default=str))
    elif fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, sys.stdout.buffer)
    else:
        print(table.to_pandas().to_string(index=False) if table.num_rows else "(no rows)")
    return 0
