"""The storage Reader's walks for the hot paths: what they promise, the empty cases included."""

from __future__ import annotations

import threading

import pytest

from kvstore.meta_keys import STORE_FORMAT_KEY
from kvstore.mvcc.records import STORE_FORMAT
from kvstore.storage import Storage
from kvstore.store import LocalStore
from tests.conftest import wait_for


def _storage(tmp_path, items: dict[bytes, bytes]) -> Storage:
    s = Storage(str(tmp_path / "lmdb"), sync=False)
    with s.begin_write() as txn:
        for k, v in items.items():
            txn.put(k, v, db=s.cf["write"])
    return s


def test_get_many_keeps_the_present_keys_in_asked_order(tmp_path):
    s = _storage(tmp_path, {b"a": b"1", b"c": b"3"})
    with s.read_txn() as r:
        assert r.get_many("write", [b"c", b"b", b"a"]) == [(b"c", b"3"), (b"a", b"1")]
        assert r.get_many("write", [b"b", b"d"]) == []
        assert r.get_many("write", []) == []
        assert r.get_many("lock", [b"a"]) == []
    s.close()


def test_items_and_keys_from_start_at_the_first_key_not_before_start(tmp_path):
    s = _storage(tmp_path, {b"a": b"1", b"c": b"3", b"e": b"5"})
    with s.read_txn() as r:
        assert list(r.items_from("write", b"b")) == [(b"c", b"3"), (b"e", b"5")]
        assert list(r.items_from("write", b"")) == [(b"a", b"1"), (b"c", b"3"), (b"e", b"5")]
        assert list(r.keys_from("write", b"c")) == [b"c", b"e"]
        # Past the last key, and in an empty CF: nothing (not a walk from the first key).
        assert list(r.items_from("write", b"f")) == []
        assert list(r.keys_from("write", b"f")) == []
        assert list(r.items_from("lock", b"")) == []
        assert list(r.keys_from("lock", b"")) == []
    s.close()


def test_write_seeker_finds_the_first_record_at_or_after_a_key(tmp_path):
    s = _storage(tmp_path, {b"a": b"1", b"c": b"3"})
    with s.read_txn() as r:
        seek, key = r.write_seeker()
        assert seek(b"b") and key() == b"c"
        assert seek(b"a") and key() == b"a"  # a seek may go backwards
        assert not seek(b"d")
    s.close()


# ---------------------------------------------------------------- growing the map under readers


def test_a_reader_opens_a_second_transaction_while_the_map_grows(tmp_path, clock):
    """Issue 24 item 3: a thread with a read transaction open opens another one while the writer
    grows the map. The growth waits for the first to end, so the second must not wait for the
    growth (it did: both waited for good). ``_resize._resizing`` is polled to open the second
    one exactly while the growth waits."""
    s = LocalStore(str(tmp_path / "lmdb"), map_size=1 << 20, sync=False, clock=clock)
    inner: list[bytes | None] = []

    def reader() -> None:
        with s.storage.read_txn():
            wait_for(lambda: s.storage._resize._resizing, 10, "the growth to start")
            with s.storage.read_txn() as again:
                inner.append(again.get("meta", STORE_FORMAT_KEY))

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    big = s.committer.submit(lambda ctx: ctx.buf.put("meta", b"big", b"x" * (3 << 20)))
    th.join(20)
    assert not th.is_alive(), "the second read transaction waited for the growth: deadlock"
    big.result(20)
    assert inner == [str(STORE_FORMAT).encode()]
    assert s.storage.map_size() >= 4 << 20
    s.close()


def test_what_may_wait_for_the_writer_is_refused_inside_a_read_transaction(store):
    """``resolved_ts`` takes a TSO timestamp, which may write through the writer: inside a read
    transaction that could wait for a growth that waits for the transaction. It is refused."""
    store.create_table("t", "id BIGINT", ["id"])
    assert store.resolved_ts("t") > 0
    with store.storage.read_txn(), pytest.raises(RuntimeError, match="inside a read transaction"):
        store.resolved_ts("t")
    with pytest.raises(RuntimeError, match="read transaction open"):  # nor grow the map there
        with store.storage.read_txn():
            store.storage.grow()


_GROW = """
import sys
from kvstore.storage import Storage
s = Storage(sys.argv[1], map_size=64 << 20, sync=False)
with s.begin_write() as txn:
    for i in range(4000):
        txn.put(i.to_bytes(4, "big"), b"v" * 1000, db=s.cf["write"])
s.close()
"""


def test_a_reader_adopts_a_map_another_process_grew(tmp_path):
    """``snapview check`` and a direct writer open the server's environment from another
    process; when the server grows the map past what they mapped, their next read must adopt
    the new size (MDB_MAP_RESIZED), not fail: the lifecycle walk's online check hit it."""
    import subprocess
    import sys

    path = str(tmp_path / "lmdb")
    s = Storage(path, map_size=1 << 20, sync=False)
    try:
        with s.read_txn() as r:
            assert r.get("write", (0).to_bytes(4, "big")) is None
        subprocess.run([sys.executable, "-c", _GROW, path], check=True, timeout=60)
        with s.read_txn() as r:
            assert r.get("write", (3999).to_bytes(4, "big")) == b"v" * 1000
        assert s.map_size() >= 4000 * 1000
    finally:
        s.close()
