"""A full disk is RESOURCE_EXHAUSTED naming the data dir, never INTERNAL: a real server whose
data dir is on a small tmpfs is filled with writes until a write fails; reads of acknowledged
rows at an explicit ts still work; once space is freed (a filler file on the same tmpfs is
deleted) writes work again, and every acknowledged row is there, also after a restart."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

import coordinator
from kvstore.errors import DiskFull
from snapview.embedded import EmbeddedServer

FILLER_BYTES = 1 << 20
ROWS_PER_TXN = 40
PAYLOAD = "p" * 2000  # long values: they go to the data CF, so the file grows fast


@pytest.fixture
def small_fs(tmp_path):
    """An 8 MiB tmpfs, unmounted afterwards."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_disk_full_is_resource_exhausted_and_the_store_recovers(small_fs, tmp_path):
    data_dir = small_fs / "data"
    filler = small_fs / "filler"
    filler.write_bytes(b"\0" * FILLER_BYTES)
    # The log lives off the tmpfs: a full disk must not hide what the server says.
    srv = EmbeddedServer(str(data_dir), log_path=str(tmp_path / "serve.log")).start()
    try:
        c = coordinator.connect(srv.address)
        c.create_table("fill", "id BIGINT, payload STRING", primary_key=["id"])
        acked: list[int] = []
        last_ts = 0
        err: coordinator.SnapviewError | None = None
        for n in range(1000):
            ids = range(n * ROWS_PER_TXN, (n + 1) * ROWS_PER_TXN)
            try:
                with c.transaction() as t:
                    for i in ids:
                        t.put("fill", {"id": i, "payload": PAYLOAD})
            except coordinator.SnapviewError as e:
                err = e
                break
            acked += ids
            last_ts = t.commit_ts
        assert err is not None, "8 MiB never filled up"
        assert acked, "nothing was written before the disk filled up"
        assert err.code == "RESOURCE_EXHAUSTED", repr(err)
        assert isinstance(err, DiskFull), repr(err)
        assert str(data_dir) in str(err) and "full" in str(err), str(err)

        # Reads at an explicit ts need no write and no timestamp: they work on a full disk.
        got = c.read("fill", at=last_ts)
        assert got.column("id").to_pylist() == acked
        assert c.get("fill", {"id": acked[-1]}, at=last_ts) == {
            "id": acked[-1],
            "payload": PAYLOAD,
        }
        assert srv.proc is not None and srv.proc.poll() is None  # the server stays up

        os.remove(filler)
        deadline = time.monotonic() + 10
        while True:  # the first write after freeing space succeeds (retried only on a race)
            try:
                with c.transaction() as t:
                    t.put("fill", {"id": -1, "payload": "after"})
                break
            except coordinator.SnapviewError as e:
                assert e.code == "RESOURCE_EXHAUSTED" and time.monotonic() < deadline, repr(e)
                time.sleep(0.2)
        rows = c.read("fill").column("id").to_pylist()
        assert rows == [-1, *acked]
        c.close()

        srv.restart()  # everything acknowledged is durable
        with coordinator.connect(srv.address) as c2:
            assert c2.read("fill").column("id").to_pylist() == [-1, *acked]
    finally:
        srv.stop()
