"""The threads an epoch's overlapping state reads run on, kept across epochs.

An aggregate's epoch reads its group states and each values table's touched rows at once (their
keys follow from the change alone, so the requests overlap on the server). A pool made per epoch
started its threads every epoch, and a thread's start waits until the new thread runs: 2-7 ms of
a 1,000-change epoch of a MIN/MAX view went there (profiled). So the pool is made once per
process and its idle threads wait for the next epoch.

Fork: a forked child inherits the pool object but none of its threads, and a submit there would
wait forever; the pool is keyed by the process id, so a child makes its own on first use. Nothing
else process-wide is touched (no fork handler, no atexit of ours: the pool's threads are
Python's ordinary executor threads, joined at exit when idle).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

WORKERS = 4  # a group state and up to three values tables read at once; more queue

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def read_pool() -> ThreadPoolExecutor:
    """This process's pool for an epoch's overlapping reads (made on first use, and again in a
    forked child). Callers submit and wait for their own futures; they never shut it down."""
    global _pool
    pid = os.getpid()
    got = _pool
    if got is not None and got[0] == pid:
        return got[1]
    with _lock:
        if _pool is None or _pool[0] != pid:
            _pool = (pid, ThreadPoolExecutor(WORKERS, thread_name_prefix="snapview-read"))
        return _pool[1]
