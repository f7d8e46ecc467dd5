"""Group commit and map growth on a real LMDB environment."""

from __future__ import annotations

import threading

from kvstore.mvcc.records import LockOp
from kvstore.store import LocalStore


def test_concurrent_writes_share_lmdb_transactions(tmp_path, clock):
    """Concurrent one-phase commits from many threads take fewer LMDB commits than actions,
    and each still applies exactly its own rows."""
    s = LocalStore(str(tmp_path / "lmdb"), clock=clock, sync=True)
    t = s.create_table("g", "id BIGINT, v BIGINT", ["id"])
    base = s.committer.groups, s.committer.actions

    def writer(w: int):
        for i in range(40):
            k = t.key_codec.encode({"id": w * 1000 + i})
            s.prewrite(
                [(LockOp.PUT, k, t.row_codec.encode({"id": w * 1000 + i, "v": w}))],
                k,
                clock(),
                try_one_pc=True,
            )

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    groups = s.committer.groups - base[0]
    actions = s.committer.actions - base[1]
    assert actions == 320
    assert groups < actions, f"{groups} groups for {actions} actions: no grouping"
    n = sum(len(keys) for keys, _ in s.scan_table("g", clock()))
    assert n == 320
    s.close()


def test_failed_action_does_not_leak_into_group(tmp_path, clock):
    """An action that raises leaves no trace, while the other actions of its group apply."""
    s = LocalStore(str(tmp_path / "lmdb"), clock=clock, sync=False)

    def good(ctx):
        ctx.buf.put("meta", b"good", b"1")

    def bad(ctx):
        ctx.buf.put("meta", b"bad", b"1")
        raise ValueError("boom")

    futs = [s.committer.submit(good), s.committer.submit(bad)]
    futs[0].result()
    try:
        futs[1].result()
        raise AssertionError("expected boom")
    except ValueError:
        pass
    with s.storage.read_txn() as r:
        assert r.get("meta", b"good") == b"1" and r.get("meta", b"bad") is None
    s.close()


def test_map_grows_instead_of_failing(tmp_path, clock):
    """Writing far more than the initial map size succeeds; the map doubles as needed."""
    s = LocalStore(str(tmp_path / "lmdb"), clock=clock, sync=False, map_size=1 << 20)
    t = s.create_table("big", "id BIGINT, pad STRING", ["id"])
    for batch in range(10):
        muts = []
        for i in range(500):
            k = t.key_codec.encode({"id": batch * 500 + i})
            muts.append(
                (LockOp.PUT, k, t.row_codec.encode({"id": batch * 500 + i, "pad": "x" * 900}))
            )
        s.prewrite(muts, muts[0][1], clock(), try_one_pc=True)
    assert s.storage.map_size() > 1 << 20
    assert sum(len(k) for k, _ in s.scan_table("big", clock())) == 5000
    s.close()


def test_groups_are_bounded_by_mutations(tmp_path):
    """Two large actions queued together go to different groups (a group holds at most
    max_group_cost mutations), so a small action queued behind them waits for a bounded group,
    never for everything queued."""
    import threading

    from kvstore.group_commit import GroupCommitter
    from kvstore.storage import Storage

    storage = Storage(str(tmp_path / "lmdb"), sync=False)
    gc = GroupCommitter(storage, max_group_cost=1000)
    release = threading.Event()
    seen: dict[str, int] = {}

    def blocker(ctx):
        release.wait(10)

    def record(name):
        def act(ctx):
            seen[name] = gc.groups  # the groups committed before this one

        return act

    first = gc.submit(blocker)
    futs = [gc.submit(record("big1"), 800), gc.submit(record("big2"), 800)]
    futs.append(gc.submit(record("small"), 1))
    release.set()
    first.result(10)
    for f in futs:
        f.result(10)
    assert seen["big1"] != seen["big2"], seen
    assert seen["small"] == seen["big2"], seen  # it fits beside the second big one
    gc.close()
    storage.close()


def test_resolve_locks_runs_in_bounded_steps(tmp_path, clock, monkeypatch):
    """Resolving a large transaction's locks takes several bounded writes (other requests get
    their turn between them) and still resolves every lock."""
    import kvstore.store as store_mod

    monkeypatch.setattr(store_mod, "RESOLVE_STEP", 100)
    s = LocalStore(str(tmp_path / "lmdb"), clock=clock, sync=False)
    info = s.create_table("r", "id BIGINT, v BIGINT", ["id"])
    muts = [
        (LockOp.PUT, info.key_codec.encode({"id": i}), info.row_codec.encode({"id": i, "v": i}))
        for i in range(1050)
    ]
    start = clock()
    for i in range(0, len(muts), 100):  # eleven prewrite requests of one transaction
        s.prewrite(muts[i : i + 100], muts[0][1], start)
    commit_ts = clock()
    s.commit(start, commit_ts, [muts[0][1]])
    groups = s.committer.groups
    assert s.resolve_locks(start, commit_ts) == 1049
    # A step stops once it has 100 locks, at the end of a prewrite's range: 1049 locks take 5+.
    assert s.committer.groups - groups >= 5
    assert sum(len(k) for k, _ in s.scan_table("r", clock())) == 1050
    with s.storage.read_txn() as r:
        assert not list(r.iter_range("lock", b"", None))
    s.close()
