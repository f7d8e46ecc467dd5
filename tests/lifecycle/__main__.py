"""``python -m tests.lifecycle``: the long lifecycle walk (``make lifecycle``), or a replay.

    python -m tests.lifecycle --seconds 1800 --seed 7        # SEED, LIFECYCLE_S in make
    python -m tests.lifecycle --replay /tmp/lifecycle-seed7-123.json
    LIFECYCLE_SKIP=fork,recreate_view python -m tests.lifecycle --seconds 300

Exits 1 on a failure, after printing the seed, the shrunk sequence and how to replay it.
"""

from __future__ import annotations

import argparse
import os
import sys

from tests.lifecycle.walk import Config, load, run_and_report, skip_from_env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.lifecycle", description=__doc__)
    p.add_argument("--seed", type=int, default=int(os.environ.get("SEED") or 1))
    p.add_argument("--seconds", type=float, default=float(os.environ.get("LIFECYCLE_S") or 1800))
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--replay", metavar="FILE", help="replay a saved op sequence")
    p.add_argument("--no-spark", action="store_true", help="server-only ops")
    p.add_argument("--shrink-s", type=float, default=600.0, help="time budget for shrinking")
    p.add_argument("--check-every", type=int, default=10, help="snapview check every N steps")
    p.add_argument("--failpoints", default="", help="SNAPVIEW_FAILPOINTS for the server")
    a = p.parse_args(argv)
    cfg = Config(
        seed=a.seed,
        steps=a.steps,
        seconds=a.seconds,
        spark=not a.no_spark,
        skip=skip_from_env(),
        shrink_s=a.shrink_s,
        check_every=a.check_every,
        env={"SNAPVIEW_FAILPOINTS": a.failpoints} if a.failpoints else {},
    )
    replay = None
    if a.replay:
        cfg.seed, replay = load(a.replay)
    spark = None
    if cfg.spark:

        def spark() -> object:
            import spark_sink
            from snapview.local_spark import local_session

            s = local_session(app_name="snapview-lifecycle")
            spark_sink.register(s)
            return s

    res, _, _ = run_and_report(cfg, spark, replay)
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
