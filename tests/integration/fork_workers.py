"""A program that forks after connecting, as multiprocessing programs do (issue 24, item 1).

python fork_workers.py HOST:PORT TABLE

The parent connects, commits row 0 and starts 5 processes with multiprocessing's default start
method (fork on Linux before Python 3.14): children 1-4 connect anew and commit their row; child
5 commits through the client it inherited. Prints one line per child ("child N exit CODE SECONDS")
and exits 0 only if every child finished with 0 within 10 s.
"""

import multiprocessing
import os
import sys
import time

import coordinator

ADDRESS, TABLE = sys.argv[1], sys.argv[2]
parent = coordinator.connect(ADDRESS)
with parent.transaction() as txn:
    txn.put(TABLE, {"id": 0, "pid": 0})


def work(i: int) -> None:
    client = parent if i == 5 else coordinator.connect(ADDRESS)
    with client.transaction() as txn:
        txn.put(TABLE, {"id": i, "pid": os.getpid()})
    assert client.get(TABLE, {"id": i})["pid"] == os.getpid()


if __name__ == "__main__":
    assert multiprocessing.get_start_method() == "fork", multiprocessing.get_start_method()
    t0 = time.monotonic()
    procs = [multiprocessing.Process(target=work, args=(i,)) for i in range(1, 6)]
    for p in procs:
        p.start()
    ok = True
    for i, p in enumerate(procs, 1):
        p.join(max(0.0, 10 - (time.monotonic() - t0)))
        if p.exitcode is None:
            p.kill()
            p.join()
            ok = False
        ok = ok and p.exitcode == 0
        print(f"child {i} exit {p.exitcode} {time.monotonic() - t0:.2f}", flush=True)
    # the parent's client is unaffected by its children's use of the inherited copy
    with parent.transaction() as txn:
        txn.put(TABLE, {"id": 6, "pid": 0})
    parent.close()
    sys.exit(0 if ok else 1)
