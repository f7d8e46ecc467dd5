"""Damage planted in a real data dir is detected, never served, never silent: a flipped byte of
a stored value is DATA_LOSS naming table and key through a real server and the public client; a
truncated data file or zeroed meta pages make ``snapview serve`` exit 1 with one line naming the
file; ``snapview check`` reports planted damage (exit 1) and passes a clean store (exit 0); a
data file truncated under a running server kills it with a fatal-signal report, not silently."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import lmdb
import pytest

import coordinator
from kvstore.direct import DirectPrewriter
from kvstore.errors import DataLoss
from kvstore.mvcc.keys import parse_versioned_key
from kvstore.mvcc.records import LockOp
from snapview.embedded import EmbeddedServer
from tests.conftest import connected, serve
from tests.unit.test_integrity import grow_and_free

SCHEMA = "id BIGINT, name STRING"
LONG = "L" * 3000  # longer than SHORT_VALUE_MAX: stored in the data CF


def snapview(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "snapview.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def data_dir(tmp_path):
    """A data dir with table ``acct`` (rows 0..199; row 7 holds a long value), server stopped."""
    d = tmp_path / "data"
    for srv in serve(d):
        for c in connected(srv):
            c.create_table("acct", SCHEMA, primary_key=["id"])
            with c.transaction() as t:
                for i in range(200):
                    t.put("acct", {"id": i, "name": LONG if i == 7 else f"name-{i}"})
    return d


def flip_value_byte(data_dir, cf: str, user_key: bytes) -> None:
    """Open the stopped server's LMDB environment with py-lmdb and change one byte inside the
    value of ``user_key``'s record in ``cf`` (write: the inline row; data: the long value)."""
    env = lmdb.open(str(data_dir / "lmdb"), max_dbs=16)
    db = env.open_db(cf.encode())
    with env.begin(write=True) as txn:
        found = [(k, v) for k, v in txn.cursor(db=db) if parse_versioned_key(k)[0] == user_key]
        assert len(found) == 1, found
        k, v = found[0]
        raw = bytearray(v)
        raw[len(raw) // 2] ^= 0x20  # the middle of the record: inside the value
        txn.put(k, bytes(raw), db=db)
    env.close()


def key_of(client: coordinator.Client, i: int) -> bytes:
    return client.describe_table("acct").key_codec.encode({"id": i})


def test_flipped_byte_is_data_loss_naming_table_and_key(data_dir):
    for srv in serve(data_dir):
        for c in connected(srv):
            ts = c.tso()
            inline, long = key_of(c, 42), key_of(c, 7)
            assert c.get("acct", {"id": 42}, at=ts) == {"id": 42, "name": "name-42"}
    flip_value_byte(data_dir, "write", inline)
    flip_value_byte(data_dir, "data", long)
    for srv in serve(data_dir):
        for c in connected(srv):
            e = pytest.raises(DataLoss, c.get, "acct", {"id": 42}, at=ts).value
            assert e.code == "DATA_LOSS"
            assert "table 'acct' key (42,)" in str(e), e
            e = pytest.raises(DataLoss, c.get, "acct", {"id": 7}, at=ts).value
            assert "table 'acct' key (7,)" in str(e) and "data record" in str(e), e
            e = pytest.raises(DataLoss, c.read, "acct", at=ts).value
            # the write records are checked before any long value is fetched: 42 comes first
            assert "table 'acct' key (42,)" in str(e), e
            # undamaged rows are served as before, and writes go on
            assert c.get("acct", {"id": 43}, at=ts) == {"id": 43, "name": "name-43"}
            with c.transaction() as t:
                t.put("acct", {"id": 42, "name": "rewritten"})
            assert c.get("acct", {"id": 42}) == {"id": 42, "name": "rewritten"}


def _serve_once(data_dir) -> subprocess.CompletedProcess[str]:
    return snapview("serve", "--data-dir", str(data_dir), "--port", "0", timeout=60)


def test_truncated_data_file_exits_1_with_one_line(data_dir):
    data = data_dir / "lmdb" / "data.mdb"
    os.truncate(data, os.path.getsize(data) // 2)
    p = _serve_once(data_dir)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert str(data) in lines[0] and "truncated" in lines[0]
    assert p.stdout == ""


def test_zeroed_meta_pages_exit_1_with_one_line(data_dir):
    data = data_dir / "lmdb" / "data.mdb"
    with open(data, "r+b") as f:
        f.write(b"\0" * 8192)  # both meta pages (4 KiB pages)
    p = _serve_once(data_dir)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert str(data) in lines[0] and "meta page 0 is not an LMDB meta page" in lines[0]


def test_check_passes_a_clean_store_and_reports_planted_damage(data_dir):
    p = snapview("check", "--data-dir", str(data_dir))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no damage found" in p.stdout
    env = lmdb.open(str(data_dir / "lmdb"), max_dbs=16)
    catalog = env.open_db(b"catalog")
    with env.begin() as txn:
        table_id = int(json.loads(txn.get(b"acct", db=catalog))["id"])
    env.close()
    key = table_id.to_bytes(4, "big") + (42 + (1 << 63)).to_bytes(8, "big")
    flip_value_byte(data_dir, "write", key)
    p = snapview("check", "--data-dir", str(data_dir))
    assert p.returncode == 1, p.stdout + p.stderr
    damaged = [ln for ln in p.stdout.splitlines() if ln.startswith("damaged:")]
    assert len(damaged) == 1, p.stdout
    assert "write: table 'acct' key (42,)" in damaged[0] and "checksum" in damaged[0]
    assert "1 damaged" in p.stdout
    data = data_dir / "lmdb" / "data.mdb"
    os.truncate(data, os.path.getsize(data) // 2)
    p = snapview("check", "--data-dir", str(data_dir))
    assert p.returncode == 1 and "truncated" in p.stdout, p.stdout + p.stderr


def test_free_pages_past_the_end_of_the_file_serve_check_and_write_directly(data_dir):
    """Issue 24 item 2: LMDB legally leaves its last page past the end of the file (pages a
    transaction grew the tree by and freed again are never written). The server starts on it,
    `snapview check` is clean, and a direct writer (another process's open of the environment)
    prewrites into it; the refusal of a really truncated file is in test_integrity.py."""
    lmdb_dir = str(data_dir / "lmdb")
    grow_and_free(lmdb_dir)
    p = snapview("check", "--data-dir", str(data_dir))
    assert p.returncode == 0 and "no damage found" in p.stdout, p.stdout + p.stderr
    direct = DirectPrewriter(lmdb_dir, 1 << 26)  # opened while the file still ends early
    try:
        for srv in serve(data_dir):
            for c in connected(srv):
                assert c.read("acct").num_rows == 200
                info = c.describe_table("acct")
                e = c.jobs.open_transaction("acct", 0, batch="b:0", owner="o")
                rows = [
                    (
                        LockOp.PUT,
                        info.key_codec.encode({"id": i}),
                        info.row_codec.encode({"id": i, "name": "direct"}),
                    )
                    for i in range(200, 210)
                ]
                direct.prewrite(info, rows, e.primary_key, e.start_ts, 20_000)
                done = c.jobs.commit_transaction("acct", e.epoch, e.start_ts)
                assert c.read("acct", at=done.commit_ts).num_rows == 210
    finally:
        direct.close()


def test_truncation_under_a_running_server_is_not_silent(data_dir, tmp_path):
    """Outside what can be caught (the pages are mapped): the server dies of SIGBUS, but the
    fatal signal is reported in its log instead of an empty one."""
    log = tmp_path / "serve.log"
    srv = EmbeddedServer(str(data_dir), log_path=str(log)).start()
    try:
        with coordinator.connect(srv.address, retry=coordinator.RetryPolicy(max_attempts=1)) as c:
            os.truncate(data_dir / "lmdb" / "data.mdb", 8192)
            with pytest.raises(coordinator.SnapviewError):
                c.read("acct", at=c.tso())
        assert srv.wait_dead(20)
        assert srv.proc is not None and srv.proc.returncode == -signal.SIGBUS
    finally:
        srv.stop()
    text = log.read_text(errors="replace")
    assert "Fatal Python error: Bus error" in text, text[-2000:]
