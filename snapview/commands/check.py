"""``snapview check``: check every record of a store on disk for damage (read-only, with or
without a server running)."""

from __future__ import annotations

import argparse
import faulthandler
import os

from snapview.commands.common import Subparsers, add_verb


def add_check(sub: Subparsers) -> None:
    ck = add_verb(sub, cmd_check)
    ck.add_argument("--data-dir", required=True, help="the data dir of a snapview serve")


def cmd_check(args: argparse.Namespace) -> int:
    """check every record of a store on disk for damage

    Read-only, with or without a server running; exits 1 if anything is damaged.
    """
    from kvstore.integrity import check_store

    faulthandler.enable()
    report = check_store(os.path.join(args.data_dir, "lmdb"))
    for d in report.damage:
        print(f"damaged: {d}")
    counts = ", ".join(f"{cf} {n}" for cf, n in report.records.items()) or "none readable"
    state = f"{len(report.damage)} damaged" if report.damage else "no damage found"
    print(f"{report.path}: checked {sum(report.records.values())} records ({counts}): {state}")
    return 0 if report.ok else 1
