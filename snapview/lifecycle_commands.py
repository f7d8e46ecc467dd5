"""The CLI verbs of the job lifecycle: ``jobs`` (and ``jobs release``), ``drop`` and
``views run``.

Each takes a connected client (or, for ``views run``, an address) and returns rows or an exit
code; ``snapview.cli`` parses the arguments, connects and prints. Kept apart from the CLI's
parser so the logic is testable without a subprocess.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from snapview.terminal import shown

if TYPE_CHECKING:
    from coordinator.client import Client


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


def drop_lines(client: Client, table: str, cascade: bool) -> list[str]:
    """Drop ``table`` (a view: with its job); what was dropped, as text lines. A table that
    views read is refused (FailedPrecondition naming them) unless ``cascade``."""
    r = client.drop_table(table, cascade=cascade)
    out = [f"dropped {t} (downstream of {table})" for t in r.also_dropped]
    out.append(f"dropped {table}")
    out += [f"unregistered job {j} (it stops at its next report)" for j in r.unregistered_jobs]
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
