"""A process that prewrites directly reopens the store after the server restarts (a new instance
id over the same files): LMDB allows one open of an environment per process, so the old one must
be closed first (it used to fail with "already open in this process" and kill the view driver).
The direct reader (view epochs' reads) goes with the prewriter whose environment it reads."""

from __future__ import annotations

from types import SimpleNamespace

from kvstore.direct import write_instance_id
from kvstore.store import LocalStore
from spark_sink.partition_writer import (
    _readers,
    close_direct,
    direct_prewriter,
    direct_reader,
)


def test_direct_prewriter_reopens_after_a_server_restart(tmp_path, clock):
    data_dir = str(tmp_path)
    lmdb_path = str(tmp_path / "lmdb")
    LocalStore(lmdb_path, clock=clock, sync=False).close()  # the server's store exists
    try:
        write_instance_id(data_dir, "first")
        first = SimpleNamespace(direct=(data_dir, "first", lmdb_path, 1 << 26))
        a = direct_prewriter(first)
        ra = direct_reader(first.direct)
        assert a is not None and ra is not None and ra.storage is a.storage
        assert direct_reader(first.direct) is ra  # one reader per environment, asked twice
        write_instance_id(data_dir, "second")  # the server restarted
        second = SimpleNamespace(direct=(data_dir, "second", lmdb_path, 1 << 26))
        b = direct_prewriter(second)
        assert b is not None and b is not a
        assert ra not in _readers.values()  # dropped with the closed environment
        rb = direct_reader(second.direct)
        assert rb is not None and rb.storage is b.storage
        with b.storage.read_txn() as r:  # the new environment works
            assert r.get("meta", b"store/format") is not None
    finally:
        close_direct()
