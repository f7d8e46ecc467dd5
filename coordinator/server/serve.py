"""``snapview serve``: the coordinator and the store, both gRPC services on one port.

The process owns its data dir exclusively (an flock on ``DATA_DIR/serve.lock``), so two servers
can never hand out timestamps from the same TSO state. It speaks gRPC health checking and server
reflection. Security: optional TLS (``--tls-cert``/``--tls-key``) and tokens (``--token-file``,
the admin token, and ``--read-token-file``, the read token: clients send ``authorization: Bearer
TOKEN``; health checks need none; what each role may call: coordinator.server.roles).
A bind to anything but loopback is refused unless one of them is set or ``--insecure`` is given.

The gRPC server is asyncio (``grpc.aio``) on an event loop in a thread of its own, so that the
number of open streams costs no threads: request work runs in a bounded thread pool (the loop's
default executor, ``ServeConfig.workers`` threads) only while a request is being worked on,
and the TSO stream is served on the loop (see kvstore.grpc_errors). A call without a token (or
with one whose role may not call the method) is refused at once, before any message of it is read. One connection may hold at most
``MAX_STREAMS_PER_CONNECTION`` calls at a time, the server ``ServeConfig.max_rpcs``; calls past
that get RESOURCE_EXHAUSTED.

With ``metrics_port`` set it also serves Prometheus metrics over plain HTTP at
``http://HOST:PORT/metrics`` on the same host (coordinator.server.metrics; docs/metrics.md),
behind the token if the server has one, with bounded, timed-out connections
(coordinator.server.metrics_http).

The data dir is the server's user's alone (kvstore.private_files): 0700 directories and 0600 files,
and a data dir that is a link, another user's or open to others is refused.

Start-up checks the configuration, the TLS files and the ports before it creates the data dir,
and removes a data dir it created if a later step fails: a failed start leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import logging
import os
import shutil
import socket
import ssl
import threading
import uuid
from collections.abc import Coroutine
from concurrent import futures
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry

from coordinator.server.barriers import RECORD_RETENTION_S, Barriers
from coordinator.server.core import Core
from coordinator.server.epochs import EpochManager
from coordinator.server.gc import DEFAULT_INTERVAL_S as DEFAULT_GC_INTERVAL_S
from coordinator.server.gc import HISTORY_RETENTION_S, GcManager
from coordinator.server.leases import DEFAULT_MAX_LEASES, DEFAULT_MAX_LEASES_PER_HOLDER
from coordinator.server.metrics import ServerMetrics, gc_source, revision_source
from coordinator.server.metrics_http import IDLE_TIMEOUT_S as METRICS_TIMEOUT_S
from coordinator.server.metrics_http import MetricsHTTPServer
from coordinator.server.owned_holds import DEFAULT_HOLD_TTL_S
from coordinator.server.registry import Registry
from coordinator.server.revisions import RevisionManager
from coordinator.server.roles import RoleInterceptor, Roles
from coordinator.server.service import SERVICE_NAME as COORD_SERVICE
from coordinator.server.service import VERSION, CoordinatorService
from coordinator.server.snapshot_planner import SnapshotPlanner
from coordinator.server.tso import TimestampOracle
from kvstore.direct import INSTANCE_FILE, write_instance_id
from kvstore.errors import FailedPrecondition, InvalidArgument, SnapviewError
from kvstore.heavy_calls import DEFAULT_MAX_HEAVY_CALLS, HeavyCalls
from kvstore.limits import MAX_MESSAGE_BYTES
from kvstore.private_files import (
    check_entry,
    check_private_dir,
    make_private_dirs,
    open_private,
    tighten,
)
from kvstore.service import SERVICE_NAME as KV_SERVICE
from kvstore.service import KvStoreService
from kvstore.storage import DEFAULT_MAP_SIZE
from kvstore.store import LocalStore

log = logging.getLogger("snapview.serve")
T = TypeVar("T")
# The largest answer (a scan chunk); requests are bounded by kvstore.limits.MAX_MESSAGE_BYTES.
MAX_SEND_BYTES = 256 << 20
# HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: calls one connection may hold open at once; a client
# queues more until one ends. Keeps one connection from taking the whole max_rpcs budget.
MAX_STREAMS_PER_CONNECTION = 256
# Calls in progress on the whole server; past it a new call gets RESOURCE_EXHAUSTED at once.
MAX_CONCURRENT_RPCS = 16384


@dataclass
class ServeConfig:
    data_dir: str
    host: str = "127.0.0.1"
    port: int = 50051
    barrier_interval_s: float = 1.0
    tls_cert: str | None = None
    tls_key: str | None = None
    auth_token_file: str | None = None  # the admin token (full access)
    read_token_file: str | None = None  # the read token (coordinator.server.roles)
    insecure: bool = False
    sync: bool = True
    map_size: int = DEFAULT_MAP_SIZE
    workers: int = 32  # threads working on requests (open streams hold none)
    max_rpcs: int = MAX_CONCURRENT_RPCS
    retention_s: float = HISTORY_RETENTION_S  # history kept for reads at older timestamps
    gc_interval_s: float = DEFAULT_GC_INTERVAL_S  # how often the safepoint moves; 0: never
    # An open epoch not renewed (opened, attached to, heartbeaten) for this long lapses: it stops
    # holding the safepoint and the GC tick settles it (coordinator.server.owned_holds).
    epoch_ttl_s: float = DEFAULT_HOLD_TTL_S
    metrics_port: int | None = None  # Prometheus /metrics over HTTP: None off, 0 a free port
    metrics_timeout_s: float = METRICS_TIMEOUT_S  # a metrics connection idle this long is closed
    max_heavy_calls: int = DEFAULT_MAX_HEAVY_CALLS  # see kvstore.heavy_calls
    # Reader leases live at once, in all and per holder (coordinator.server.leases).
    max_leases: int = DEFAULT_MAX_LEASES
    max_leases_per_holder: int = DEFAULT_MAX_LEASES_PER_HOLDER


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(
                ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None)
            )
        except OSError:
            return False


def bind_address(host: str, port: int) -> str:
    """``HOST:PORT`` for gRPC, an IPv6 address in brackets (``[::1]:50051``)."""
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def metrics_tokens(roles: Roles | None) -> tuple[str, ...]:
    """The bearer tokens ``/metrics`` accepts: the read and the admin token (metrics name tables
    and jobs, which the read role may see); none on a server without tokens: it is open."""
    return roles.tokens() if roles is not None else ()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _check_port(host: str, port: int) -> None:
    """Fail with one clear line if ``host:port`` cannot be bound (a busy port, a foreign
    address), before gRPC tries it and logs its own multi-line complaint."""
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        raise FailedPrecondition(
            f"cannot bind {bind_address(host, port)}: {_one_line(e)}"
        ) from None
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            # As gRPC does: a port whose old connections linger in TIME_WAIT is free.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(sockaddr)
            except OSError as e:
                raise FailedPrecondition(
                    f"cannot bind {bind_address(host, port)}: {e.strerror or _one_line(e)}"
                ) from None


def _check_tls(cert: str, key: str) -> tuple[bytes, bytes]:
    """The PEM bytes of a certificate and its key, after checking that they load and match."""
    with open(cert, "rb") as c, open(key, "rb") as k:
        cert_pem, key_pem = c.read(), k.read()
    try:
        # (A key that needs a password fails here too, rather than prompting for one.)
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, password=lambda: "")
    except ssl.SSLError as e:
        raise InvalidArgument(
            f"TLS certificate {cert} and key {key} do not load as a PEM certificate and its "
            f"private key: {_one_line(e)}"
        ) from None
    return cert_pem, key_pem


class SnapviewServer:
    """A running ``snapview serve``; ``port`` is the bound port (useful with port 0), and
    ``metrics_address`` the URL of its Prometheus metrics (None without ``metrics_port``).

    The API is synchronous (construct, ``start``, ``wait``, ``stop``); the gRPC server runs on
    an asyncio loop in a thread of its own. A constructor that raises leaves nothing running
    and no data dir it created."""

    def __init__(self, cfg: ServeConfig) -> None:
        # 1. Everything that can be checked without touching the data dir.
        if (cfg.tls_cert is None) != (cfg.tls_key is None):
            raise InvalidArgument("--tls-cert and --tls-key go together")
        if not cfg.metrics_timeout_s > 0:
            raise InvalidArgument(
                f"--metrics-timeout must be positive, not {cfg.metrics_timeout_s}"
            )
        self.roles = Roles.load(cfg.auth_token_file, cfg.read_token_file)
        token = self.roles is not None
        self._heavy_calls = HeavyCalls(cfg.max_heavy_calls)  # refuses a limit below 1
        loopback = is_loopback(cfg.host)
        if not loopback and not (cfg.tls_cert or token or cfg.insecure):
            raise FailedPrecondition(
                f"refusing to bind {cfg.host}, which is not loopback, without --tls-cert/--tls-key "
                "or --token-file; pass --insecure to do it anyway"
            )
        creds = None
        if cfg.tls_cert:
            assert cfg.tls_key is not None  # checked above: they go together
            cert_pem, key_pem = _check_tls(cfg.tls_cert, cfg.tls_key)
            creds = grpc.ssl_server_credentials([(key_pem, cert_pem)])
        self.cfg = cfg
        self._lock_fd: int | None = None
        self._created: str | None = None  # the outermost directory this start created
        self._metrics_http: MetricsHTTPServer | None = None  # serves /metrics
        self.metrics_address: str | None = None
        self.metrics: ServerMetrics | None = None
        # Served from the moment the port is bound; the families arrive with the store.
        self.metrics_registry = CollectorRegistry()
        self._pool = futures.ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="rpc")
        self._tso_pool = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tso")
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(self._pool)
        self._thread = threading.Thread(target=self._loop.run_forever, name="grpc-aio", daemon=True)
        self._thread.start()
        try:
            # 2. The port: a busy one fails here, before the data dir exists.
            _check_port(cfg.host, cfg.port)
            self.grpc: grpc.aio.Server = self._run(self._new_server(self.roles))
            addr = bind_address(cfg.host, cfg.port)
            try:
                if creds is not None:
                    self.port = self.grpc.add_secure_port(addr, creds)
                else:
                    self.port = self.grpc.add_insecure_port(addr)
            except RuntimeError:
                self.port = 0
            if self.port == 0:
                raise FailedPrecondition(f"cannot bind {addr}")
            self.address = bind_address(cfg.host, self.port)
            self._start_metrics_http(cfg, loopback)
            if not loopback and not (cfg.tls_cert or token):
                log.warning(
                    "serving on %s, which is not loopback, with --insecure: no TLS and no "
                    "token, anyone who can reach the port can read and write everything",
                    self.address,
                )
            # 3. The data dir, its lock and the store.
            self._open_data_dir(cfg)
        except BaseException:
            self._abandon()
            raise

    def _start_metrics_http(self, cfg: ServeConfig, loopback: bool) -> None:
        """Bind and serve /metrics (a busy port fails here, before the data dir exists)."""
        if cfg.metrics_port is None:
            return
        host = cfg.host.strip("[]")
        tokens = metrics_tokens(self.roles)
        try:
            self._metrics_http = MetricsHTTPServer(
                host,
                cfg.metrics_port,
                self.metrics_registry,
                tokens=tokens,
                idle_timeout_s=cfg.metrics_timeout_s,
            )
        except OSError as e:
            raise FailedPrecondition(
                f"cannot bind the metrics port {bind_address(host, cfg.metrics_port)}: "
                f"{e.strerror or _one_line(e)}"
            ) from None
        self._metrics_http.start()
        port = self._metrics_http.server_port
        self.metrics_address = f"http://{bind_address(host, port)}/metrics"
        if not loopback:
            log.warning(
                "metrics at %s are plain HTTP %s",
                self.metrics_address,
                "(the token crosses the network unencrypted)"
                if tokens
                else "without a token: anyone who can reach the port can read table and job "
                "names and progress",
            )

    def _stop_metrics_http(self) -> None:
        if self._metrics_http is not None:
            self._metrics_http.stop()
            self._metrics_http = None

    async def _new_server(self, roles: Roles | None) -> grpc.aio.Server:
        return grpc.aio.server(
            interceptors=[RoleInterceptor(roles)] if roles else [],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_SEND_BYTES),
                ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=self.cfg.max_rpcs,
        )

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _open_data_dir(self, cfg: ServeConfig) -> None:
        # The data dir is the server's alone (kvstore.private_files): made 0700, its files 0600;
        # a link, another user's, or one open to others is refused before anything is written.
        self._created = make_private_dirs(cfg.data_dir)
        check_private_dir(cfg.data_dir)
        lmdb_path = os.path.join(cfg.data_dir, "lmdb")
        check_entry(lmdb_path, directory=True)
        for entry in (INSTANCE_FILE, "serve.lock", "lmdb/data.mdb", "lmdb/lock.mdb"):
            check_entry(os.path.join(cfg.data_dir, entry))
        self._lock_fd = open_private(
            os.path.join(cfg.data_dir, "serve.lock"), os.O_RDWR | os.O_CREAT
        )
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise FailedPrecondition(
                f"data dir {cfg.data_dir} is in use by another snapview serve"
            ) from None
        self.instance_id = uuid.uuid4().hex
        write_instance_id(cfg.data_dir, self.instance_id)
        tighten(lmdb_path, directory=True)  # an older snapview made it 0755
        try:
            self._open_store(cfg, lmdb_path)
        except SnapviewError:
            raise
        except Exception as e:  # noqa: BLE001 - a damaged store: one clear line, not a traceback
            raise FailedPrecondition(
                f"cannot open the store in {lmdb_path}: {type(e).__name__}: {_one_line(e)}"
            ) from e
        self.grpc.add_generic_rpc_handlers(
            [
                KvStoreService(self.store, roles=self.roles).handler(),
                CoordinatorService(
                    self.store,
                    self.tso,
                    self.epochs,
                    cfg.data_dir,
                    self.instance_id,
                    registry=self.registry,
                    planner=self.planner,
                    gc=self.gc,
                    revisions=self.revisions,
                    tso_executor=self._tso_pool,
                    roles=self.roles,
                ).handler(),
            ]
        )
        self.metrics = ServerMetrics(
            self.store,
            self.tso,
            self.barriers,
            self.registry,
            self.epochs,
            self.metrics_registry,
            version=VERSION,
            instance_id=self.instance_id,
        )
        self.metrics.add_source(gc_source(self.gc))
        self.metrics.add_source(revision_source(self.revisions))
        self.epochs.events = self.metrics
        self.registry.on_failed = self.metrics.job_failed
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        reflection.enable_server_reflection(
            [KV_SERVICE, COORD_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], self.grpc
        )

    def _open_store(self, cfg: ServeConfig, lmdb_path: str) -> None:
        self.store = LocalStore(lmdb_path, map_size=cfg.map_size, sync=cfg.sync)
        self.store.heavy_calls = self._heavy_calls
        try:
            # The TSO persists into the store, so it comes second; from here on the store refuses
            # timestamps it has not issued and runs lock TTLs on its clock (kvstore.clock).
            self.tso = TimestampOracle(self.store)
            self.store.use_clock(self.tso)
            self.registry = Registry(self.store)
            # Dropping a table that views read needs the registry's say (and cascade).
            self.store.drop_guard = self.registry.drop_guard
            # With GC on, barriers are pruned below the safepoint (GcManager.tick); with it off,
            # after an hour, as before.
            self.barriers = Barriers(
                self.store,
                self.tso,
                self.registry,
                cfg.barrier_interval_s,
                retention_s=None if cfg.gc_interval_s > 0 else RECORD_RETENTION_S,
            )
            self.epochs = EpochManager(
                self.store, self.tso, self.barriers, hold_ttl_ms=int(cfg.epoch_ttl_s * 1000)
            )
            self.planner = SnapshotPlanner(
                self.store, self.tso, self.barriers, self.registry, self.epochs
            )
            core = Core(self.store, self.tso, self.registry, self.barriers)
            self.gc = GcManager(
                core,
                retention_s=cfg.retention_s,
                interval_s=cfg.gc_interval_s,
                epochs=self.epochs,
                max_leases=cfg.max_leases,
                max_leases_per_holder=cfg.max_leases_per_holder,
            )
            self.revisions = RevisionManager(core, self.epochs)
            self.epochs.commit_hooks.append(self.revisions.on_epoch_commit)
            self.registry.on_unregister.append(self.revisions.on_job_gone)
            self.gc.add_holds(self.revisions.holds)
            self.gc.after_settle.append(self.revisions.settle_abandoned)
            resolved = self.epochs.recover()
            aborted = self.revisions.recover()
            if aborted:
                log.warning("%d revision(s) left running by the last stop were aborted", aborted)
        except BaseException:
            self.store.close()
            raise
        if resolved:
            log.info("resolved %d secondary locks of committed epochs", resolved)

    def _stop_loop(self) -> None:
        # The pools first, while the loop still runs to take their last results (work of calls
        # already cancelled may still be running); then the loop.
        self._pool.shutdown(wait=True)
        self._tso_pool.shutdown(wait=True)
        self._run(self._loop.shutdown_asyncgens())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def _abandon(self) -> None:
        """Undo a start that failed half-way: no server, no lock, no data dir of ours."""
        self._stop_metrics_http()
        if hasattr(self, "grpc"):
            self._run(self.grpc.stop(None))
        self._stop_loop()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._created is not None:
            shutil.rmtree(self._created, ignore_errors=True)

    def start(self) -> None:
        self.barriers.start()
        self.gc.start()
        self._run(self.grpc.start())
        for name in ("", KV_SERVICE, COORD_SERVICE):
            self._run(self.health.set(name, health_pb2.HealthCheckResponse.SERVING))

    def wait(self) -> None:
        self._run(self.grpc.wait_for_termination())

    def stop(self, grace: float = 2.0) -> None:
        """Refuse new calls, give the ones in progress ``grace`` seconds, then close the store."""
        self._stop_metrics_http()
        if self.metrics is not None:
            self.metrics.close()  # a scrape still being answered reads the store no more
        self._run(self.health.enter_graceful_shutdown())
        self._run(self.grpc.stop(grace))
        self._stop_loop()  # after the pool's last request: nothing touches the store any more
        self.barriers.stop()
        self.gc.stop()
        self.store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
