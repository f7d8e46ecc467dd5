"""Pausing CPython's cyclic garbage collector around bulk loops.

A bulk encode or prewrite allocates tens of thousands of small tuples. Every 700 container
allocations start a young collection, and every few of those a full one, which walks every
tracked object in the process: in a Spark Python worker that is all of PySpark and pyarrow.
Measured on a 15k-row prewrite: 12 ms of work, plus ~30 ms whenever a full collection lands in
it (every other call). The tuples these loops build hold no reference cycles, so reference
counting frees them and pausing the collector loses nothing; a cycle made by anything else
meanwhile is found by the first collection after the pause ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_resume = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off; it is back on (if it was on) once the last
    overlapping pause in the process ends. Safe to nest and to use from several threads."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
