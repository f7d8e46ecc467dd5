"""Reader leases are bounded and manageable (issue 25, item 3), against a real ``snapview
serve`` with small caps (20 leases, 5 per holder): one more is refused with RESOURCE_EXHAUSTED
naming the cap and the holder; a TTL above 24 h is refused; ``GcStatus`` pages the leases (every
one exactly once) and filters them by holder; ``snapview leases release ID`` releases any lease."""

from __future__ import annotations

import json

import pytest

from kvstore.errors import InvalidArgument, ResourceExhausted
from snapview.cli import main as cli_main
from tests.conftest import connected, server_fixture

MAX, PER_HOLDER = 20, 5


srv = server_fixture(
    "lease_bounds", *f"--max-leases {MAX} --max-leases-per-holder {PER_HOLDER}".split()
)


@pytest.fixture
def c(srv):
    """A client; every lease is released after the test, so each starts with none."""
    for client in connected(srv):
        yield client
        for x in list(client.iter_leases()):
            client.release_lease(x.id)


def _take(c, holder, n, ts):
    return [c.lease(ts, ttl_s=60, holder=holder, renew=False).id for _ in range(n)]


def test_a_holder_past_its_cap_is_refused_naming_cap_and_holder(c):
    ts = c.tso()
    ids = _take(c, "greedy reader", PER_HOLDER, ts)
    with pytest.raises(ResourceExhausted) as e:
        c.lease(ts, ttl_s=60, holder="greedy reader", renew=False)
    assert e.value.code == "RESOURCE_EXHAUSTED"
    assert "'greedy reader'" in str(e.value) and f"--max-leases-per-holder {PER_HOLDER}" in str(
        e.value
    )
    _take(c, "another reader", 1, ts)  # the cap is per holder
    assert c.release_lease(ids[0])
    _take(c, "greedy reader", 1, ts)  # room again once one is released


def test_the_server_past_its_cap_is_refused_naming_cap_and_holder(c):
    ts = c.tso()
    for h in range(MAX // PER_HOLDER):
        _take(c, f"reader {h}", PER_HOLDER, ts)
    with pytest.raises(ResourceExhausted) as e:
        c.lease(ts, ttl_s=60, holder="late reader", renew=False)
    assert "'late reader'" in str(e.value) and f"--max-leases {MAX}" in str(e.value)
    assert c.gc_status().total_leases == MAX


def test_a_ttl_above_a_day_is_refused_naming_ttl(c):
    ts = c.tso()
    with pytest.raises(InvalidArgument, match="ttl_ms"):
        c.lease(ts, ttl_s=24 * 3600 + 1, holder="forever", renew=False)
    lease = c.lease(ts, ttl_s=24 * 3600, holder="a day", renew=False)
    with pytest.raises(InvalidArgument, match="ttl_ms"):
        c.renew_lease(lease.id, ttl_s=25 * 3600)


def test_pages_return_every_lease_exactly_once_and_filter_by_holder(c):
    ts = c.tso()
    taken = {h: _take(c, h, 4, c.tso() if h != "a" else ts) for h in ["a", "b", "c", "d"]}
    every = sorted(i for ids in taken.values() for i in ids)
    st = c.gc_status(page_size=3)
    assert len(st.leases) == 3 and st.next_page_token and st.lease_count == len(every)
    seen = [x.id for x in c.iter_leases(page_size=3)]
    assert seen == every  # in id order, each once
    mine = c.gc_status(holder="c")
    assert mine.lease_count == 4 and mine.total_leases == len(every)
    assert sorted(x.id for x in mine.leases) == sorted(taken["c"])
    assert [x.id for x in c.iter_leases(holder="b", page_size=1)] == sorted(taken["b"])
    # The leases are one hold, the oldest, not one each.
    lease_holds = [h for h in st.holds if h.kind == "lease"]
    assert len(lease_holds) == 1 and lease_holds[0].ts == ts
    assert st.oldest_lease_ts == ts


def test_cli_lists_by_holder_with_a_limit_and_releases_by_id(srv, c, capsys):
    ts = c.tso()
    ids = _take(c, "cli reader", 3, ts)
    _take(c, "someone else", 2, ts)
    addr = ["--address", srv.address]
    assert cli_main(["leases", *addr, "--holder", "cli reader", "--limit", "2"]) == 0
    text = capsys.readouterr().out
    assert "3 reader lease(s), showing 2" in text
    listed = text.split("reader lease(s)", 1)[1]  # the hold line may name any oldest lease
    assert "someone else" not in listed and listed.count("cli reader") == 2
    assert cli_main(["leases", *addr, "--format", "json", "--limit", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["lease_count"] == 5 and len(doc["leases"]) == 5
    assert cli_main(["leases", "release", ids[0], *addr]) == 0
    assert f"released lease {ids[0]}" in capsys.readouterr().out
    assert ids[0] not in {x.id for x in c.iter_leases()}
    assert cli_main(["leases", "release", ids[0], *addr]) == 1  # no longer there
    assert "no live lease" in capsys.readouterr().err
