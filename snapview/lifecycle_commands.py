"""The CLI verbs of the job lifecycle: ``jobs``, ``drop`` and ``views run``.

Each takes a connected client (or, for ``views run``, an address) and returns rows or an exit
code; ``snapview.cli`` parses the arguments, connects and prints. Kept apart from the CLI's
parser so the logic is testable without a subprocess.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
            f"{r['job']:28} {r['kind']:5} {r['sink']:20} {r['state']:12} "
            f"{r['barriers_behind']:>6}  {r['last_error'] or '-'}"
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
