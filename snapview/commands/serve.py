"""``snapview serve``: run the coordinator and the store on one port, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import faulthandler
import gc
import logging
import signal
import sys
import threading

from kvstore.heavy_calls import DEFAULT_MAX_HEAVY_CALLS
from snapview.commands.common import Subparsers, add_duration, add_verb

SERVER_SWITCH_INTERVAL_S = 0.001  # the server process's GIL switch interval (cmd_serve)


def add_serve(sub: Subparsers) -> None:
    s = add_verb(sub, cmd_serve)
    s.add_argument("--data-dir", required=True, help="where the LMDB environment lives")
    s.add_argument("--host", default="127.0.0.1", help="address to bind")
    s.add_argument("--port", type=int, default=50051, help="port to bind; 0 picks a free port")
    add_duration(s, "--barrier-interval", "1s", "time between barriers (1s, 250ms, 2m)")
    s.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (plain HTTP, same host; "
        "with --token-file they need 'Authorization: Bearer TOKEN'); 0 picks a free port "
        "(default: off)",
    )
    add_duration(
        s,
        "--metrics-timeout",
        "10s",
        "close a metrics connection that sends or reads nothing for this long",
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
    add_duration(
        s,
        "--retention",
        "10m",
        "history kept for reads at older timestamps (read --at, change reads); GC never "
        "passes now minus this, a reader lease, or what a registered view job still needs",
    )
    add_duration(
        s,
        "--gc-interval",
        "10s",
        "how often the GC safepoint moves (collection runs in small steps in between); "
        "0 turns automatic GC off",
    )
    add_duration(
        s,
        "--epoch-ttl",
        "60s",
        "an open epoch whose writer stopped renewing it (no heartbeat) for this long, or "
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


def cmd_serve(args: argparse.Namespace) -> int:
    """run the coordinator and the store on one port

    Runs until SIGTERM or Ctrl-C. Prints 'snapview serving on HOST:PORT ...' once it
    accepts calls (with metrics=URL when --metrics-port is given). A bind beyond loopback
    needs TLS (--tls-cert/--tls-key), a token (--token-file) or --insecure.
    """
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
