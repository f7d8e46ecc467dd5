"""``snapview revise``, ``snapview rebuild`` and ``snapview revisions`` (docs/revising.md).

A revision, the wait for every view downstream to reach its barrier (with a progress line), the
dry run's preview of the views (``snapview.revision_preview``, computed by Spark), and the audit
list.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from kvstore.errors import InvalidArgument, SnapviewError
from snapview.commands.common import (
    TEXT_JSON,
    Subparsers,
    add_duration,
    add_verb,
    connect,
)
from snapview.terminal import shown

if TYPE_CHECKING:
    import pyarrow as pa

    from coordinator.client import Client
    from coordinator.revisions import Revision


def add_revise(sub: Subparsers) -> None:
    rv = add_verb(sub, cmd_revise, formats=TEXT_JSON)
    rv.add_argument("table", help="the root table to revise")
    what = rv.add_mutually_exclusive_group(required=True)
    what.add_argument("--to-barrier", type=int, metavar="B", help="roll back to barrier B")
    what.add_argument(
        "--to-ts",
        type=_parse_ts_arg,
        metavar="TS",
        help="roll back to a timestamp, or a date and time (local unless it names a zone)",
    )
    what.add_argument("--corrections", metavar="FILE", help="a Parquet file of rows to apply")
    rv.add_argument(
        "--mode", choices=["upsert", "delete"], default="upsert", help="how corrections apply"
    )
    rv.add_argument("--dry-run", action="store_true", help="print what would change; write nothing")
    rv.add_argument("--no-wait", action="store_true", help="do not wait for the views")
    add_duration(rv, "--timeout", "10m", "how long to wait for the views downstream")
    rv.add_argument("--who", default=None, help="who to record (default: user@host)")
    rv.add_argument(
        "--key",
        default=None,
        help="the revision key of a rollback (default: a fresh one): run again with the same "
        "key, it prints the revision that key ran instead of running a second one",
    )


def _parse_ts_arg(text: str) -> int:
    from coordinator.times import parse_ts

    try:
        return parse_ts(text)
    except SnapviewError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _human(args: argparse.Namespace) -> Callable[[str], object]:
    """Where progress lines go: stdout, or stderr when stdout carries JSON."""
    if args.format == "json":
        return lambda line: print(line, file=sys.stderr)
    return print


def cmd_revise(args: argparse.Namespace) -> int:
    """revise a root table: roll it back, or apply corrections, as one transaction

    Rolls TABLE back to its state at a barrier (--to-barrier) or a time (--to-ts), or
    applies a Parquet file of corrections (--corrections, --mode upsert|delete), as one new
    transaction: history is kept, and the revision can itself be revised. Writers of the
    table wait while a rollback is applied. Every view downstream follows at one barrier;
    this waits for them and prints it. --dry-run prints what would change, in the table
    and in each downstream view's next epoch (computed by Spark), and writes nothing.
    docs/revising.md.
    """
    with connect(args) as c:
        return revise(c, args, _human(args))


def revise(c: Client, args: argparse.Namespace, out: Callable[[str], object] = print) -> int:
    """``snapview revise TABLE``: roll back (``--to-barrier``/``--to-ts``) or apply a Parquet
    correction set (``--corrections``); with ``--dry-run`` print what would change instead."""
    from dataclasses import asdict

    from coordinator.times import with_wall

    corrections = read_corrections(args.corrections) if args.corrections else None
    kind: dict = {}
    if args.to_barrier:
        kind["to_barrier"] = args.to_barrier
    if args.to_ts:
        kind["to_ts"] = args.to_ts
    if corrections is not None:
        kind["corrections"] = corrections
    rev = c.revise(
        args.table,
        **kind,
        mode=args.mode,
        dry_run=args.dry_run,
        who=args.who,
        key=getattr(args, "key", None),
    )
    report: dict = {"revision": revision_dict(rev)}
    if args.dry_run:
        out(
            f"dry run: {args.table} would change {rev.rows} rows ({rev.restored} "
            f"{'restored' if rev.kind == 'rollback' else 'upserted'}, {rev.removed} removed); "
            "nothing written"
        )
        if rev.views:
            barrier, changes = _preview(c, args, rev)
            report["preview_barrier"] = barrier
            report["views"] = [{**asdict(v), "rows": v.rows} for v in changes]
            out(
                f"the views' next epochs would change (computed by Spark at barrier "
                f"{with_wall(barrier)}, not written):"
            )
            for v in changes:
                out(
                    f"  {v.view:24} {v.rows:>8} rows ({v.inserted} inserted, {v.deleted} "
                    f"deleted, {v.updated} updated)"
                )
    else:
        out(shown(rev))
        if not args.no_wait:
            report.update(wait_and_report(c, rev, args.timeout, out))
    if args.format == "json":
        print(json.dumps(report))
    return 0


def read_corrections(path: str) -> pa.Table:
    """The Parquet file ``path`` as a table; InvalidArgument with one line naming the file and
    what is wrong with it: missing, a directory (one file is one correction set), unreadable,
    or not a Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = f"--corrections {path}"
    if not os.path.exists(path):
        raise InvalidArgument(f"{where}: no such file")
    if os.path.isdir(path):
        raise InvalidArgument(f"{where}: is a directory; give one Parquet file")
    try:
        return pq.read_table(path)
    except PermissionError:
        raise InvalidArgument(f"{where}: permission denied") from None
    except (pa.ArrowException, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InvalidArgument(f"{where}: not a readable Parquet file ({first})") from None


def _preview(c: Client, args: argparse.Namespace, rev: Revision) -> tuple[int, list]:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from snapview.local_spark import local_session
    from snapview.revision_preview import preview_views

    # A caller that runs Spark already (a notebook, a test) keeps its session. Whether this
    # process had a SparkContext decides, not the calling thread's active session (unset in a
    # thread that never used Spark): getOrCreate would hand back the caller's context, and
    # stopping it would stop the caller's Spark.
    owned = SparkContext._active_spark_context is None
    spark = SparkSession.getActiveSession() or local_session(app_name="snapview-revise-dry-run")
    try:
        corrections = None
        if args.corrections:
            corrections = spark.read.parquet(args.corrections)
        return preview_views(
            spark,
            c,
            args.table,
            list(rev.views),
            target_ts=rev.target_ts,
            corrections=corrections,
            mode=args.mode,
        )
    finally:
        if owned:
            spark.stop()


def revision_dict(r: Revision) -> dict:
    """A revision as plain data, each timestamp with its wall time beside it."""
    from dataclasses import asdict

    from coordinator.times import format_ts

    d = asdict(r)
    d["views"] = list(r.views)
    d["rows"] = r.rows
    for k in ("target_ts", "commit_ts", "barrier"):
        d[f"{k}_time"] = format_ts(d[k]) if d[k] else ""
    return d


def progress_printer(out: Callable[[str], object]) -> Callable:
    """A ``wait_revised`` progress callback that prints a line whenever a view's state changes
    (not at every poll)."""
    last: list[str] = []

    def show(rev: Revision, views: dict[str, tuple[int, str]]) -> None:
        if not rev.barrier:
            line = f"  revision {rev.id}: waiting for a barrier after its commit"
        else:
            parts = [
                f"{v} {'ok' if b >= rev.barrier else f'at {b} ({state})'}"
                for v, (b, state) in views.items()
            ]
            line = f"  barrier {rev.barrier}: " + (", ".join(parts) or "no downstream views")
        if not last or last[-1] != line:
            last.append(line)
            out(line)

    return show


def wait_and_report(
    c: Client, rev: Revision, timeout_s: float, out: Callable[[str], object]
) -> dict:
    """Wait for every view downstream of ``rev`` and print where the whole topology has it."""
    from coordinator.times import with_wall

    if rev.views:
        out(f"waiting for {len(rev.views)} view(s) downstream to reach the revision's barrier")
    barrier = c.wait_revised(rev, timeout_s, progress=progress_printer(out))
    tables = [rev.table, *rev.views]
    out(
        f"revised: the whole topology shows revision {rev.id} at barrier {with_wall(barrier)} "
        f"({', '.join(tables)})"
    )
    return {"revised_barrier": barrier, "tables": tables}


def add_rebuild(sub: Subparsers) -> None:
    rb = add_verb(sub, cmd_rebuild, formats=TEXT_JSON)
    rb.add_argument("view", help="the view to rebuild")
    rb.add_argument("--no-wait", action="store_true", help="do not wait for the rebuild")
    add_duration(rb, "--timeout", "10m", "how long to wait")
    rb.add_argument("--who", default=None, help="who to record (default: user@host)")


def cmd_rebuild(args: argparse.Namespace) -> int:
    """recompute a view at its next barrier; the views downstream follow at the same barrier

    The view's job (it must be running, or the rebuild waits for it) recomputes the view
    from its sources at its next barrier, whatever its strategy. This waits for the view
    and every view downstream and prints the barrier.
    """
    with connect(args) as c:
        return rebuild(c, args, _human(args))


def rebuild(c: Client, args: argparse.Namespace, out: Callable[[str], object] = print) -> int:
    """``snapview rebuild VIEW``: request the rebuild, then wait for it and for the views
    downstream of it."""
    rev = c.rebuild(args.view, who=args.who)
    out(f"revision {rev.id}: rebuild of {rev.table} requested; its job {rev.job!r} recomputes it")
    report: dict = {"revision": revision_dict(rev)}
    if not args.no_wait:
        report.update(wait_and_report(c, rev, args.timeout, out))
        report["revision"] = revision_dict(c.revision(rev.id))
    if args.format == "json":
        print(json.dumps(report))
    return 0


def add_revisions(sub: Subparsers) -> None:
    rs = add_verb(sub, cmd_revisions, formats=TEXT_JSON)
    rs.add_argument("--table", default=None, help="only this table's")
    rs.add_argument("--limit", type=int, default=0, help="at most this many (0: all)")


def format_revisions(revs: list[Revision]) -> list[str]:
    """The text of ``snapview revisions``: one line per revision, newest first."""
    from coordinator.times import format_ts, with_wall

    if not revs:
        return ["no revisions"]
    lines = [
        f"{'id':>4}  {'kind':11} {'table':20} {'state':8} {'rows':>7}  {'barrier':>20}  "
        f"{'when':29} who"
    ]
    for r in revs:
        when = format_ts(r.commit_ts) if r.commit_ts else ""
        lines.append(
            f"{r.id:>4}  {r.kind:11} {shown(r.table):20} {r.state:8} {r.rows:>7}  "
            f"{r.barrier:>20}  {when:29} {shown(r.who)}"
        )
        if r.kind == "rollback":
            lines.append(f"      back to {with_wall(r.target_ts)}")
        if r.error:
            lines.append(f"      {shown(r.error)}")
    return lines


def cmd_revisions(args: argparse.Namespace) -> int:
    """the revisions recorded: who, when, what, the barrier, the rows changed

    Newest first: rollbacks, correction sets and rebuilds, with their state.
    """
    with connect(args) as c:
        revs = c.revisions(args.table, args.limit)
    if args.format == "json":
        print(json.dumps([revision_dict(r) for r in revs]))
    else:
        print("\n".join(format_revisions(revs)))
    return 0
