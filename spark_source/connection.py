"""One client per process and server, created on first use: Spark ships readers and writers to
executors by pickling, and a gRPC channel neither pickles nor survives a fork."""

from __future__ import annotations

import os
import threading

import coordinator
from coordinator.client import Client
from coordinator.connection import ConnectionSettings, as_settings

_lock = threading.Lock()
_clients: dict[tuple, Client] = {}


def client_for(conn: str | ConnectionSettings, token: str | None = None) -> Client:
    """The process's client for ``conn`` (settings, or an address with ``token`` beside it; a new
    client after a fork)."""
    settings = as_settings(conn, token)
    key = (os.getpid(), settings)
    with _lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = coordinator.connect(settings)
        return c
