"""The ``snapview`` command line.

    snapview serve --data-dir DIR [--host 127.0.0.1] [--port 50051] [--barrier-interval 1s]
    snapview status|tables|topology|delay [--coordinator HOST:PORT] [--json]
    snapview topology --dot       # lineage as Graphviz DOT
    snapview read TABLE [--at TS | --consistent | --barrier T] [--format table|csv|json]
    snapview demo bank
    snapview chaos --workload bank --duration 120 --seed N
    snapview check --data-dir DIR   # every record of a store; exit 1 if anything is damaged

Errors print one line, ``snapview: error: ...``, and exit with status 1 (2 for usage errors).
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import logging
import os
import re
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from kvstore.errors import SnapviewError

if TYPE_CHECKING:  # the commands load what they use when they run
    from coordinator.client import Client
    from snapview_proto.snapview.v1.coordinator_pb2 import TopologyResponse


def parse_duration(text: str) -> float:
    """'1s', '250ms', '2m' or a plain number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 1s, 250ms, 2m)")
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--coordinator",
        default=os.environ.get("SNAPVIEW_COORDINATOR", "localhost:50051"),
        help="HOST:PORT of snapview serve (default: $SNAPVIEW_COORDINATOR or localhost:50051)",
    )
    p.add_argument("--auth-token-file", help="file holding the shared auth token")
    p.add_argument("--tls-ca", help="root certificate to verify a TLS server with")
    p.add_argument("--json", action="store_true", help="print JSON")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="snapview",
        description="Strongly consistent materialized "
        "views over transactional tables, computed by Spark.",
    )
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("serve", help="run the coordinator and the store on one port")
    s.add_argument("--data-dir", required=True, help="where the LMDB environment lives")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=50051, help="0 picks a free port")
    s.add_argument("--barrier-interval", type=parse_duration, default=1.0, metavar="DURATION")
    s.add_argument("--tls-cert")
    s.add_argument("--tls-key")
    s.add_argument("--auth-token-file")
    s.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback bind without TLS or token"
    )
    s.add_argument(
        "--no-sync",
        action="store_true",
        help="skip fsync at commit (faster; an OS crash may lose recent commits)",
    )
    s.add_argument(
        "--map-size-mb",
        type=int,
        default=64,
        help="initial LMDB map size; it grows by doubling when full",
    )

    st = sub.add_parser("status", help="server status")
    _client_args(st)
    t = sub.add_parser("tables", help="list tables")
    _client_args(t)
    r = sub.add_parser("read", help="print a table as of a timestamp")
    r.add_argument("table")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--at", type=int, help="read timestamp (default: latest)")
    g.add_argument(
        "--consistent",
        action="store_true",
        help="read the table's version at its newest barrier (a consistent snapshot)",
    )
    g.add_argument("--barrier", type=int, help="read the table's version at this barrier")
    r.add_argument("--format", choices=["table", "csv", "json"], default="table")
    _client_args(r)

    tp = sub.add_parser("topology", help="jobs and tables: who writes what from what")
    tp.add_argument("--dot", action="store_true", help="print Graphviz DOT")
    _client_args(tp)
    dl = sub.add_parser("delay", help="barrier lag and E2E delay of every table and job")
    _client_args(dl)

    d = sub.add_parser("demo", help="run a demo on the embedded default")
    d.add_argument("name", choices=["bank"])
    d.add_argument("--duration", type=parse_duration, default=30.0, metavar="DURATION")
    d.add_argument("--accounts", type=int, default=1000)
    d.add_argument("--writers", type=int, default=3, help="transfer processes")
    d.add_argument("--barrier-interval", default="1s", metavar="DURATION")
    d.add_argument("--rate", type=float, default=100.0, help="transfers per second, 0: no limit")
    ch = sub.add_parser("chaos", help="a seeded workload under a nemesis, then the checker")
    ch.add_argument("--workload", choices=["bank", "append"], default="bank")
    ch.add_argument("--duration", type=parse_duration, default=120.0, metavar="DURATION")
    ch.add_argument("--seed", type=int, default=1)
    ch.add_argument("--faults", default="", help="comma-separated fault kinds (default: all)")
    ch.add_argument("--master", default="local[2]", help="Spark master of the view driver")
    ch.add_argument("--fault-every", type=parse_duration, default=8.0, metavar="DURATION")
    ch.add_argument("--keep", action="store_true", help="keep the run's directory")
    ck = sub.add_parser("check", help="check every record of a store on disk for damage")
    ck.add_argument("--data-dir", required=True, help="the data dir of a snapview serve")
    return ap


def _connect(args: argparse.Namespace) -> Client:
    import coordinator

    # A person is waiting: give up on an unreachable server after a few seconds, not thirty.
    return coordinator.connect(
        args.coordinator,
        token_file=args.auth_token_file,
        tls_ca_file=args.tls_ca,
        retry=coordinator.RetryPolicy(max_attempts=4, max_elapsed_s=5),
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator.server.serve import ServeConfig, SnapviewServer, bind_address

    faulthandler.enable()  # a fatal signal (SIGBUS: data file truncated under us) prints a line
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    server = SnapviewServer(
        ServeConfig(
            data_dir=args.data_dir,
            host=args.host,
            port=args.port,
            barrier_interval_s=args.barrier_interval,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            auth_token_file=args.auth_token_file,
            insecure=args.insecure,
            sync=not args.no_sync,
            map_size=args.map_size_mb << 20,
        )
    )
    server.start()
    # Everything built so far (modules, gRPC, the catalog) lives as long as the process: move it
    # out of the cyclic collector's sight, so full collections walk only what requests create.
    gc.freeze()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # Tests and scripts wait for this exact line to learn the port.
    print(
        f"snapview serving on {bind_address(args.host, server.port)} data-dir={args.data_dir}",
        flush=True,
    )
    stop.wait()
    server.stop()
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with _connect(args) as c:
        s = c.status()
    fields = {
        "version": s.version,
        "tso": s.tso,
        "tables": s.tables,
        "jobs": s.jobs,
        "data_dir": s.data_dir,
        "uptime_ms": s.uptime_ms,
        "map_size_bytes": s.map_size_bytes,
        "used_bytes": s.used_bytes,
        "group_commits": s.group_commits,
        "grouped_actions": s.grouped_actions,
    }
    if args.json:
        print(json.dumps(fields))
    else:
        for k, v in fields.items():
            print(f"{k:16} {v}")
    return 0


def cmd_tables(args: argparse.Namespace) -> int:
    with _connect(args) as c:
        tables = c.tables()
    rows: list[dict[str, Any]] = [  # JSON objects
        {
            "name": t.name,
            "id": t.id,
            "kind": t.kind,
            "schema": t.schema,
            "primary_key": list(t.primary_key) if not t.hidden_row_id else [],
        }
        for t in tables
    ]
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(
                f"{r['name']:24} {r['kind']:5} pk={','.join(r['primary_key']) or '(row id)':12} "
                f"{r['schema']}"
            )
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    with _connect(args) as c:
        at = args.at
        if args.consistent or args.barrier:
            snap = c.snapshot([args.table], barrier=args.barrier or 0)
            at = snap.read_ts(args.table)
            print(f"# {args.table} at barrier {snap.barrier} (read ts {at})", file=sys.stderr)
        table = c.read(args.table, at=at)
    fmt = "json" if args.json else args.format
    if fmt == "json":
        print(json.dumps(table.to_pylist(), default=str))
    elif fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, sys.stdout.buffer)
    else:
        print(table.to_pandas().to_string(index=False) if table.num_rows else "(no rows)")
    return 0


def topology_dot(topo: TopologyResponse) -> str:
    """Graphviz DOT of the lineage: tables are nodes (views double-circled), each job an edge
    from every source to its sink, labelled with the job."""
    lines = ["digraph snapview {", "  rankdir=LR;"]
    for t in topo.tables:
        shape = "doubleoctagon" if t.kind == "view" else "box"
        lines.append(f'  "{t.table}" [shape={shape}];')
    for j in topo.jobs:
        for src in j.sources:
            lines.append(f'  "{src}" -> "{j.sink}" [label="{j.job}"];')
    lines.append("}")
    return "\n".join(lines)


def cmd_topology(args: argparse.Namespace) -> int:
    with _connect(args) as c:
        topo = c.topology()
    if args.dot:
        print(topology_dot(topo))
        return 0
    jobs: list[dict[str, Any]] = [  # JSON objects
        {
            "job": j.job,
            "kind": j.kind,
            "sink": j.sink,
            "sources": list(j.sources),
            "strategy": j.strategy,
            "last_committed": j.last_committed,
            "query": j.query,
        }
        for j in topo.jobs
    ]
    tables = [{"table": t.table, "kind": t.kind, "writer": t.writer} for t in topo.tables]
    if args.json:
        print(json.dumps({"jobs": jobs, "tables": tables}))
        return 0
    for t in tables:
        print(f"table {t['table']:24} {t['kind']:5} writer={t['writer'] or '-'}")
    for j in jobs:
        src = ", ".join(j["sources"]) or "(external)"
        extra = f" strategy={j['strategy']}" if j["strategy"] else ""
        print(f"job   {j['job']:24} {j['kind']:5} {src} -> {j['sink']}{extra}")
    return 0


def cmd_delay(args: argparse.Namespace) -> int:
    with _connect(args) as c:
        d = c.delay()
    rows = [
        {
            "table": t.table,
            "kind": t.kind,
            "job": t.job,
            "barrier": t.barrier,
            "barriers_behind": t.barriers_behind,
            "barrier_lag_ms": t.barrier_lag_ms,
            "e2e_delay_ms": t.e2e_delay_ms,
        }
        for t in d.tables
    ]
    if args.json:
        print(json.dumps({"newest_barrier": d.newest_barrier, "tables": rows}))
        return 0
    print(f"newest barrier {d.newest_barrier}")
    print(f"{'table':24} {'kind':5} {'job':20} {'barrier':>20} {'behind':>6} {'lag_ms':>7} e2e_ms")
    for r in rows:
        print(
            f"{r['table']:24} {r['kind']:5} {r['job'] or '-':20} {r['barrier']:>20} "
            f"{r['barriers_behind']:>6} {r['barrier_lag_ms']:>7} {r['e2e_delay_ms']}"
        )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    # The one place the coordinator package reaches up the layers, lazily: a demo runs the
    # whole stack (Spark views included), and the CLI is where users start it.
    from snapview.demos.bank import run_bank_demo

    parse_duration(args.barrier_interval)
    return run_bank_demo(
        duration_s=args.duration,
        accounts=args.accounts,
        writers=args.writers,
        barrier_interval=args.barrier_interval,
        rate=args.rate,
    )


def cmd_chaos(args: argparse.Namespace) -> int:
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
    cfg = ChaosConfig(
        workload=args.workload,
        duration=args.duration,
        seed=args.seed,
        faults=faults,
        master=args.master,
        fault_every=args.fault_every,
        keep_dir=args.keep,
    )
    return 0 if run(cfg).valid else 1


def cmd_check(args: argparse.Namespace) -> int:
    from kvstore.integrity import check_store

    faulthandler.enable()
    report = check_store(os.path.join(args.data_dir, "lmdb"))
    for d in report.damage:
        print(f"damaged: {d}")
    counts = ", ".join(f"{cf} {n}" for cf, n in report.records.items()) or "none readable"
    state = f"{len(report.damage)} damaged" if report.damage else "no damage found"
    print(f"{report.path}: checked {sum(report.records.values())} records ({counts}): {state}")
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {
        "serve": cmd_serve,
        "status": cmd_status,
        "tables": cmd_tables,
        "read": cmd_read,
        "topology": cmd_topology,
        "delay": cmd_delay,
        "demo": cmd_demo,
        "chaos": cmd_chaos,
        "check": cmd_check,
    }
    try:
        return handlers[args.cmd](args)
    except SnapviewError as e:
        print(f"snapview: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"snapview: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
