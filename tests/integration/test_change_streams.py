"""Change scans and dry-run rollbacks stream in bounded chunks, and a server runs at most
``--max-heavy-calls`` of them at once (issue 25, item 4).

* A change read in chunks (small ``chunk_rows``: many chunks and many key windows) equals the
  net change computed from a model of the writes (keys changed at several versions, deletes,
  inserted-then-deleted and updated-back keys), and a dry-run rollback counts the same.
* The server holds a bounded amount per call: four slow readers of a 20,000-row change, each
  past its first chunk, and four concurrent dry runs over it grow the server's RSS by a few MB
  (the whole change once cost ~24 MB per call).
* Past the limit a call waits, then is refused RESOURCE_EXHAUSTED naming the limit; the
  clients retry it to success once the running call ends.
"""

from __future__ import annotations

import random
import threading

import grpc
import pytest

import coordinator
from kvstore.errors import ServerBusy
from snapview_proto.snapview.v1 import kvstore_pb2 as kpb
from snapview_proto.snapview.v1 import kvstore_pb2_grpc as kpb_grpc
from tests.conftest import server_fixture

SCHEMA = "id BIGINT, v BIGINT, pad STRING"


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


server = server_fixture("streams", "--no-sync")  # conftest's client connects to this one


def _write(c, table: str, puts: dict[int, int], deletes: set[int]) -> None:
    with c.transaction() as t:
        for i, v in puts.items():
            t.put(table, {"id": i, "v": v, "pad": f"p{v}"})
        for i in deletes:
            t.delete(table, {"id": i})


def test_chunked_change_scan_and_dry_run_match_the_model(client):
    c, table = client, "model"
    c.create_table(table, SCHEMA, ["id"])
    rng = random.Random(25)
    model: dict[int, int] = {}

    def step(puts: dict[int, int], deletes: set[int]) -> None:
        _write(c, table, puts, deletes)
        model.update(puts)
        for i in deletes:
            model.pop(i, None)

    step({i: i for i in range(300)}, set())
    start = c.tso()
    at_start = dict(model)
    for _ in range(6):  # several versions of many keys, with deletes and re-inserts
        puts = {i: rng.randrange(5) for i in rng.sample(range(400), 80)}
        step(puts, set(rng.sample(range(400), 30)) - set(puts))
    step({0: 0, 1: 1}, {2})  # 0 and 1 updated back to their old values: no net change
    step({1000: 7}, set())
    step({}, {1000})  # inserted then deleted inside the interval: no net change
    end = c.tso()
    changed = {i for i in set(at_start) | set(model) if at_start.get(i) != model.get(i)}
    assert len(changed) > 100
    info = c.store.describe_table(table)
    codec = info.row_codec

    def ids(recs) -> list[tuple[int, int | None, int | None]]:
        out = []
        for r in recs:
            old = codec.decode(r.old) if r.old is not None else None
            new = codec.decode(r.new) if r.new is not None else None
            i = (old or new)["id"]
            out.append((i, old["v"] if old else None, new["v"] if new else None))
        return out

    expected = sorted((i, at_start.get(i), model.get(i)) for i in changed)
    whole = c.store.scan_changes(table, start, end)
    assert sorted(ids(whole)) == expected
    assert [r.key for r in whole] == sorted(r.key for r in whole)
    assert all(start < r.commit_ts <= end for r in whole)
    # chunk_rows 1, 3 and 7: windows of 8, 24 and 56 keys, so several passes over the change index.
    for rows in (1, 3, 7):
        assert c.store.scan_changes(table, start, end, chunk_rows=rows) == whole, rows
    rev = c.revise(table, to_ts=start, dry_run=True, who="test")
    assert (rev.state, rev.restored, rev.removed) == (
        "dry_run",
        sum(i in at_start for i in changed),
        sum(i not in at_start for i in changed),
    )


def _raw_stream(address: str, table: str, lo: int, hi: int, chunk_rows: int):
    ch = grpc.insecure_channel(address)
    stub = kpb_grpc.KvStoreStub(ch)
    req = kpb.ScanChangesRequest(table=table, from_ts=lo, to_ts=hi, chunk_rows=chunk_rows)
    return ch, stub.ScanChanges(req, timeout=60)


def test_server_memory_is_bounded_per_slow_reader_and_dry_run(server, client):
    c, table, rows = client, "big", 20_000
    c.create_table(table, SCHEMA, ["id"])
    pad = "x" * 400
    with c.transaction(lock_ttl_ms=60_000) as t:
        for i in range(rows):
            t.put(table, {"id": i, "v": i, "pad": pad + str(i)})
    start = c.tso()
    with c.transaction(lock_ttl_ms=60_000) as t:
        for i in range(rows):
            t.put(table, {"id": i, "v": -i - 1, "pad": pad + str(-i - 1)})
    end = c.tso()
    pid = server.proc.pid
    before = _rss_kb(pid)
    streams = [_raw_stream(server.address, table, start, end, 64) for _ in range(4)]
    try:
        firsts = [next(it) for _, it in streams]  # every call is past its first chunk
        assert all(len(f.changes) > 0 for f in firsts)
        grown_mb = (_rss_kb(pid) - before) / 1024
        seen = [
            sum(len(ch.changes) for ch in it) + len(f.changes)
            for (_, it), f in zip(streams, firsts, strict=True)
        ]
    finally:
        for ch, _ in streams:
            ch.close()
    assert seen == [rows] * 4
    # The whole change as records held by each call was ~24 MB a call (~100 MB for four).
    assert grown_mb < 30, f"the server grew {grown_mb:.0f} MB for 4 slow change readers"

    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_kb(pid))
            done.wait(0.005)

    base = _rss_kb(pid)
    peak[0] = base
    sampler = threading.Thread(target=sample)
    sampler.start()
    revs: list = []
    dry = [
        threading.Thread(target=lambda: revs.append(c.revise(table, to_ts=start, dry_run=True)))
        for _ in range(4)
    ]
    for t in dry:
        t.start()
    for t in dry:
        t.join()
    done.set()
    sampler.join()
    assert [r.restored for r in revs] == [rows] * 4
    grown_mb = (peak[0] - base) / 1024
    assert grown_mb < 30, f"the server grew {grown_mb:.0f} MB for 4 dry runs"


# One heavy call at a time; every chunk of a change scan takes 300 ms, so a scan of a few
# chunks holds its slot for a while.
busy_server = server_fixture(
    "busy",
    "--no-sync",
    "--max-heavy-calls",
    "1",
    env={"SNAPVIEW_FAILPOINTS": "store.scan_changes.chunk=sleep(300)"},
)


def test_a_call_past_the_limit_is_refused_and_retried_to_success(busy_server):
    with (
        coordinator.connect(busy_server.address) as c,
        coordinator.connect(
            busy_server.address, retry=coordinator.RetryPolicy(max_attempts=1)
        ) as once,
    ):
        c.create_table("t", SCHEMA, ["id"])
        _write(c, "t", {i: i for i in range(40)}, set())
        start = c.tso()
        _write(c, "t", {i: -i - 1 for i in range(40)}, set())
        end = c.tso()
        ch, holder = _raw_stream(busy_server.address, "t", start, end, 4)  # 11 chunks: 3.3 s
        try:
            first = len(next(holder).changes)  # it holds the one slot now
            with pytest.raises(grpc.RpcError) as e:
                list(_raw_stream(busy_server.address, "t", start, end, 0)[1])
            assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "--max-heavy-calls 1" in e.value.details()
            with pytest.raises(ServerBusy, match="max-heavy-calls 1"):
                once.revise("t", to_ts=start, dry_run=True)
            # The retrying clients get through once the holder ends.
            got: list = []
            waiters = [
                threading.Thread(
                    target=lambda: got.append(len(c.store.scan_changes("t", start, end)))
                ),
                threading.Thread(
                    target=lambda: got.append(c.revise("t", to_ts=start, dry_run=True).restored)
                ),
            ]
            for w in waiters:
                w.start()
            assert first + sum(len(x.changes) for x in holder) == 40
        finally:
            ch.close()
        for w in waiters:
            w.join(30)
        assert sorted(got) == [40, 40]
