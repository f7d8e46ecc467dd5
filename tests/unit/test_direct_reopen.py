"""A process that prewrites directly reopens the store after the server restarts (a new instance
id over the same files): LMDB allows one open of an environment per process, so the old one must
be closed first (it used to fail with "already open in this process" and kill the view driver)."""

from __future__ import annotations

from types import SimpleNamespace

from kvstore.direct import write_instance_id
from kvstore.store import LocalStore
from spark_sink.partition_writer import _direct, direct_prewriter


def test_direct_prewriter_reopens_after_a_server_restart(tmp_path, clock):
    data_dir = str(tmp_path)
    lmdb_path = str(tmp_path / "lmdb")
    LocalStore(lmdb_path, clock=clock, sync=False).close()  # the server's store exists
    try:
        write_instance_id(data_dir, "first")
        a = direct_prewriter(SimpleNamespace(direct=(data_dir, "first", lmdb_path, 1 << 26)))
        assert a is not None
        write_instance_id(data_dir, "second")  # the server restarted
        b = direct_prewriter(SimpleNamespace(direct=(data_dir, "second", lmdb_path, 1 << 26)))
        assert b is not None and b is not a
        with b.storage.read_txn() as r:  # the new environment works
            assert r.get("meta", b"store/format") is not None
    finally:
        for p in list(_direct.values()):
            if p is not None:
                p.close()
        _direct.clear()
