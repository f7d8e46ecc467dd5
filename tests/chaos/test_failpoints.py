"""Each server-side fail point, armed: the process dies at that protocol step, and a restart
recovers with nothing lost, nothing applied twice, nothing half visible.

The client-side ones are armed elsewhere: sink.prewrite.mid, sink.before_commit and
epoch.commit.after_primary under a Spark query in tests/spark/test_exactly_once.py, and
view.before_commit under a view job in tests/spark/test_views.py.
"""

from __future__ import annotations

import pytest

import coordinator
from coordinator.jobs import EpochState
from kvstore.mvcc.records import LockOp
from snapview.embedded import EmbeddedServer

SHORT = coordinator.RetryPolicy(max_attempts=2, max_elapsed_s=1, rpc_timeout_s=10)


class Armed:
    """A server on one data dir and port that can be restarted armed or disarmed."""

    def __init__(self, tmp_path):
        self.srv = EmbeddedServer(str(tmp_path / "d"), extra_args=["--barrier-interval", "100ms"])
        self.srv.start()

    def client(self, retry=SHORT):
        return coordinator.connect(self.srv.address, retry=retry)

    def rearm(self, spec: str | None) -> bool:
        """Restart the server with ``spec`` armed (None: disarmed); False if it died starting."""
        self.srv.kill()
        self.srv.env = {"SNAPVIEW_FAILPOINTS": spec} if spec else None
        try:
            self.srv.start(timeout=20)
            return True
        except RuntimeError:
            return False

    def died(self) -> bool:
        return self.srv.wait_dead(15)


@pytest.fixture
def armed(tmp_path):
    a = Armed(tmp_path)
    try:
        yield a
    finally:
        a.srv.stop()


def _setup_view(c):
    c.create_table("src", "id BIGINT, v BIGINT", primary_key=["id"])
    c.create_table("v", "id BIGINT, v BIGINT", primary_key=["id"], kind="view")
    c.jobs.register_job("v", "v", ["src"], kind="view")
    return c.jobs.plan_barriers("v").barriers[0].barrier


def _prewrite_row(c, e, row):
    info = c.describe_table("v")
    muts = [(LockOp.PUT, info.key_codec.encode({"id": row["id"]}), info.row_codec.encode(row))]
    c.prewrite(muts, e.primary_key, e.start_ts, ttl_ms=20_000)


@pytest.mark.parametrize("point", ["store.prewrite.start", "store.prewrite.done"])
@pytest.mark.parametrize("rows", [2, 5000], ids=["1pc", "2pc"])
def test_prewrite_fail_points_leave_all_or_nothing(armed, point, rows):
    c = armed.client()
    c.create_table("t", "id BIGINT, v BIGINT", primary_key=["id"])
    assert armed.rearm(f"{point}=panic")
    c = armed.client()
    with pytest.raises(coordinator.SnapviewError):
        with c.transaction() as t:
            for i in range(rows):
                t.put("t", {"id": i, "v": i})
    assert armed.died()
    assert armed.rearm(None)
    c = armed.client(coordinator.RetryPolicy())
    got = c.read("t").num_rows  # waits out / resolves any lock left (3 s TTL)
    assert got in (0, rows)  # all or nothing
    if point == "store.prewrite.start" or rows > 2:
        assert got == 0  # never committed: 1PC only commits inside a prewrite that finished
    with c.transaction() as t:  # the keys are free again
        t.put("t", {"id": 0, "v": -1})
    assert c.get("t", {"id": 0})["v"] == -1


@pytest.mark.parametrize(
    "point,committed",
    [
        ("epoch.opened", False),
        ("epoch.barrier.recorded", False),
        ("epoch.commit.after_primary", True),
        ("epoch.commit.resolved", True),
    ],
)
def test_epoch_fail_points_recover(armed, point, committed):
    c = armed.client()
    b = _setup_view(c)
    assert armed.rearm(f"{point}=panic")
    c = armed.client()
    raised = False
    try:
        e = c.jobs.open_transaction("v", b)
        _prewrite_row(c, e, {"id": 1, "v": 10})
        c.jobs.commit_transaction("v", b, e.start_ts)
    except coordinator.SnapviewError:
        raised = True
    # secondaries are resolved after the answer: that fail point fires behind the caller's back
    assert raised == (point != "epoch.commit.resolved")
    assert armed.died()
    assert armed.rearm(None)
    c = armed.client(coordinator.RetryPolicy())
    info = c.jobs.get_epoch("v", b)
    assert (info.state is EpochState.COMMITTED) == committed
    if not committed:
        with pytest.raises(coordinator.BarrierNotReached):
            c.snapshot(["v"], barrier=b)  # no version without the commit, nor the other way
        e = c.jobs.open_transaction("v", b)  # the stale attempt is rolled back, a new one opens
        assert e.attempt >= 2 or point == "epoch.opened"
        _prewrite_row(c, e, {"id": 1, "v": 10})
        info = c.jobs.commit_transaction("v", b, e.start_ts)
    snap = c.snapshot(["v"], barrier=b)
    assert snap.read_ts("v") == info.commit_ts
    assert snap.read("v").to_pylist() == [{"id": 1, "v": 10}]


def test_tso_window_persisted_fail_point(armed):
    before = armed.client().tso()
    assert not armed.rearm("tso.window.persisted=panic")  # dies persisting its first window
    assert armed.rearm(None)
    assert armed.client().tso() > before


def test_barrier_issued_fail_point(armed):
    c = armed.client()
    c.create_table("t", "id BIGINT", primary_key=["id"])
    b1 = c.snapshot(["t"], wait_s=5).barrier
    assert not armed.rearm("barrier.issued=panic")  # dies right after issuing its first barrier
    assert armed.rearm(None)
    c = armed.client(coordinator.RetryPolicy())
    b2 = c.snapshot(["t"], wait_s=5).barrier
    assert b2 > b1
    # the barrier issued just before the crash was recorded: the sequence has no hole
    barriers = [b2]
    while len(barriers) < 3:
        s = c.snapshot(["t"]).barrier
        if s > barriers[-1]:
            barriers.append(s)
    assert barriers == sorted(set(barriers))
