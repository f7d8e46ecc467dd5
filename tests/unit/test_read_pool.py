"""The epoch's read pool (spark_sink.ivm.read_pool): one per process, its threads kept across
epochs, and a forked child gets its own (the inherited one has no threads: a submit to it
would wait forever)."""

from __future__ import annotations

import os
import threading

from spark_sink.ivm.read_pool import read_pool


def test_the_pool_is_kept_and_its_threads_reused():
    pool = read_pool()
    assert read_pool() is pool
    # twenty tasks run on at most WORKERS threads, none of them this one
    idents = {pool.submit(threading.get_ident).result(10) for _ in range(20)}
    assert 1 <= len(idents) <= 4 and threading.get_ident() not in idents


def test_a_forked_child_reads_on_its_own_pool():
    parent = read_pool()
    parent.submit(int).result(10)  # the parent's threads exist
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: exits with 0 only if its pool is new and runs a task
        code = 1
        try:
            done = threading.Event()
            pool = read_pool()
            f = pool.submit(done.set)
            f.result(10)
            code = 0 if pool is not parent and done.is_set() else 2
        finally:
            os.write(w, bytes([code]))
            os._exit(code)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert got == b"\x00" and os.waitstatus_to_exitcode(status) == 0
    assert read_pool() is parent
