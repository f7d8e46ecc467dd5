"""One client per process and server, created on first use: Spark ships readers and writers to
executors by pickling, and a gRPC channel does not pickle. A forked child (a Python worker forked
from a daemon that already connected) gets clients of its own, never its parent's, under a lock
of its own (one the parent held at the fork would stay held in the child)."""

from __future__ import annotations

import os

import coordinator
from coordinator.client import Client
from coordinator.connection import ConnectionSettings, as_settings
from kvstore.fork_safe_channel import process_lock

_clients: dict[tuple, Client] = {}


def client_for(conn: str | ConnectionSettings, token: str | None = None) -> Client:
    """The process's client for ``conn`` (settings, or an address with ``token`` beside it; a new
    client after a fork)."""
    settings = as_settings(conn, token)
    key = (os.getpid(), settings)
    with process_lock("coordinator.process_clients"):
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = coordinator.connect(settings)
        return c
