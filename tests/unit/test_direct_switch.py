"""SNAPVIEW_DIRECT=off keeps a process off the direct path even on the server's host, and the
check the standalone-cluster test relies on (who holds the LMDB environment, from /proc/locks)
sees a process that took the direct path."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from kvstore.direct import write_instance_id
from kvstore.errors import InvalidArgument
from kvstore.store import LocalStore
from spark_sink.partition_writer import DIRECT_ENV, close_direct, direct_allowed, direct_prewriter
from tests.spark.standalone import lmdb_holders


@pytest.fixture
def server_files(tmp_path, clock):
    """(target, lmdb path): a store's files and instance id, as a server on this host leaves
    them, and an epoch target naming them."""
    data_dir, lmdb_path = str(tmp_path), str(tmp_path / "lmdb")
    LocalStore(lmdb_path, clock=clock, sync=False).close()
    write_instance_id(data_dir, "inst")
    try:
        yield SimpleNamespace(direct=(data_dir, "inst", lmdb_path, 1 << 26)), lmdb_path
    finally:
        close_direct()


def test_off_keeps_a_process_on_the_servers_host_off_the_direct_path(server_files, monkeypatch):
    target, lmdb_path = server_files
    monkeypatch.setenv(DIRECT_ENV, "off")
    assert not direct_allowed()
    assert direct_prewriter(target) is None
    assert os.getpid() not in lmdb_holders(lmdb_path)


@pytest.mark.parametrize("value", [None, "auto", "AUTO", "on"])
def test_auto_takes_the_direct_path_and_the_lock_check_sees_it(server_files, monkeypatch, value):
    target, lmdb_path = server_files
    if value is None:
        monkeypatch.delenv(DIRECT_ENV, raising=False)
    else:
        monkeypatch.setenv(DIRECT_ENV, value)
    assert lmdb_holders(lmdb_path) == set()  # the store is closed: nobody holds it
    assert direct_prewriter(target) is not None
    assert lmdb_holders(lmdb_path) == {os.getpid()}
    # switched off later in the same process: no new direct prewrite is made
    monkeypatch.setenv(DIRECT_ENV, "off")
    assert direct_prewriter(target) is None


def test_a_value_neither_auto_nor_off_is_named(monkeypatch):
    monkeypatch.setenv(DIRECT_ENV, "sometimes")
    with pytest.raises(InvalidArgument, match=r"SNAPVIEW_DIRECT='sometimes' .*auto .* or off"):
        direct_allowed()
