"""kvstore: an MVCC Percolator store on LMDB.

Layers, bottom up: ``storage`` (LMDB environment, column families), ``mvcc`` (key codec, Lock and
Write records), ``schema``/``rowcodec`` (tables' rows), ``actions`` (one module per Percolator
verb), ``group_commit`` (one writer, shared LMDB transactions), ``store`` (commands: validation,
lock resolution), ``service``/``remote`` (the gRPC service and a client with the same methods).
``table_info`` and ``results`` hold the plain records both sides share, so a client (``remote``,
``wire``, ``lock_resolution``) loads neither LMDB nor the actions (tests/unit/test_layering.py).
"""

import os

# gRPC's fork handlers serve a child that goes on using gRPC after fork() without exec. snapview's
# processes fork only to exec (the Spark JVM, subprocesses) and start workers with "spawn"; with
# the handlers on, every such fork while a channel is busy logs "fork_posix.cc ... skipping fork()
# handlers" (issue 12, item 7). Set before gRPC reads it; an explicit setting wins.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
