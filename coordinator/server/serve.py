"""``snapview serve``: the coordinator and the store, both gRPC services on one port.

The process owns its data dir exclusively (an flock on ``DATA_DIR/serve.lock``), so two servers
can never hand out timestamps from the same TSO state. It speaks gRPC health checking and server
reflection. Security: optional TLS (``--tls-cert``/``--tls-key``) and a shared token
(``--auth-token-file``: clients send ``authorization: Bearer TOKEN``; health checks need none).
A bind to anything but loopback is refused unless one of them is set or ``--insecure`` is given.
"""

from __future__ import annotations

import fcntl
import ipaddress
import logging
import os
import socket
import uuid
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator.server.barriers import Barriers
from coordinator.server.epochs import EpochManager
from coordinator.server.registry import Registry
from coordinator.server.service import SERVICE_NAME as COORD_SERVICE
from coordinator.server.service import CoordinatorService
from coordinator.server.snapshot_planner import SnapshotPlanner
from coordinator.server.tso import TimestampOracle
from kvstore.direct import write_instance_id
from kvstore.errors import FailedPrecondition, InvalidArgument
from kvstore.limits import MAX_MESSAGE_BYTES
from kvstore.service import SERVICE_NAME as KV_SERVICE
from kvstore.service import KvStoreService
from kvstore.storage import DEFAULT_MAP_SIZE
from kvstore.store import LocalStore

log = logging.getLogger("snapview.serve")
MAX_SEND_BYTES = 256 << 20
_HEALTH_PREFIX = "/grpc.health.v1.Health/"


@dataclass
class ServeConfig:
    data_dir: str
    host: str = "127.0.0.1"
    port: int = 50051
    barrier_interval_s: float = 1.0
    tls_cert: str | None = None
    tls_key: str | None = None
    auth_token_file: str | None = None
    insecure: bool = False
    sync: bool = True
    map_size: int = DEFAULT_MAP_SIZE
    workers: int = 32


def is_loopback(host: str) -> bool:
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


class _TokenInterceptor(grpc.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}"

        def deny(request: bytes, context: grpc.ServicerContext) -> None:
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "missing or wrong auth token (send 'authorization: Bearer TOKEN')",
            )

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        if details.method.startswith(_HEALTH_PREFIX):
            return continuation(details)
        md = dict(details.invocation_metadata or ())
        if md.get("authorization") == self._expected:
            return continuation(details)
        return self._deny


class SnapviewServer:
    """A running ``snapview serve``; ``port`` is the bound port (useful with port 0)."""

    def __init__(self, cfg: ServeConfig) -> None:
        if (cfg.tls_cert is None) != (cfg.tls_key is None):
            raise InvalidArgument("--tls-cert and --tls-key go together")
        token = None
        if cfg.auth_token_file:
            with open(cfg.auth_token_file) as f:
                token = f.read().strip()
            if not token:
                raise InvalidArgument(f"auth token file {cfg.auth_token_file} is empty")
        if not is_loopback(cfg.host) and not (cfg.tls_cert or token or cfg.insecure):
            raise FailedPrecondition(
                f"refusing to bind {cfg.host}, which is not loopback, without --tls-cert/--tls-key "
                "or --auth-token-file; pass --insecure to do it anyway"
            )
        os.makedirs(cfg.data_dir, exist_ok=True)
        self._lock_fd = os.open(os.path.join(cfg.data_dir, "serve.lock"), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise FailedPrecondition(
                f"data dir {cfg.data_dir} is in use by another snapview serve"
            ) from None
        self.cfg = cfg
        self.instance_id = uuid.uuid4().hex
        write_instance_id(cfg.data_dir, self.instance_id)
        self.store = LocalStore(
            os.path.join(cfg.data_dir, "lmdb"), map_size=cfg.map_size, sync=cfg.sync
        )
        # The TSO persists into the store, so it comes second; from here on the store refuses
        # timestamps it has not issued and runs lock TTLs on its clock (kvstore.clock).
        self.tso = TimestampOracle(self.store)
        self.store.use_clock(self.tso)
        self.registry = Registry(self.store)
        self.barriers = Barriers(self.store, self.tso, self.registry, cfg.barrier_interval_s)
        self.epochs = EpochManager(self.store, self.tso, self.barriers)
        self.planner = SnapshotPlanner(
            self.store, self.tso, self.barriers, self.registry, self.epochs
        )
        resolved = self.epochs.recover()
        if resolved:
            log.info("resolved %d secondary locks of committed epochs", resolved)
        interceptors = [_TokenInterceptor(token)] if token else []
        self.grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="rpc"),
            interceptors=interceptors,
            options=[
                # A request is parsed only below the limit (kvstore.limits); answers may be larger.
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_SEND_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        self.grpc.add_generic_rpc_handlers(
            [
                KvStoreService(self.store).handler(),
                CoordinatorService(
                    self.store,
                    self.tso,
                    self.epochs,
                    cfg.data_dir,
                    self.instance_id,
                    registry=self.registry,
                    planner=self.planner,
                ).handler(),
            ]
        )
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        reflection.enable_server_reflection(
            [KV_SERVICE, COORD_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], self.grpc
        )
        addr = f"{cfg.host}:{cfg.port}"
        if cfg.tls_cert:
            assert cfg.tls_key is not None  # checked above: they go together
            with open(cfg.tls_cert, "rb") as c, open(cfg.tls_key, "rb") as k:
                creds = grpc.ssl_server_credentials([(k.read(), c.read())])
            self.port = self.grpc.add_secure_port(addr, creds)
        else:
            self.port = self.grpc.add_insecure_port(addr)
        if self.port == 0:
            raise FailedPrecondition(f"cannot bind {addr}")

    def start(self) -> None:
        self.barriers.start()
        self.grpc.start()
        for name in ("", KV_SERVICE, COORD_SERVICE):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def wait(self) -> None:
        self.grpc.wait_for_termination()

    def stop(self, grace: float = 2.0) -> None:
        self.health.enter_graceful_shutdown()
        self.grpc.stop(grace).wait()
        self.barriers.stop()
        self.store.close()
        os.close(self._lock_fd)
