"""The ``snapview`` command line.

    snapview serve --data-dir DIR [--host 127.0.0.1] [--port 50051] [--barrier-interval 1s]
                   [--metrics-port PORT]   # Prometheus metrics at http://HOST:PORT/metrics
    snapview status|tables|topology|delay [--coordinator HOST:PORT] [--format text|json]
    snapview topology --format dot       # lineage as Graphviz DOT
    snapview read TABLE [--at TS | --consistent | --barrier T] [--format text|csv|json]
    snapview demo bank
    snapview chaos --workload bank --duration 120 --seed N
    snapview check --data-dir DIR   # every record of a store; exit 1 if anything is damaged

``snapview COMMAND --help`` describes a command and shows every option's default. Errors print one
line, ``snapview: error: ...``, and exit with status 1 (2 for usage errors). A command imports
only what it needs when it runs: ``status`` or ``tables`` load neither PySpark nor pyarrow, so the
CLI answers in a fraction of a second (docs/performance.md#the-cli). ``--json`` is a hidden alias
of ``--format json`` (and ``--dot`` of topology's ``--format dot``).

This module assembles the parser from the verb modules of ``snapview.commands`` (one per group
of verbs: parser, handler and renderer together) and dispatches to the verb's handler.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from kvstore.errors import SnapviewError
from snapview.commands import (
    check,
    delay,
    leases,
    lifecycle,
    revisions,
    serve,
    status,
    tables,
    topology,
    workloads,
)
from snapview.commands.common import Formatter, Subparsers
from snapview.terminal import shown

# Every verb, in the order ``snapview --help`` lists them.
COMMANDS: list[Callable[[Subparsers], None]] = [
    serve.add_serve,
    status.add_status,
    tables.add_tables,
    tables.add_read,
    topology.add_topology,
    delay.add_delay,
    workloads.add_demo,
    workloads.add_chaos,
    check.add_check,
    lifecycle.add_jobs,
    lifecycle.add_drop,
    lifecycle.add_views,
    leases.add_leases,
    revisions.add_revise,
    revisions.add_rebuild,
    revisions.add_revisions,
]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="snapview",
        description="Strongly consistent materialized "
        "views over transactional tables, computed by Spark.",
        formatter_class=Formatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    # gRPC's C core logs failed TLS handshakes to stderr; our error line says what went wrong.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except SnapviewError as e:
        print(f"snapview: error: {shown(e)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # (an OSError: before it)
        return _reader_went_away()
    except OSError as e:
        print(f"snapview: error: {shown(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _reader_went_away() -> int:
    """``snapview ... | head``: the reader closed the pipe. Exit quietly with 141 (128 + SIGPIPE),
    as a shell tool killed by SIGPIPE would, without a traceback or an error line. stdout is
    pointed at /dev/null first, so the interpreter's own flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout has no descriptor (replaced, closed): nothing to flush
        pass
    return 141


if __name__ == "__main__":
    sys.exit(main())
