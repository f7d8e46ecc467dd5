"""``snapview demo`` and ``snapview chaos``: run a workload over the whole stack (a server of
its own, Spark views) and check what it reads.

Both reach every layer, so each imports its runner only when it runs.
"""

from __future__ import annotations

import argparse
import sys

from snapview.commands.common import Subparsers, add_duration, add_verb, options_for, parse_duration


def add_demo(sub: Subparsers) -> None:
    d = add_verb(sub, cmd_demo)
    d.add_argument("name", choices=["bank"], help="which demo")
    add_duration(d, "--duration", "30s", "how long", dest="duration_s")
    d.add_argument("--accounts", type=int, default=1000, help="number of accounts")
    d.add_argument("--writers", type=int, default=3, help="transfer processes")
    d.add_argument(
        "--barrier-interval", default="1s", metavar="DURATION", help="time between barriers"
    )
    d.add_argument("--rate", type=float, default=100.0, help="transfers per second, 0: no limit")
    d.add_argument("--revise", action="store_true", help="load a buggy batch, then revise it away")


def cmd_demo(args: argparse.Namespace) -> int:
    """run a demo on an embedded server

    bank: transfers between accounts, three views over them, and consistent reads that
    check that money is neither made nor lost. --revise: a third of the way in, a buggy
    batch moves money into account 0, then accounts is revised back to the last good
    barrier while transfers and reads go on; the demo follows the revision to every view.
    """
    # The one place the coordinator package reaches up the layers, lazily: a demo runs the
    # whole stack (Spark views included), and the CLI is where users start it.
    from snapview.demos.bank import run_bank_demo

    parse_duration(args.barrier_interval)
    return run_bank_demo(**options_for(run_bank_demo, args))


def add_chaos(sub: Subparsers) -> None:
    ch = add_verb(sub, cmd_chaos)
    ch.add_argument("--workload", choices=["bank", "append"], default="bank", help="workload")
    add_duration(ch, "--duration", "120s", "how long")
    ch.add_argument("--seed", type=int, default=1, help="seed of every random choice")
    ch.add_argument("--faults", default="", help="comma-separated fault kinds (empty: all)")
    ch.add_argument("--master", default="local[2]", help="Spark master of the view driver")
    add_duration(ch, "--fault-every", "8s", "time between faults")
    ch.add_argument("--keep", dest="keep_dir", action="store_true", help="keep the run's directory")


def cmd_chaos(args: argparse.Namespace) -> int:
    """a seeded workload under a nemesis, then the checker

    Exits 1 if the checker finds a violation (docs/design.md section 9).
    """
    # Like demo, the chaos runner uses every layer; it lives with its workloads in tests/chaos.
    from snapview.chaos.nemesis import FAULTS
    from snapview.chaos.runner import ChaosConfig, run

    faults = tuple(f for f in args.faults.split(",") if f) or FAULTS
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        print(
            f"snapview: error: unknown fault kinds {unknown} (known: {', '.join(FAULTS)})",
            file=sys.stderr,
        )
        return 2
    if "local-cluster" not in args.master:
        faults = tuple(f for f in faults if f != "kill-executor") or faults
    return 0 if run(ChaosConfig(**options_for(ChaosConfig, args, faults=faults))).valid else 1
