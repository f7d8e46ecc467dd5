"""A gRPC channel that a forked child can go on using: each process gets a channel of its own.

A gRPC channel does not survive ``fork()`` without ``exec``: a child that calls through the
parent's channel waits forever (or fails, depending on gRPC's fork support and on what the
parent's threads were doing at the fork). Python programs fork all the time
(``multiprocessing``'s default start method on Linux before Python 3.14), often after they
connected. ``ForkSafeChannel`` checks the process id on every call and, in a child, opens a new
channel from the same settings before the first call there; the stubs built on it (and
everything holding them: ``RemoteStore``, the coordinator's client) follow without being rebuilt.

It changes nothing process-wide: no environment variable, no gRPC setting, no fork handler. The
parent's channel is left alone in the child, never closed or freed there (closing it would call
into gRPC state that belongs to the parent's threads), so a child holds one idle channel object
per inherited client; the parent's own use of it is unaffected.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import grpc

# What children inherited and must not close or free (see the module docstring). Only appended
# to in a child, once per inherited channel.
_INHERITED: list[Any] = []
# One lock per process: a lock another thread of the parent held at the fork would stay held in
# the child forever, so a child never takes a lock it inherited.
_LOCKS: dict[tuple[int, str], threading.Lock] = {}


def process_lock(purpose: str = "channels") -> threading.Lock:
    """This process's lock for ``purpose`` (a forked child gets a fresh one, never one its
    parent held at the fork)."""
    key = (os.getpid(), purpose)
    lock = _LOCKS.get(key)
    if lock is None:
        lock = _LOCKS.setdefault(key, threading.Lock())  # setdefault: one winner per process
    return lock


def inherited(obj: Any) -> None:
    """Keep ``obj`` (a channel, a call, a client's per-process state) alive in this forked child
    without using it: its destructor would call into the parent's gRPC state."""
    _INHERITED.append(obj)


class ForkSafeChannel(grpc.Channel):
    """A ``grpc.Channel`` that opens a channel of its own (``factory()``) in each process that
    uses it. Calls in the process that created it go straight to its channel; the first call in
    a forked child opens a new one. ``close()`` closes this process's channel."""

    def __init__(self, factory: Callable[[], grpc.Channel]) -> None:
        self._factory = factory
        self._pid = os.getpid()
        self._channel = factory()
        self._closed = False

    @property
    def pid(self) -> int:
        """The process the current channel was opened in."""
        return self._pid

    def current(self) -> grpc.Channel:
        """This process's channel (a new one in a forked child)."""
        if self._pid != os.getpid():
            self._reopen()
        return self._channel

    def _reopen(self) -> None:
        with process_lock():
            pid = os.getpid()
            if self._pid == pid:  # another thread of this child got there first
                return
            if self._closed:
                raise ValueError("Cannot invoke RPC on closed channel!")
            inherited(self._channel)
            self._channel = self._factory()
            self._pid = pid

    def idle(self) -> bool:
        """Whether no streaming call of this channel is in progress (gRPC then has no thread of
        ours inside its core). Reads gRPC's own count where this version of grpcio keeps it;
        where it does not, says True."""
        state = getattr(self._channel, "_call_state", None)
        return getattr(state, "managed_calls", 0) == 0

    # The multi-callables: what a stub asks for, bound to this process's channel on each call.
    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Method(self, "unary_unary", method, args, kwargs)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Method(self, "unary_stream", method, args, kwargs)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Method(self, "stream_unary", method, args, kwargs)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Method(self, "stream_stream", method, args, kwargs)

    def subscribe(self, callback: Any, try_to_connect: bool = False) -> None:
        self.current().subscribe(callback, try_to_connect)

    def unsubscribe(self, callback: Any) -> None:
        self.current().unsubscribe(callback)

    def close(self) -> None:
        """Close this process's channel (in a child that never called, there is none to close:
        the parent's is left alone)."""
        self._closed = True
        if self._pid == os.getpid():
            self._channel.close()

    def __enter__(self) -> ForkSafeChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Method:
    """A multi-callable of a ``ForkSafeChannel``: the current process's channel's, made on the
    first call through that channel."""

    __slots__ = ("_owner", "_kind", "_name", "_args", "_kwargs", "_bound")

    def __init__(
        self, owner: ForkSafeChannel, kind: str, name: str, args: tuple, kwargs: dict
    ) -> None:
        self._owner = owner
        self._kind = kind
        self._name = name
        self._args = args
        self._kwargs = kwargs
        self._bound: tuple[grpc.Channel, Any] | None = None

    def _target(self) -> Any:
        channel = self._owner.current()
        bound = self._bound
        if bound is None or bound[0] is not channel:
            made = getattr(channel, self._kind)(self._name, *self._args, **self._kwargs)
            bound = self._bound = (channel, made)
        return bound[1]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._target()(*args, **kwargs)

    def with_call(self, *args: Any, **kwargs: Any) -> Any:
        return self._target().with_call(*args, **kwargs)

    def future(self, *args: Any, **kwargs: Any) -> Any:
        return self._target().future(*args, **kwargs)
