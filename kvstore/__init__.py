"""kvstore: an MVCC Percolator store on LMDB.

Layers, bottom up: ``storage`` (LMDB environment, column families), ``mvcc`` (key codec, Lock and
Write records), ``schema``/``rowcodec`` (tables' rows), ``actions`` (one module per Percolator
verb), ``group_commit`` (one writer, shared LMDB transactions), ``store`` (commands, lock
resolution on reads, the GC safepoint), ``validation`` (the request checks every command runs
first: timestamps, keys, ranges, mutations and rows; engine-free), ``gc_pass`` (GC passes driven a
step at a time over ``actions.gc``), ``service``/``remote`` (the gRPC service and a client with the
same methods).
``table_info`` and ``results`` hold the plain records both sides share, so a client (``remote``,
``wire``, ``lock_resolution``) loads neither LMDB nor the actions (tests/unit/test_layering.py).
"""
