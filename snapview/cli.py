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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvstore.errors import InvalidArgument, SnapviewError
from kvstore.heavy_calls import DEFAULT_MAX_HEAVY_CALLS
from snapview.terminal import shown

SERVER_SWITCH_INTERVAL_S = 0.001  # the server process's GIL switch interval (cmd_serve)

if TYPE_CHECKING:  # the commands load what they use when they run
    from coordinator.client import Client
    from coordinator.reports import DelayInfo, TopologyInfo


def parse_duration(text: str) -> float:
    """'1s', '250ms', '2m', '6h', '1d' or a plain number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 1s, 250ms, 2m, 6h)")
    unit = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
    return float(m.group(1)) * unit[m.group(2)]


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (unless it has none: no value, or a flag that
    is off); descriptions keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False) or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


# Every verb is one function that adds its parser to the subparsers and sets ``func``, the
# handler that runs it. A new verb is one more such function, appended to COMMANDS.
Subparsers = Any  # argparse's _SubParsersAction, which typeshed keeps private


def _verb(
    sub: Subparsers, name: str, summary: str, description: str = ""
) -> argparse.ArgumentParser:
    """A subcommand with a one-line summary (in ``snapview --help``) and a description (in
    ``snapview NAME --help``), whose options show their defaults."""
    return sub.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}.\n\n{description}".rstrip(),
        formatter_class=_Formatter,
    )


def _client_args(
    p: argparse.ArgumentParser, formats: tuple[str, ...] = ("text", "json")
) -> argparse._MutuallyExclusiveGroup:
    """The options every client verb has: where the server is, how to reach it, and --format.
    ``--json`` is kept, hidden, as an alias of ``--format json``."""
    # The connection settings, as coordinator.ConnectionSettings.from_env() reads them.
    env = os.environ
    p.add_argument(
        "--address",
        "--coordinator",  # the older name
        dest="address",
        default=env.get("SNAPVIEW_ADDRESS") or env.get("SNAPVIEW_COORDINATOR") or "localhost:50051",
        metavar="HOST:PORT",
        help="address of snapview serve ($SNAPVIEW_ADDRESS overrides the default)",
    )
    p.add_argument(
        "--token-file",
        "--auth-token-file",  # the older name
        dest="token_file",
        default=env.get("SNAPVIEW_TOKEN_FILE") or None,
        metavar="FILE",
        help="file holding the server's admin or read token (default: $SNAPVIEW_TOKEN_FILE)",
    )
    p.add_argument(
        "--tls-ca",
        default=env.get("SNAPVIEW_TLS_CA") or None,
        metavar="FILE",
        help="root certificate to verify a TLS server with (default: $SNAPVIEW_TLS_CA)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--format",
        type=lambda f: "text" if f == "table" else f,  # 'table' was the old name of 'text'
        choices=formats,
        default="text",
        help="output format",
    )
    out.add_argument(
        "--json", dest="format", action="store_const", const="json", help=argparse.SUPPRESS
    )
    return out  # the output options, which exclude each other


def add_serve(sub: Subparsers) -> None:
    s = _verb(
        sub,
        "serve",
        "run the coordinator and the store on one port",
        "Runs until SIGTERM or Ctrl-C. Prints 'snapview serving on HOST:PORT ...' once it\n"
        "accepts calls (with metrics=URL when --metrics-port is given). A bind beyond loopback\n"
        "needs TLS (--tls-cert/--tls-key), a token (--token-file) or --insecure.",
    )
    s.add_argument("--data-dir", required=True, help="where the LMDB environment lives")
    s.add_argument("--host", default="127.0.0.1", help="address to bind")
    s.add_argument("--port", type=int, default=50051, help="port to bind; 0 picks a free port")
    s.add_argument(
        "--barrier-interval",
        type=parse_duration,
        default="1s",
        metavar="DURATION",
        help="time between barriers (1s, 250ms, 2m)",
    )
    s.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (plain HTTP, same host; "
        "with --token-file they need 'Authorization: Bearer TOKEN'); 0 picks a free port "
        "(default: off)",
    )
    s.add_argument(
        "--metrics-timeout",
        type=parse_duration,
        default="10s",
        metavar="DURATION",
        help="close a metrics connection that sends or reads nothing for this long",
    )
    s.add_argument("--tls-cert", metavar="FILE", help="PEM certificate: serve TLS")
    s.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    s.add_argument(
        "--token-file",
        "--auth-token-file",  # the older name
        dest="token_file",
        metavar="FILE",
        help="require a token: the admin token (full access) is in this file",
    )
    s.add_argument(
        "--read-token-file",
        metavar="FILE",
        help="also accept the read token in this file (reads, leases, jobs' calls; no drop, "
        "GC, revise; docs/design.md §8); needs --token-file",
    )
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
        help="initial LMDB map size in MiB; it grows by doubling when full",
    )
    s.add_argument(
        "--max-heavy-calls",
        type=int,
        default=DEFAULT_MAX_HEAVY_CALLS,
        metavar="N",
        help="change scans and dry-run rollbacks run at once; more wait a second, then are "
        "refused as busy (RESOURCE_EXHAUSTED, retried by clients) (default: %(default)s)",
    )
    s.add_argument(
        "--retention",
        type=parse_duration,
        default="10m",
        metavar="DURATION",
        help="history kept for reads at older timestamps (read --at, change reads); GC never "
        "passes now minus this, a reader lease, or what a registered view job still needs",
    )
    s.add_argument(
        "--gc-interval",
        type=parse_duration,
        default="10s",
        metavar="DURATION",
        help="how often the GC safepoint moves (collection runs in small steps in between); "
        "0 turns automatic GC off",
    )
    s.add_argument(
        "--epoch-ttl",
        type=parse_duration,
        default="60s",
        metavar="DURATION",
        help="an open epoch whose writer stopped renewing it (no heartbeat) for this long, or "
        "for its lock TTL if longer, stops holding the GC safepoint and is settled",
    )
    s.add_argument(
        "--max-leases",
        type=int,
        default=10_000,
        metavar="N",
        help="reader leases the server holds at once; one more is refused (RESOURCE_EXHAUSTED)",
    )
    s.add_argument(
        "--max-leases-per-holder",
        type=int,
        default=1_000,
        metavar="N",
        help="reader leases one holder (its name) holds at once; one more is refused",
    )
    s.set_defaults(func=cmd_serve)


def add_status(sub: Subparsers) -> None:
    st = _verb(sub, "status", "server status", "Version, TSO, table and job counts, space used.")
    _client_args(st)
    st.set_defaults(func=cmd_status)


def add_tables(sub: Subparsers) -> None:
    t = _verb(
        sub,
        "tables",
        "list tables",
        "Name, kind (root, view, or state: a view's state table), primary key and schema.",
    )
    _client_args(t)
    t.set_defaults(func=cmd_tables)


def add_read(sub: Subparsers) -> None:
    r = _verb(
        sub,
        "read",
        "print a table as of a timestamp",
        "Without --at, --consistent or --barrier: the latest committed state.",
    )
    r.add_argument("table", help="the table or view to read")
    g = r.add_mutually_exclusive_group()
    g.add_argument(
        "--at",
        metavar="TIME",
        help="read as of this snapview timestamp, or date and time: '2026-11-23 18:00:00' "
        "(local time) or ISO 8601 with a zone, '2026-11-23T18:00:00+01:00' (default: latest)",
    )
    g.add_argument(
        "--consistent",
        action="store_true",
        help="read the table's version at its newest barrier (a consistent snapshot)",
    )
    g.add_argument("--barrier", type=int, help="read the table's version at this barrier")
    _client_args(r, formats=("text", "csv", "json"))
    r.set_defaults(func=cmd_read)


def add_topology(sub: Subparsers) -> None:
    tp = _verb(
        sub,
        "topology",
        "jobs and tables: who writes what from what",
        "--format dot prints the lineage as Graphviz DOT (snapview topology --format dot | dot -Tsvg).",
    )
    out = _client_args(tp, formats=("text", "json", "dot"))
    out.add_argument(
        "--dot", dest="format", action="store_const", const="dot", help=argparse.SUPPRESS
    )
    tp.set_defaults(func=cmd_topology)


def add_delay(sub: Subparsers) -> None:
    dl = _verb(
        sub,
        "delay",
        "barrier lag and E2E delay of every table, and which job adds the delay",
        "behind: barriers issued since the table's newest version; lag_ms: how old that\n"
        "barrier is; e2e_ms: from the barrier to the commit of its version.\n\n"
        "Under each view, its critical path at that barrier: from the view upstream to a root,\n"
        "following the input that arrived last. own: what that table's job took (from its last\n"
        "input to its commit); wait: how long it waited for that input. The own times add up\n"
        "to e2e_ms; * marks the bottleneck (the largest own). See design.md section 5.5.",
    )
    _client_args(dl)
    dl.set_defaults(func=cmd_delay)


def add_demo(sub: Subparsers) -> None:
    d = _verb(
        sub,
        "demo",
        "run a demo on an embedded server",
        "bank: transfers between accounts, three views over them, and consistent reads that\n"
        "check that money is neither made nor lost. --revise: a third of the way in, a buggy\n"
        "batch moves money into account 0, then accounts is revised back to the last good\n"
        "barrier while transfers and reads go on; the demo follows the revision to every view.",
    )
    d.add_argument("name", choices=["bank"], help="which demo")
    d.add_argument(
        "--duration", type=parse_duration, default="30s", metavar="DURATION", help="how long"
    )
    d.add_argument("--accounts", type=int, default=1000, help="number of accounts")
    d.add_argument("--writers", type=int, default=3, help="transfer processes")
    d.add_argument(
        "--barrier-interval", default="1s", metavar="DURATION", help="time between barriers"
    )
    d.add_argument("--rate", type=float, default=100.0, help="transfers per second, 0: no limit")
    d.add_argument(
        "--revise",
        action="store_true",
        help="load a buggy batch, then roll accounts back to the last good barrier (a revision) "
        "and show it reach every view while the checker keeps reading",
    )
    d.set_defaults(func=cmd_demo)


def add_chaos(sub: Subparsers) -> None:
    ch = _verb(
        sub,
        "chaos",
        "a seeded workload under a nemesis, then the checker",
        "Exits 1 if the checker finds a violation (docs/design.md section 9).",
    )
    ch.add_argument("--workload", choices=["bank", "append"], default="bank", help="workload")
    ch.add_argument(
        "--duration", type=parse_duration, default="120s", metavar="DURATION", help="how long"
    )
    ch.add_argument("--seed", type=int, default=1, help="seed of every random choice")
    ch.add_argument("--faults", default="", help="comma-separated fault kinds (empty: all)")
    ch.add_argument("--master", default="local[2]", help="Spark master of the view driver")
    ch.add_argument(
        "--fault-every",
        type=parse_duration,
        default="8s",
        metavar="DURATION",
        help="time between faults",
    )
    ch.add_argument("--keep", action="store_true", help="keep the run's directory")
    ch.set_defaults(func=cmd_chaos)


def add_check(sub: Subparsers) -> None:
    ck = _verb(
        sub,
        "check",
        "check every record of a store on disk for damage",
        "Read-only, with or without a server running; exits 1 if anything is damaged.",
    )
    ck.add_argument("--data-dir", required=True, help="the data dir of a snapview serve")
    ck.set_defaults(func=cmd_check)


def add_jobs(sub: Subparsers) -> None:
    j = _verb(
        sub,
        "jobs",
        "every job: its state (running, lost, failed, stopped, not_started) and lag",
        "A job's state comes from its own reports to the coordinator (docs/design.md 5.5).\n"
        "jobs release JOB settles JOB's open epoch now (a writer that went away: rolled back, or\n"
        "committed if its primary was), so it no longer holds the GC safepoint, and prints what\n"
        "the job still holds; --unregister also unregisters the job (its table is then free for\n"
        "another writer, and nothing of it holds the safepoint).",
    )
    _client_args(j)
    j.add_argument("action", nargs="?", choices=["list", "release"], default="list")
    j.add_argument("job", nargs="?", help="release: the job")
    j.add_argument(
        "--unregister", action="store_true", help="release: unregister the job too (a sink's)"
    )
    j.set_defaults(func=cmd_jobs)


def add_drop(sub: Subparsers) -> None:
    d = _verb(
        sub,
        "drop",
        "drop a table or view (a view with its job)",
        "A table that views read is refused unless --cascade, which drops everything downstream "
        "too, in one transaction. The writer job of every dropped table is unregistered and "
        "stops at its next report.",
    )
    _client_args(d)
    d.add_argument("table", help="the table or view to drop")
    d.add_argument("--cascade", action="store_true", help="drop every table downstream too")
    d.set_defaults(func=cmd_drop)


def add_views(sub: Subparsers) -> None:
    v = _verb(
        sub,
        "views",
        "run view jobs as a service",
        "views run FILE: FILE defines views(spark, address) returning MaterializedViews (or "
        "builders); each is started, a failed job is restarted with back-off, and SIGTERM stops "
        "them all cleanly.",
    )
    _client_args(v)
    v.add_argument("action", choices=["run"], help="what to do")
    v.add_argument("file", help="a Python file defining views(spark, address)")
    v.add_argument("--master", default="local[2]", help="Spark master")
    v.set_defaults(func=cmd_views)


def add_leases(sub: Subparsers) -> None:
    ls = _verb(
        sub,
        "leases",
        "the GC safepoint, what holds it back, and the reader leases",
        "The safepoint never passes: now minus --retention, a live reader lease, or the oldest\n"
        "read ts a registered job still needs. A read below it fails with SnapshotTooOld.\n"
        "leases lists the first --limit leases (of --holder only, if given), a page at a time;\n"
        "leases release ID gives lease ID back, whoever holds it (its reads may then fail with\n"
        "SnapshotTooOld once the safepoint passes them).",
    )
    _client_args(ls)
    ls.add_argument("action", nargs="?", choices=["list", "release"], default="list")
    ls.add_argument("lease_id", nargs="?", metavar="ID", help="release: the lease's id")
    ls.add_argument("--holder", default="", help="list: only this holder's leases")
    ls.add_argument(
        "--limit", type=int, default=100, metavar="N", help="list: at most N leases; 0: all"
    )
    ls.set_defaults(func=cmd_leases)


def add_revise(sub: Subparsers) -> None:
    rv = _verb(
        sub,
        "revise",
        "revise a root table: roll it back, or apply corrections, as one transaction",
        "Rolls TABLE back to its state at a barrier (--to-barrier) or a time (--to-ts), or\n"
        "applies a Parquet file of corrections (--corrections, --mode upsert|delete), as one new\n"
        "transaction: history is kept, and the revision can itself be revised. Writers of the\n"
        "table wait while a rollback is applied. Every view downstream follows at one barrier;\n"
        "this waits for them and prints it. --dry-run prints what would change, in the table\n"
        "and in each downstream view's next epoch (computed by Spark), and writes nothing.\n"
        "docs/revising.md.",
    )
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
    rv.add_argument(
        "--timeout",
        type=parse_duration,
        default="10m",
        metavar="DURATION",
        help="how long to wait for the views downstream",
    )
    rv.add_argument("--who", default=None, help="who to record (default: user@host)")
    rv.add_argument(
        "--key",
        default=None,
        help="the revision key of a rollback (default: a fresh one): run again with the same "
        "key, it prints the revision that key ran instead of running a second one",
    )
    _client_args(rv)
    rv.set_defaults(func=cmd_revise)


def add_rebuild(sub: Subparsers) -> None:
    rb = _verb(
        sub,
        "rebuild",
        "recompute a view at its next barrier; the views downstream follow at the same barrier",
        "The view's job (it must be running, or the rebuild waits for it) recomputes the view\n"
        "from its sources at its next barrier, whatever its strategy. This waits for the view\n"
        "and every view downstream and prints the barrier.",
    )
    rb.add_argument("view", help="the view to rebuild")
    rb.add_argument("--no-wait", action="store_true", help="do not wait for the rebuild")
    rb.add_argument(
        "--timeout", type=parse_duration, default="10m", metavar="DURATION", help="how long to wait"
    )
    rb.add_argument("--who", default=None, help="who to record (default: user@host)")
    _client_args(rb)
    rb.set_defaults(func=cmd_rebuild)


def add_revisions(sub: Subparsers) -> None:
    rs = _verb(
        sub,
        "revisions",
        "the revisions recorded: who, when, what, the barrier, the rows changed",
        "Newest first: rollbacks, correction sets and rebuilds, with their state.",
    )
    rs.add_argument("--table", default=None, help="only this table's")
    rs.add_argument("--limit", type=int, default=0, help="at most this many (0: all)")
    _client_args(rs)
    rs.set_defaults(func=cmd_revisions)


COMMANDS: list[Callable[[Subparsers], None]] = [
    add_serve,
    add_status,
    add_tables,
    add_read,
    add_topology,
    add_delay,
    add_demo,
    add_chaos,
    add_check,
    add_jobs,
    add_drop,
    add_views,
    add_leases,
    add_revise,
    add_rebuild,
    add_revisions,
]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="snapview",
        description="Strongly consistent materialized "
        "views over transactional tables, computed by Spark.",
        formatter_class=_Formatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return ap


def _connect(args: argparse.Namespace) -> Client:
    import coordinator

    settings = coordinator.ConnectionSettings(
        address=args.address, token_file=args.token_file, tls_ca=args.tls_ca
    )
    # A person is waiting: give up on an unreachable server after a few seconds, not thirty.
    return coordinator.connect(
        settings, retry=coordinator.RetryPolicy(max_attempts=4, max_elapsed_s=5)
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
            auth_token_file=args.token_file,
            read_token_file=args.read_token_file,
            insecure=args.insecure,
            sync=not args.no_sync,
            map_size=args.map_size_mb << 20,
            retention_s=args.retention,
            gc_interval_s=args.gc_interval,
            epoch_ttl_s=args.epoch_ttl,
            metrics_port=args.metrics_port,
            metrics_timeout_s=args.metrics_timeout,
            max_heavy_calls=args.max_heavy_calls,
            max_leases=args.max_leases,
            max_leases_per_holder=args.max_leases_per_holder,
        )
    )
    # This process is the server (a program, not a library: it may set process-wide things).
    # A request thread waiting for the GIL behind a CPU-bound one (a change scan streaming, a GC
    # step) waits up to the switch interval at each hand-over, and a light call (a lease, a
    # one-row commit) makes several: 1 ms instead of Python's 5 ms keeps them short under load.
    sys.setswitchinterval(SERVER_SWITCH_INTERVAL_S)
    server.start()
    # Everything built so far (modules, gRPC, the catalog) lives as long as the process: move it
    # out of the cyclic collector's sight, so full collections walk only what requests create.
    gc.freeze()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # Tests and scripts wait for this exact line to learn the port (the first word after "on")
    # and the metrics URL (metrics=URL); the data dir, which may hold spaces, comes last.
    metrics = f" metrics={server.metrics_address}" if server.metrics_address else ""
    print(
        f"snapview serving on {bind_address(args.host, server.port)}{metrics} "
        f"data-dir={args.data_dir}",
        flush=True,
    )
    stop.wait()
    server.stop()
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from coordinator.times import format_ts

    with _connect(args) as c:
        s = c.status()
    fields = {
        "version": s.version,
        "tso": s.tso,
        "tso_time": format_ts(s.tso),
        "tables": s.tables,
        "jobs": s.jobs,
        "data_dir": s.data_dir,
        "uptime_ms": s.uptime_ms,
        "map_size_bytes": s.map_size_bytes,
        "used_bytes": s.used_bytes,
        "group_commits": s.group_commits,
        "grouped_actions": s.grouped_actions,
    }
    if args.format == "json":
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
            "primary_key": list(t.user_key),
        }
        for t in tables
    ]
    if args.format == "json":
        print(json.dumps(rows))
    elif not rows:
        print("no tables")
    else:
        for r in rows:
            print(
                f"{r['name']:24} {r['kind']:5} pk={','.join(r['primary_key']) or '(row id)':12} "
                f"{r['schema']}"
            )
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    from coordinator.times import parse_ts, with_wall

    at = None if args.at is None else parse_ts(args.at)
    with _connect(args) as c:
        if args.consistent or args.barrier:
            snap = c.snapshot([args.table], barrier=args.barrier or 0)
            at = snap.read_ts(args.table)
            print(
                f"# {args.table} at barrier {with_wall(snap.barrier)}, read ts {at}",
                file=sys.stderr,
            )
        info = c.describe_table(args.table)
        if at is not None and at < info.created_ts:
            # The table's keys hold nothing before it was created: say so, not "(no rows)".
            raise InvalidArgument(
                f"table {args.table!r} did not exist at {with_wall(at)}: it was created at "
                f"{with_wall(info.created_ts)}"
            )
        table = c.read(args.table, at=at)
    fmt = args.format
    if fmt == "json":
        print(json.dumps(table.to_pylist(), default=str))
    elif fmt == "csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, sys.stdout.buffer)
    else:
        print(table.to_pandas().to_string(index=False) if table.num_rows else "(no rows)")
    return 0


# How `topology --format dot` colors a table by its lag (TableDelay.barriers_behind): at most
# LAG_GREEN_MAX barriers behind the newest issued barrier is green, at most LAG_YELLOW_MAX
# yellow, more red; so is a table whose writer job FAILED or was LOST.
LAG_GREEN_MAX = 1
LAG_YELLOW_MAX = 10
LAG_COLORS = {"green": "palegreen", "yellow": "khaki1", "red": "salmon"}
BROKEN_JOB_STATES = ("failed", "lost")


def lag_level(barriers_behind: int, job_state: str) -> str:
    """green, yellow or red (see LAG_GREEN_MAX and LAG_YELLOW_MAX)."""
    if job_state in BROKEN_JOB_STATES or barriers_behind > LAG_YELLOW_MAX:
        return "red"
    return "green" if barriers_behind <= LAG_GREEN_MAX else "yellow"


def topology_dot(topo: TopologyInfo, delay: DelayInfo | None = None) -> str:
    """Graphviz DOT of the lineage: tables are nodes (views double-circled), each job an edge
    from every source to its sink, labelled with the job. With ``delay``, each table is filled
    by its lag (lag_level) and says how far behind it is."""
    lag = {d.table: d for d in delay.tables} if delay is not None else {}
    lines = ["digraph snapview {", "  rankdir=LR;"]
    if delay is not None:
        g, y = LAG_GREEN_MAX, LAG_YELLOW_MAX
        legend = (
            f"lag: {LAG_COLORS['green']} <= {g} barrier(s) behind, {LAG_COLORS['yellow']} <= {y}, "
            f"{LAG_COLORS['red']} more or writer job failed/lost"
        )
        lines += [f"  // {legend}", f'  label="{legend}"; labelloc=b; fontsize=10;']
    for t in topo.tables:
        shape = "doubleoctagon" if t.kind == "view" else "box"
        d = lag.get(t.table)
        if d is None:
            lines.append(f'  "{t.table}" [shape={shape}];')
            continue
        color = LAG_COLORS[lag_level(d.barriers_behind, d.job_state)]
        state = f", {d.job_state}" if d.job_state else ""
        label = f"{t.table}\\n{d.barriers_behind} behind, e2e {d.e2e_delay_ms} ms{state}"
        lines.append(
            f'  "{t.table}" [shape={shape}, style=filled, fillcolor={color}, label="{label}"];'
        )
    for j in topo.jobs:
        for src in j.sources:
            lines.append(f'  "{src}" -> "{j.sink}" [label="{j.job}"];')
    lines.append("}")
    return "\n".join(lines)


def cmd_topology(args: argparse.Namespace) -> int:
    from coordinator.times import with_wall

    with _connect(args) as c:
        topo = c.topology()
        delay = c.delay()
    if args.format == "dot":
        print(topology_dot(topo, delay))
        return 0
    behind = {d.table: d.barriers_behind for d in delay.tables}
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
    tables = [
        {
            "table": t.table,
            "kind": t.kind,
            "writer": t.writer,
            "barriers_behind": behind.get(t.table, 0),
        }
        for t in topo.tables
    ]
    if args.format == "json":
        print(json.dumps({"jobs": jobs, "tables": tables}))
        return 0
    for t in tables:
        print(
            f"table {t['table']:24} {t['kind']:5} writer={t['writer'] or '-'} "
            f"behind={t['barriers_behind']}"
        )
    for j in jobs:
        src = ", ".join(j["sources"]) or "(external)"
        extra = f" strategy={j['strategy']}" if j["strategy"] else ""
        if j["kind"] == "view" and j["last_committed"]:  # a view's epochs are its barriers
            extra += f" at barrier {with_wall(j['last_committed'])}"
        print(f"job   {j['job']:24} {j['kind']:5} {src} -> {j['sink']}{extra}")
    return 0


def cmd_delay(args: argparse.Namespace) -> int:
    from coordinator.times import format_ts, with_wall

    with _connect(args) as c:
        d = c.delay()
    rows: list[dict[str, Any]] = [  # JSON objects
        {
            "table": t.table,
            "kind": t.kind,
            "job": t.job,
            "barrier": t.barrier,
            "barrier_time": format_ts(t.barrier),
            "barriers_behind": t.barriers_behind,
            "barrier_lag_ms": t.barrier_lag_ms,
            "e2e_delay_ms": t.e2e_delay_ms,
            "job_state": t.job_state,
            "bottleneck": next((p.table for p in t.path if p.bottleneck), ""),
            "path": [
                {
                    "table": p.table,
                    "job": p.job,
                    "barrier": p.barrier,
                    "own_ms": p.own_ms,
                    "wait_ms": p.wait_ms,
                    "bottleneck": p.bottleneck,
                    "estimated": p.estimated,
                }
                for p in t.path
            ],
        }
        for t in d.tables
    ]
    if args.format == "json":
        newest = {
            "newest_barrier": d.newest_barrier,
            "newest_barrier_time": format_ts(d.newest_barrier),
        }
        print(json.dumps({**newest, "tables": rows}))
        return 0
    print(f"newest barrier {with_wall(d.newest_barrier)}")
    print(
        f"{'table':24} {'kind':5} {'job':20} {'barrier':>20} {'barrier time':29} {'behind':>6} "
        f"{'lag_ms':>7} {'e2e_ms':>7} job state"
    )
    for r in rows:
        print(
            f"{r['table']:24} {r['kind']:5} {r['job'] or '-':20} {r['barrier']:>20} "
            f"{r['barrier_time']:29} {r['barriers_behind']:>6} {r['barrier_lag_ms']:>7} "
            f"{r['e2e_delay_ms']:>7} {r['job_state'] or '-'}"
        )
        if r["kind"] == "view":
            for line in delay_path_lines(r["path"], r["barrier"]):
                print(line)
    return 0


def delay_path_lines(path: list[dict[str, Any]], barrier: int) -> list[str]:
    """A view's critical path, indented under its row: one line per table, upstream last, with
    its job's own time and wait; * marks the bottleneck."""
    out = []
    for i, p in enumerate(path):
        arrow = "  <- " if i else "     "
        note = (
            " (root reached time unknown: taken at the barrier's issue)" if p["estimated"] else ""
        )
        if p["barrier"] != barrier:
            note += f" (its version at barrier {p['barrier']})"
        out.append(
            f"{arrow}{p['table']:24} job {p['job'] or '-':20} own_ms {p['own_ms']:>7} "
            f"wait_ms {p['wait_ms']:>7}{' *' if p['bottleneck'] else ''}{note}"
        )
    return out


def cmd_jobs(args: argparse.Namespace) -> int:
    from snapview.lifecycle_commands import format_jobs, job_rows, release_job

    if args.action == "release":
        if not args.job:
            print("snapview: error: jobs release needs a JOB", file=sys.stderr)
            return 2
        with _connect(args) as c:
            out = release_job(c, args.job, args.unregister)
        print(json.dumps(out) if args.format == "json" else "\n".join(out["lines"]))
        return 0
    with _connect(args) as c:
        rows = job_rows(c)
    if args.format == "json":
        print(json.dumps(rows))
    else:
        print("\n".join(format_jobs(rows)))
    return 0


def cmd_drop(args: argparse.Namespace) -> int:
    from snapview.lifecycle_commands import drop_lines

    with _connect(args) as c:
        lines = drop_lines(c, args.table, args.cascade)
    print("\n".join(lines))
    return 0


def cmd_views(args: argparse.Namespace) -> int:
    from snapview.views_service import run_file

    return run_file(args.file, args.address, args.master)


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
        revise=args.revise,
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


def cmd_leases(args: argparse.Namespace) -> int:
    from snapview.gc_commands import fetch_leases, format_gc_report, gc_report, release_lease

    if args.action == "release":
        if not args.lease_id:
            print("snapview: error: leases release needs an ID", file=sys.stderr)
            return 2
        with _connect(args) as c:
            return release_lease(c, args.lease_id, args.format)
    if args.lease_id:
        print(f"snapview: error: leases list takes no ID, got {args.lease_id!r}", file=sys.stderr)
        return 2
    with _connect(args) as c:
        report = gc_report(*fetch_leases(c, args.holder, args.limit))
    if args.format == "json":
        print(json.dumps(report))
    else:
        print("\n".join(format_gc_report(report)))
    return 0


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
    from snapview import revision_commands

    with _connect(args) as c:
        return revision_commands.cmd_revise(c, args, _human(args))


def cmd_rebuild(args: argparse.Namespace) -> int:
    from snapview import revision_commands

    with _connect(args) as c:
        return revision_commands.cmd_rebuild(c, args, _human(args))


def cmd_revisions(args: argparse.Namespace) -> int:
    from snapview import revision_commands

    with _connect(args) as c:
        return revision_commands.cmd_revisions(c, args)


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
