"""``snapview leases`` (and ``leases release ID``): the GC safepoint, what holds it back, the
reader leases and GC progress.

The rows come from ``Client.gc_status()``, a page at a time (``fetch_leases``), become plain
data (``gc_report``) and print as text (``format_gc_report``) or JSON.
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
    from coordinator.reports import GcInfo, LeaseInfo


def add_leases(sub: Subparsers) -> None:
    ls = add_verb(sub, cmd_leases, formats=TEXT_JSON)
    ls.add_argument("action", nargs="?", choices=["list", "release"], default="list")
    ls.add_argument("lease_id", nargs="?", metavar="ID", help="release: the lease's id")
    ls.add_argument("--holder", default="", help="list: only this holder's leases")
    ls.add_argument(
        "--limit", type=int, default=100, metavar="N", help="list: at most N leases; 0: all"
    )


def cmd_leases(args: argparse.Namespace) -> int:
    """the GC safepoint, what holds it back, and the reader leases

    The safepoint never passes: now minus --retention, a live reader lease, or the oldest
    read ts a registered job still needs. A read below it fails with SnapshotTooOld.
    leases lists the first --limit leases (of --holder only, if given), a page at a time;
    leases release ID gives lease ID back, whoever holds it (its reads may then fail with
    SnapshotTooOld once the safepoint passes them).
    """
    if args.action == "release":
        if not args.lease_id:
            print("snapview: error: leases release needs an ID", file=sys.stderr)
            return 2
        with connect(args) as c:
            return release_lease(c, args.lease_id, args.format)
    if args.lease_id:
        print(f"snapview: error: leases list takes no ID, got {args.lease_id!r}", file=sys.stderr)
        return 2
    with connect(args) as c:
        report = gc_report(*fetch_leases(c, args.holder, args.limit))
    if args.format == "json":
        print(json.dumps(report))
    else:
        print("\n".join(format_gc_report(report)))
    return 0


def fetch_leases(c: Client, holder: str = "", limit: int = 0) -> tuple[GcInfo, list[LeaseInfo]]:
    """The GC status and up to ``limit`` (0: every one) live leases of ``holder`` (every
    holder's if ''), fetched a page at a time so no answer is larger than one page."""
    page = min(limit, 10_000) if limit > 0 else 0
    st = c.gc_status(page, "", holder)
    leases: list[LeaseInfo] = list(st.leases)
    token = st.next_page_token
    while token and (limit <= 0 or len(leases) < limit):
        more = c.gc_status(page, token, holder)
        leases += more.leases
        token = more.next_page_token
    return st, leases[:limit] if limit > 0 else leases


def release_lease(c: Client, lease_id: str, fmt: str = "text") -> int:
    """``snapview leases release ID``: 0 if the lease was held and is released, 1 if there
    was no such lease (released already, expired, or never taken)."""
    existed = c.release_lease(lease_id)
    if fmt == "json":
        print(json.dumps({"id": lease_id, "released": existed}))
    elif existed:
        print(f"released lease {lease_id}")
    else:
        print(
            f"snapview: no live lease {lease_id!r} (released, expired or never taken)",
            file=sys.stderr,
        )
    return 0 if existed else 1


def gc_report(st: GcInfo, leases: list[LeaseInfo] | None = None) -> dict[str, Any]:
    """``Client.gc_status()``'s answer as plain data: times beside timestamps, ages and
    expiries in seconds on the server's clock; ``leases`` (default: the answer's page) as its
    leases."""
    from coordinator.times import format_ts
    from kvstore.mvcc.timestamp import physical_ms

    now = st.now_ms

    def age_s(ts: int) -> float | None:
        return round((now - physical_ms(ts)) / 1000, 3) if ts else None

    p = st.progress
    return {
        "enabled": st.enabled,
        "safepoint": st.safepoint,
        "safepoint_time": format_ts(st.safepoint),
        "safepoint_age_s": age_s(st.safepoint),
        "retention_s": st.retention_s,
        "interval_s": st.interval_s,
        "holds": [
            {"kind": h.kind, "name": h.name, "ts": h.ts, "time": format_ts(h.ts)} for h in st.holds
        ],
        "leases": [
            {
                "id": x.id,
                "holder": x.holder,
                "ts": x.ts,
                "time": format_ts(x.ts),
                "ttl_s": x.ttl_ms / 1000,
                "expires_in_s": round((x.expires_ms - now) / 1000, 3),
            }
            for x in (st.leases if leases is None else leases)
        ],
        "lease_count": st.lease_count,
        "total_leases": st.total_leases,
        "progress": {
            "passes": p.passes,
            "steps": p.steps,
            "versions_removed": p.versions_removed,
            "records_examined": p.records_examined,
            "records_deleted": p.records_deleted,
            "step_seconds": round(p.step_seconds, 3),
            "pass_safepoint": p.pass_safepoint,
            "pass_phase": p.pass_phase,
            "last_pass_seconds": round(p.last_pass_seconds, 3),
            "epoch_records_removed": p.epoch_records_removed,
            "barriers_removed": p.barriers_removed,
        },
    }


def format_gc_report(r: dict) -> list[str]:
    """The text of ``snapview leases``."""
    from coordinator.times import with_wall

    if r["enabled"]:
        how = f"retention {r['retention_s']:g}s, moves every {r['interval_s']:g}s"
    else:
        how = "automatic GC off (--gc-interval 0)"
    age = f", {r['safepoint_age_s']:.1f}s old" if r["safepoint_age_s"] is not None else ""
    lines = [f"GC safepoint {with_wall(r['safepoint'])}{age}; {how}"]
    lines.append("held back by (oldest first; the first one binds):")
    for h in r["holds"]:
        lines.append(f"  {h['kind']:9} {h['ts']:>20} {h['time']:29} {shown(h['name'])}")
    if any(h["kind"] == "job" and "(open epoch" in h["name"] for h in r["holds"]):
        lines.append(
            "  (an open epoch lapses once its writer stops heartbeating for --epoch-ttl; "
            "`snapview jobs release JOB` settles it now)"
        )
    if r["leases"]:
        listed = len(r["leases"])
        more = f", showing {listed} (--limit)" if listed < r["lease_count"] else ""
        lines.append(f"{r['lease_count']} reader lease(s){more}:")
        lines.append(f"  {'id':16} {'ts':>20} {'time':29} {'expires in':>10}  holder")
        for x in r["leases"]:
            lines.append(
                f"  {x['id']:16} {x['ts']:>20} {x['time']:29} {x['expires_in_s']:>9.1f}s  "
                f"{shown(x['holder'])}"
            )
    else:
        lines.append("no reader leases")
    p = r["progress"]
    lines.append(
        f"GC since start: {p['passes']} passes, {p['versions_removed']} versions removed "
        f"({p['records_deleted']} records of {p['records_examined']} examined) in "
        f"{p['step_seconds']:.2f}s of steps; last pass {p['last_pass_seconds']:.2f}s; "
        f"{p['barriers_removed']} barrier and {p['epoch_records_removed']} epoch records pruned"
    )
    return lines
