"""kvstore: an MVCC Percolator store on LMDB.

Layers, bottom up: ``storage`` (LMDB environment, column families), ``mvcc`` (key codec, Lock and
Write records), ``schema``/``rowcodec`` (tables' rows), ``actions`` (one module per Percolator
verb), ``group_commit`` (one writer, shared LMDB transactions), ``store`` (commands: validation,
lock resolution), ``service``/``remote`` (the gRPC service and a client with the same methods).
"""
