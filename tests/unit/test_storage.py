"""The storage Reader's walks for the hot paths: what they promise, the empty cases included."""

from __future__ import annotations

from kvstore.storage import Storage


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
