"""One client per process and server, created on first use: Spark ships readers and writers to
executors by pickling, and a gRPC channel neither pickles nor survives a fork."""

from __future__ import annotations

import os
import threading

import coordinator
from coordinator.client import Client

_lock = threading.Lock()
_clients: dict[tuple, Client] = {}


def client_for(address: str, token: str | None = None) -> Client:
    """The process's client for ``address`` (a new one after a fork)."""
    key = (os.getpid(), address, token)
    with _lock:
        c = _clients.get(key)
        if c is None:
            c = _clients[key] = coordinator.connect(address, token=token)
        return c
