"""Automatic GC against a real ``snapview serve``: the safepoint, reader leases, job holds,
SnapshotTooOld, and GC while writers commit. The server keeps 1 s of history and moves its
safepoint every 200 ms, so every wait here is short and bounded."""

from __future__ import annotations

import json
import random
import threading
import time

import grpc
import pytest

import coordinator
from coordinator.errors import LeaseNotFound
from kvstore.errors import FailedPrecondition, InvalidArgument, NotFound, SnapshotTooOld
from snapview.cli import main as cli_main
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb
from snapview_proto.snapview.v1 import kvstore_pb2 as kpb
from tests.conftest import client_fixture, serve, server_fixture, wait_for
from tests.integration.test_barriers import commit_epoch

RETENTION_S = 1.0


gcsrv = server_fixture(
    "gc",
    "--barrier-interval",
    "100ms",
    "--retention",
    f"{RETENTION_S}s",
    "--gc-interval",
    "200ms",
    "--metrics-port",
    "0",
)
c = client_fixture("gcsrv")


def _table(c, name):
    c.create_table(name, "id BIGINT, v BIGINT", primary_key=["id"])
    return name


def _write(c, table, version, keys=range(5)):
    with c.transaction() as t:
        for k in keys:
            t.put(table, {"id": k, "v": version})
    return t.commit_ts


def _past(c, ts, timeout=15.0):
    """Wait until the safepoint is above ``ts``."""
    return wait_for(lambda: c.gc_status().safepoint > ts, timeout, f"the safepoint to pass {ts}")


def _retention_past(c, ts, timeout=15.0):
    """Wait until the retention alone would let the safepoint pass ``ts`` (and one more GC
    tick has happened since): whatever still holds it back is another hold."""
    wait_for(
        lambda: any(h.kind == "retention" and h.ts > ts for h in c.gc_status().holds),
        timeout,
        f"the retention window to pass {ts}",
    )
    time.sleep(0.5)  # the GC ticks every 200 ms: let it act on the holds it now has


def test_read_below_the_safepoint_is_snapshot_too_old(c, table_name):
    """Reads, change scans and leases below the safepoint fail with FAILED_PRECONDITION naming
    the table, the ts and the safepoint; the same reads at or above it keep working."""
    t = _table(c, table_name)
    _write(c, t, 1)
    old = c.tso()
    _write(c, t, 2)
    _past(c, old)
    sp = c.gc_status().safepoint
    for read in (
        lambda: c.read(t, at=old),
        lambda: c.get(t, {"id": 1}, at=old),
        lambda: c.store.scan_changes(t, old, c.tso()),
    ):
        with pytest.raises(SnapshotTooOld) as e:
            read()
        assert t in str(e.value) and str(old) in str(e.value) and "safepoint" in str(e.value)
        assert e.value.code == "FAILED_PRECONDITION"
    with pytest.raises(SnapshotTooOld, match=str(old)):
        c.lease(old, ttl_s=5)
    # On the wire: FAILED_PRECONDITION, never UNKNOWN.
    info = c.describe_table(t)
    with grpc.insecure_channel(c.address) as ch:
        get = ch.unary_unary("/snapview.v1.KvStore/Get")
        req = kpb.GetRequest(key=info.key_codec.encode({"id": 1}), version=old)
        with pytest.raises(grpc.RpcError) as rpc:
            get(req.SerializeToString())
        assert rpc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "older than the GC safepoint" in rpc.value.details()
    # At or above the safepoint: the newest state.
    now = c.tso()
    assert now >= sp
    assert [r["v"] for r in c.read(t, at=now).to_pylist()] == [2] * 5


def test_a_lease_holds_its_snapshot_until_released(c, table_name):
    """A leased snapshot stays readable, unchanged, long after the retention; once released,
    the safepoint passes it and the same read fails with SnapshotTooOld."""
    t = _table(c, table_name)
    _write(c, t, 1)
    snap = c.snapshot([t], wait_s=5, lease_s=2)  # renewed every 2/3 s, so it outlives its TTL
    before = snap.read(t).to_pylist()
    for v in range(2, 12):
        _write(c, t, v)
    later = c.tso()
    _retention_past(c, later)
    st = c.gc_status()
    assert st.safepoint <= snap.read_ts(t) < later
    assert st.holds[0].kind == "lease" and st.holds[0].ts == snap.read_ts(t)
    assert any(x.id == snap.lease.id for x in st.leases)
    time.sleep(2.5)  # longer than the lease's TTL: its renewals keep it alive
    assert c.gc_status().holds[0].ts == snap.read_ts(t)
    assert snap.read(t).to_pylist() == before
    snap.release()
    _past(c, snap.read_ts(t))
    with pytest.raises(SnapshotTooOld):
        snap.read(t)


def test_an_expired_lease_stops_holding(c, table_name):
    """A holder that vanishes without releasing: its lease lapses after the TTL, the safepoint
    passes it, and renewing it then fails with LeaseNotFound (FAILED_PRECONDITION)."""
    t = _table(c, table_name)
    _write(c, t, 1)
    ts = c.tso()
    lease = c.lease(ts, ttl_s=1.5, renew=False, holder="vanishing reader")
    assert c.gc_status().safepoint <= ts
    _past(c, ts)
    with pytest.raises(LeaseNotFound, match="vanishing reader|does not exist"):
        lease.renew()
    assert not c.release_lease(lease.id)


def test_lease_requests_are_checked(c):
    with pytest.raises(InvalidArgument, match="ttl"):
        c.lease(c.tso(), ttl_s=0)
    with grpc.insecure_channel(c.address) as ch:
        acquire = ch.unary_unary("/snapview.v1.Coordinator/AcquireLease")
        for req, code in (
            (cpb.AcquireLeaseRequest(holder="x", ts=c.tso(), ttl_ms=0), "INVALID_ARGUMENT"),
            (cpb.AcquireLeaseRequest(holder="x", ts=1 << 62, ttl_ms=1000), "INVALID_ARGUMENT"),
            (
                cpb.AcquireLeaseRequest(holder="x" * 5000, ts=c.tso(), ttl_ms=1000),
                "INVALID_ARGUMENT",
            ),
        ):
            with pytest.raises(grpc.RpcError) as e:
                acquire(req.SerializeToString())
            assert e.value.code().name == code, e.value.details()
    with pytest.raises(LeaseNotFound):
        c.renew_lease("0123456789abcdef", 5)
    lease = c.lease(c.tso(), ttl_s=5)
    with pytest.raises(InvalidArgument, match="forward only"):
        lease.renew(lease.ts - 1)
    lease.release()


def test_a_stopped_view_job_holds_the_safepoint_until_it_catches_up_or_goes(c, table_name):
    """A view job that stops for longer than the retention holds the safepoint at its last
    barrier: the changes it has yet to read stay readable. It catches up with nothing lost, and
    the hold moves with it; unregistered, it holds nothing."""
    src = _table(c, table_name)
    view = f"{table_name}_v"
    c.create_table(view, "id BIGINT, v BIGINT", primary_key=["id"], kind="view")
    c.jobs.register_job(view, view, [src], kind="view", query="select * from src")
    _write(c, src, 1)
    b1 = c.jobs.plan_barriers(view, limit=1).barriers[0].barrier
    commit_epoch(c, view, b1, [{"id": 0, "v": 1}])
    for v in range(2, 6):
        _write(c, src, v)
    _retention_past(c, b1)  # stopped for longer than the retention
    st = c.gc_status()
    assert st.safepoint <= b1
    assert any(h.kind == "job" and view in h.name and h.ts == b1 for h in st.holds)
    # Nothing it needs is gone: the net change since its barrier is there, whole.
    changes = c.store.scan_changes(src, b1, c.tso())
    assert len(changes) == 5 and all(x.new is not None for x in changes)
    decode = c.describe_table(src).row_codec.decode
    assert sorted(decode(x.new)["v"] for x in changes) == [5] * 5
    # It catches up barrier by barrier; the hold follows its newest barrier.
    plan = c.jobs.plan_barriers(view, limit=1000).barriers
    assert plan and plan[0].barrier > b1
    for p in plan:
        commit_epoch(c, view, p.barrier)
    newest = plan[-1].barrier
    wait_for(
        lambda: any(h.kind == "job" and h.ts == newest for h in c.gc_status().holds),
        5,
        "the job's hold to move to its newest barrier",
    )
    # Unregistered (its view dropped), it holds nothing: the safepoint passes its barrier.
    c.drop_table(view)
    _past(c, newest)
    assert not any(view in h.name for h in c.gc_status().holds)


def test_gc_while_writers_commit_loses_nothing(c, table_name):
    """Writers commit while GC collects underneath them: every acknowledged write is in the
    final state, and every read at or above the safepoint returns the same rows before and
    after GC collected below it. Prints the writers' p50/p99 commit latency."""
    t = _table(c, table_name)
    keys = list(range(50))
    acked: list[tuple[int, int, int]] = []  # (commit_ts, key, value)
    latencies: list[float] = []
    stop = threading.Event()
    lock = threading.Lock()

    def writer(seed: int) -> None:
        rnd = random.Random(seed)
        with coordinator.connect(c.address) as w:
            n = 0
            while not stop.is_set():
                k, v = rnd.choice(keys), seed * 1_000_000 + n
                n += 1
                t0 = time.perf_counter()
                try:
                    with w.transaction() as tx:
                        tx.put(t, {"id": k, "v": v})
                except coordinator.WriteConflict:
                    continue
                with lock:
                    latencies.append(time.perf_counter() - t0)
                    acked.append((tx.commit_ts, k, v))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    try:
        removed0 = c.gc_status().progress.versions_removed
        wait_for(
            lambda: c.gc_status().progress.versions_removed > removed0 + 100,
            20,
            "GC to collect while the writers run",
        )
        # Read points while the writers run, held by a lease on the first so that GC keeps them.
        points = []
        for _ in range(3):
            points.append(c.tso())
            time.sleep(0.3)
        lease = c.lease(points[0], ttl_s=30, holder="gc test reader")
        before = {p: c.read(t, at=p).to_pylist() for p in points}
        time.sleep(2 * RETENTION_S)  # writers go on; GC collects up to the lease meanwhile
    finally:
        stop.set()
        for th in threads:
            th.join(30)
    # The safepoint reaches the lease, and GC collects everything below it.
    wait_for(lambda: c.gc_status().safepoint == points[0], 10, "the safepoint at the lease")
    wait_for(
        lambda: (
            (g := c.gc_status().progress).pass_safepoint == points[0] and g.pass_phase == "done"
        ),
        20,
        "a whole GC pass at the lease",
    )
    for p in points:
        assert c.read(t, at=p).to_pylist() == before[p], f"read at {p} changed under GC"
    lease.release()
    # No acknowledged write is lost: the newest acked value of every key is its value now.
    final = {r["id"]: r["v"] for r in c.read(t).to_pylist()}
    newest: dict[int, tuple[int, int]] = {}
    for ts, k, v in acked:
        if k not in newest or ts > newest[k][0]:
            newest[k] = (ts, v)
    assert final == {k: v for k, (_, v) in newest.items()}
    latencies.sort()
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    print(f"\n{len(latencies)} commits under GC: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")


def test_barriers_and_epoch_records_below_the_safepoint_are_pruned(c, table_name):
    """A barrier below the safepoint is gone (NOT_FOUND: nothing can be read there), and so are
    a job's epoch records older than its last committed one; the newest stays."""
    src = _table(c, table_name)
    b0 = c.snapshot([src], wait_s=5).barrier
    job = f"{table_name}_sink"
    for i in range(3):
        e = c.jobs.open_transaction(job, 0, batch=str(i), owner="o")
        c.jobs.commit_transaction(job, e.epoch, e.start_ts, json.dumps({"batch": str(i)}))
    _past(c, c.tso())
    with pytest.raises(NotFound):
        c.snapshot([src], barrier=b0)
    wait_for(
        lambda: _epoch_missing(c, job, 1) and _epoch_missing(c, job, 2),
        10,
        "old epoch records to be pruned",
    )
    assert c.jobs.get_epoch(job, 3).committed


def _epoch_missing(c, job, epoch):
    try:
        c.jobs.get_epoch(job, epoch)
    except NotFound:
        return True
    return False


def test_manual_gc_respects_the_holds(c, table_name):
    """The Gc RPC cannot move the safepoint past a lease: FAILED_PRECONDITION naming it."""
    t = _table(c, table_name)
    _write(c, t, 1)
    ts = c.tso()
    with c.lease(ts, ttl_s=10, holder="manual gc test"):
        _retention_past(c, ts)
        with pytest.raises(FailedPrecondition, match="manual gc test"):
            c.store.gc(ts + 1)
        c.store.gc(ts)  # up to the lease is allowed


def test_snapview_leases_lists_holds_and_leases(c, gcsrv, capsys):
    ts = c.tso()
    with c.lease(ts, ttl_s=30, holder="cli test reader") as lease:
        assert cli_main(["leases", "--address", gcsrv.address]) == 0
        text = capsys.readouterr().out
        assert "GC safepoint" in text and "cli test reader" in text and lease.id in text
        assert cli_main(["leases", "--address", gcsrv.address, "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["enabled"] and doc["retention_s"] == RETENTION_S
        assert any(x["id"] == lease.id and x["ts"] == ts for x in doc["leases"])
        assert doc["holds"][0]["ts"] <= ts
        assert doc["safepoint"] <= ts


def test_leases_survive_a_server_restart(tmp_path):
    """Leases are durable: after a restart the server still holds a leased snapshot."""
    data = tmp_path / "data"
    args = ("--retention", "1s", "--gc-interval", "200ms")
    gen = serve(data, *args)
    srv = next(gen)
    with coordinator.connect(srv.address) as c:
        t = _table(c, "r")
        _write(c, t, 1)
        ts = c.tso()
        lease = c.lease(ts, ttl_s=60, renew=False, holder="survivor")
        _write(c, t, 2)
    gen.close()
    gen = serve(data, *args)
    srv = next(gen)
    try:
        with coordinator.connect(srv.address) as c:
            _retention_past(c, ts)
            assert c.gc_status().safepoint <= ts
            assert [r["v"] for r in c.read(t, at=ts).to_pylist()] == [1] * 5
            assert c.release_lease(lease.id)
            _past(c, ts)
    finally:
        gen.close()


def _gc_sample(url: str, name: str, labels: dict | None = None) -> float:
    from tests.integration.test_metrics import scrape

    fam = scrape(url)[name]
    for sample in fam.samples:
        if labels is None or all(sample.labels.get(k) == v for k, v in labels.items()):
            return sample.value
    raise AssertionError(f"no {name} sample with {labels}")


def test_gc_metrics_move_with_the_run(c, gcsrv, table_name):
    """The GC's metrics follow it: versions collected grow under updates, the safepoint moves
    and matches GcStatus, and a held lease shows as the oldest hold and ages."""
    url = gcsrv.metrics_address
    t = _table(c, table_name)
    removed = _gc_sample(url, "snapview_gc_versions_removed")
    sp = _gc_sample(url, "snapview_gc_safepoint_ts")
    for v in range(20):
        _write(c, t, v)
    wait_for(
        lambda: _gc_sample(url, "snapview_gc_versions_removed") >= removed + 50,
        15,
        "the versions-removed counter to grow",
    )
    assert _gc_sample(url, "snapview_gc_safepoint_ts") > sp
    assert _gc_sample(url, "snapview_gc_enabled") == 1
    with c.lease(c.tso(), ttl_s=30, holder="metrics test"):
        assert _gc_sample(url, "snapview_gc_leases") >= 1
        _retention_past(c, c.tso())
        age = _gc_sample(url, "snapview_gc_hold_age_seconds", {"kind": "lease"})
        assert age >= _gc_sample(url, "snapview_gc_hold_age_seconds", {"kind": "retention"})
        assert _gc_sample(url, "snapview_gc_safepoint_age_seconds") >= RETENTION_S
