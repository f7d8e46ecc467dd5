"""Abandoned locks expire on a clock that never goes back (issue 11, item 4).

A real ``snapview serve`` runs under libfaketime with its wall clock an hour ahead; a writer
prewrites and dies; then the server's wall clock is set back the hour (as NTP would). The lock
must still expire after its TTL: lock age is measured on the TSO's physical clock, which keeps
pace with the monotonic clock, not on the wall clock (which would keep it alive for the hour).
"""

from __future__ import annotations

import glob
import time

import pytest

import coordinator
from kvstore.errors import KeyIsLocked
from kvstore.mvcc.records import LockOp
from snapview.embedded import EmbeddedServer

LIBS = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
pytestmark = pytest.mark.skipif(
    not LIBS, reason="libfaketime is not installed (apt-get install libfaketime; .ci/run does)"
)


def test_lock_expires_after_the_wall_clock_steps_back(tmp_path):
    spec = tmp_path / "faketime"
    spec.write_text("+3600\n")  # an hour ahead
    env = {
        "LD_PRELOAD": LIBS[0],
        "FAKETIME_TIMESTAMP_FILE": str(spec),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    with EmbeddedServer(str(tmp_path / "data"), env=env) as server:
        c = coordinator.connect(server.address)
        try:
            start = c.tso()
            assert start >> 18 > (time.time() + 3000) * 1000, "the server's clock is not ahead"
            c.create_table("acct", "id BIGINT, v BIGINT", primary_key=["id"])
            info = c.describe_table("acct")
            k = info.key_codec.encode({"id": 1})
            row = info.row_codec.encode({"id": 1, "v": 1})
            # A writer prewrites with a 500 ms TTL and dies before committing.
            c.store.prewrite([(LockOp.PUT, k, row)], k, c.tso(), 500)
            spec.write_text("+0\n")  # NTP sets the server's clock right: back an hour
            deadline = time.monotonic() + 20
            while True:
                try:
                    got = c.store.get(k, c.tso())
                    break
                except KeyIsLocked:
                    assert time.monotonic() < deadline, "the abandoned lock did not expire"
                    time.sleep(0.1)
            assert got is None  # rolled back: the row never existed
            with c.transaction() as t:
                t.put("acct", {"id": 1, "v": 2})
            assert c.read("acct").to_pylist() == [{"id": 1, "v": 2}]
        finally:
            c.close()
