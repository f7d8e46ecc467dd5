"""The verbs of the job lifecycle: ``snapview jobs`` (and ``jobs release``), ``drop`` and
``views run``.

The work of each (``job_rows``, ``release_job``, ``drop_lines``) takes a connected client and
returns rows or lines, so it is testable without a subprocess; ``cmd_*`` parse, connect and
print.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from snapview.commands.common import TEXT_JSON, Subparsers, add_verb, connect
from snapview.terminal import shown

if TYPE_CHECKING:
    from coordinator.client import Client


def add_jobs(sub: Subparsers) -> None:
    j = add_verb(sub, cmd_jobs, formats=TEXT_JSON)
    j.add_argument("action", nargs="?", choices=["list", "release"], default="list")
    j.add_argument("job", nargs="?", help="release: the job")
    j.add_argument(
        "--unregister", action="store_true", help="release: unregister the job too (a sink's)"
    )


def cmd_jobs(args: argparse.Namespace) -> int:
    """every job: its state (running, lost, failed, stopped, not_started) and lag

    A job's state comes from its own reports to the coordinator (docs/design.md 5.5).
    jobs release JOB settles JOB's open epoch now (a writer that went away: rolled back, or
    committed if its primary was), so it no longer holds the GC safepoint, and prints what
    the job still holds; --unregister also unregisters the job (its table is then free for
    another writer, and nothing of it holds the safepoint).
    """
    if args.action == "release":
        if not args.job:
            print("snapview: error: jobs release needs a JOB", file=sys.stderr)
            return 2
        with connect(args) as c:
            out = release_job(c, args.job, args.unregister)
        print(json.dumps(out) if args.format == "json" else "\n".join(out["lines"]))
        return 0
    with connect(args) as c:
        rows = job_rows(c)
    if args.format == "json":
        print(json.dumps(rows))
    else:
        print("\n".join(format_jobs(rows)))
    return 0


def job_rows(client: Client) -> list[dict[str, Any]]:
    """One row per registered job: name, kind, sink, state, last committed barrier, how many
    barriers its table is behind, and its last error."""
    delay = {t.table: t for t in client.delay().tables}
    rows = []
    for j in sorted(client.jobs.list_jobs(), key=lambda j: j.job):
        d = delay.get(j.sink)
        rows.append(
            {
                "job": j.job,
                "kind": j.kind,
                "sink": j.sink,
                "state": str(j.state),
                "last_committed": j.last_committed,
                "barriers_behind": d.barriers_behind if d is not None else 0,
                "last_error": j.last_error,
            }
        )
    return rows


def format_jobs(rows: list[dict[str, Any]]) -> list[str]:
    """The ``snapview jobs`` table as text lines."""
    if not rows:
        return ["no jobs"]
    out = [f"{'job':28} {'kind':5} {'sink':20} {'state':12} {'behind':>6}  last error"]
    for r in rows:
        out.append(
            f"{shown(r['job']):28} {r['kind']:5} {shown(r['sink']):20} {r['state']:12} "
            f"{r['barriers_behind']:>6}  {shown(r['last_error']) or '-'}"
        )
    return out


def release_job(client: Client, job: str, unregister: bool = False) -> dict[str, Any]:
    """``snapview jobs release JOB``: settle the job's open epoch (``JobClient.release_job``),
    with ``unregister`` unregister the job too; what was done, as data and text ``lines``."""
    from coordinator.times import with_wall

    r = client.jobs.release_job(job)
    lines = []
    e = r.epoch
    if e is None:
        lines.append(f"job {job}: no open epoch to release")
    elif e.committed:
        lines.append(
            f"job {job}: open epoch {e.epoch} (start_ts {e.start_ts}) had committed its primary: "
            "it is committed; it no longer holds the GC safepoint"
        )
    else:
        lines.append(
            f"job {job}: open epoch {e.epoch} (attempt {e.attempt}, start_ts {e.start_ts}) rolled "
            "back; it no longer holds the GC safepoint (the job's next run opens it again)"
        )
    holds = list(r.holds)
    if unregister:
        client.jobs.unregister_job(job)
        holds = []
        lines.append(f"job {job}: unregistered; nothing of it holds the GC safepoint")
    for ts, why in holds:
        lines.append(
            f"job {job} still holds the GC safepoint at {with_wall(ts)}: {why}, what its next "
            "run resumes from; --unregister (or dropping its table) releases that too"
        )
    return {
        "job": job,
        "released": r.released,
        "epoch": e.epoch if e is not None else 0,
        "state": str(e.state) if e is not None else "",
        "unregistered": unregister,
        "holds": [{"ts": ts, "name": why} for ts, why in holds],
        "lines": lines,
    }


def add_drop(sub: Subparsers) -> None:
    d = add_verb(sub, cmd_drop, formats=TEXT_JSON)
    d.add_argument("table", help="the table or view to drop")
    d.add_argument("--cascade", action="store_true", help="drop every table downstream too")


def cmd_drop(args: argparse.Namespace) -> int:
    """drop a table or view (a view with its job)

    A table that views read is refused unless --cascade, which drops everything downstream too,
    in one transaction. The writer job of every dropped table is unregistered and stops at its
    next report.
    """
    with connect(args) as c:
        lines = drop_lines(c, args.table, args.cascade)
    print("\n".join(lines))
    return 0


def drop_lines(client: Client, table: str, cascade: bool) -> list[str]:
    """Drop ``table`` (a view: with its job); what was dropped, as text lines. A table that
    views read is refused (FailedPrecondition naming them) unless ``cascade``."""
    r = client.drop_table(table, cascade=cascade)
    out = [f"dropped {t} (downstream of {table})" for t in r.also_dropped]
    out.append(f"dropped {table}")
    out += [f"unregistered job {j} (it stops at its next report)" for j in r.unregistered_jobs]
    return out


def add_views(sub: Subparsers) -> None:
    v = add_verb(sub, cmd_views, formats=TEXT_JSON)
    v.add_argument("action", choices=["run"], help="what to do")
    v.add_argument("file", help="a Python file defining views(spark, address)")
    v.add_argument("--master", default="local[2]", help="Spark master")


def cmd_views(args: argparse.Namespace) -> int:
    """run view jobs as a service

    views run FILE: FILE defines views(spark, address) returning MaterializedViews (or
    builders); each is started, a failed job is restarted with back-off, and SIGTERM stops them
    all cleanly.
    """
    from snapview.views_service import run_file

    return run_file(args.file, args.address, args.master)
