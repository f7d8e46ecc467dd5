"""No client can stall the server: open streams hold no threads (issue 11, item 1).

1,000 clients, each on its own connection with its own TsoStream open, all commit while a
separate caller's Tso latency is timed; and calls without the token, streams that send nothing
included, are refused at once without getting in an authorized caller's way.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import random
import threading
import time

import grpc
import pytest

import coordinator
from snapview.embedded import EmbeddedServer
from snapview_proto.snapview.v1 import coordinator_pb2 as cpb
from snapview_proto.snapview.v1 import coordinator_pb2_grpc as cpb_grpc
from snapview_proto.snapview.v1 import kvstore_pb2 as kpb
from snapview_proto.snapview.v1 import kvstore_pb2_grpc as kpb_grpc

CLIENTS = 1000
PROCS = 2  # client processes, CLIENTS // PROCS asyncio clients each
TXNS = 2  # transactions per client, each: start_ts from its stream, a one-phase-commit prewrite
# A client waits up to PACE_S (uniformly) before each transaction: together ~CLIENTS / (PACE_S/2)
# transactions a second, within what the server on a small test machine commits (at saturation
# every call queues, Tso too; this test is about open streams, not about overload).
PACE_S = 6.0
STALL_P99_S = 1.0  # the separate caller's Tso p99 bound: a stall, not a slow machine
# One TCP connection per client, as separate processes would have: gRPC otherwise shares one
# connection among a process's channels to the same target.
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


async def _run_clients(address, table, first_id, n, opened, go, results) -> None:
    with coordinator.connect(address) as c:
        info = c.describe_table(table)
    go_now = asyncio.Event()
    release = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def wait_for(ev, flag) -> None:
        await loop.run_in_executor(None, ev.wait)
        flag.set()

    async def client(i: int) -> str:
        row_id = first_id + i
        async with grpc.aio.insecure_channel(address, options=OWN_CONNECTION) as ch:
            stream = cpb_grpc.CoordinatorStub(ch).TsoStream(timeout=120)
            kv = kpb_grpc.KvStoreStub(ch)
            await stream.write(cpb.TsoRequest(count=1))
            await stream.read()
            opened.put(1)
            await go_now.wait()
            for k in range(TXNS):
                await asyncio.sleep(random.uniform(0, PACE_S))
                await stream.write(cpb.TsoRequest(count=1))
                start_ts = (await stream.read()).first
                key = info.key_codec.encode({"id": row_id})
                value = info.row_codec.encode({"id": row_id, "v": k})
                resp = await kv.Prewrite(
                    kpb.PrewriteRequest(
                        mutations=[kpb.Mutation(op=kpb.Mutation.PUT, key=key, value=value)],
                        primary=key,
                        start_ts=start_ts,
                        lock_ttl_ms=3000,
                        txn_size=1,
                        try_one_pc=True,
                    ),
                    timeout=60,
                )
                if resp.errors or resp.one_pc_commit_ts <= start_ts:
                    return f"client {row_id}: {resp}"
            results.put("ok")
            await release.wait()  # every stream stays open until all clients are done
            await stream.done_writing()
            return "ok"

    async def guarded(i: int) -> None:
        try:
            r = await client(i)
        except Exception as e:  # noqa: BLE001 - reported to the test
            r = f"client {first_id + i}: {type(e).__name__}: {e}"
        if r != "ok":
            results.put(r)

    waiters = [wait_for(go, go_now), wait_for(go.release, release)]
    await asyncio.gather(*(guarded(i) for i in range(n)), *waiters)


class _Go:
    """Two cross-process events: start committing, then close the streams."""

    def __init__(self, ctx) -> None:
        self.go = ctx.Event()
        self.release = ctx.Event()

    def wait(self) -> None:
        self.go.wait()


def _client_process(address, table, first_id, n, opened, go, results) -> None:
    asyncio.run(_run_clients(address, table, first_id, n, opened, go, results))


def _caller_process(address, stop, out) -> None:
    """Time one-timestamp Tso calls every 5 ms until ``stop``; put the latencies (s) on ``out``."""
    lat: list[float] = []
    with grpc.insecure_channel(address) as ch:
        tso = cpb_grpc.CoordinatorStub(ch).Tso
        tso(cpb.TsoRequest(count=1), timeout=10)
        while not stop.is_set():
            t = time.perf_counter()
            tso(cpb.TsoRequest(count=1), timeout=10)
            lat.append(time.perf_counter() - t)
            time.sleep(0.005)
    out.put(lat)


def _drain(q, until_count: int, timeout: float, what: str) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < until_count:
        try:
            got.append(q.get(timeout=max(0.01, deadline - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"{what}: {len(got)} of {until_count} in {timeout}s") from None
    return got


def test_thousand_clients_with_open_streams_all_commit(tmp_path):
    """1,000 clients (own connection, own open TsoStream each) commit TXNS transactions each
    with 0 failures, while a separate caller's Tso p99 stays under STALL_P99_S (no stall)."""
    t0 = time.monotonic()
    ctx = mp.get_context("spawn")
    opened, results = ctx.Queue(), ctx.Queue()
    go = _Go(ctx)
    with EmbeddedServer(str(tmp_path / "d")) as srv, coordinator.connect(srv.address) as c:
        table = "many_clients"
        c.create_table(table, "id BIGINT, v BIGINT", primary_key=["id"])
        per = CLIENTS // PROCS
        procs = [
            ctx.Process(
                target=_client_process,
                args=(srv.address, table, p * per, per, opened, go, results),
                daemon=True,
            )
            for p in range(PROCS)
        ]
        for p in procs:
            p.start()
        try:
            # Every stream open at once: a server with a thread per stream stalls here.
            _drain(opened, CLIENTS, 40, "streams opened")
            # The separate caller is a process of its own, so that what it measures is the
            # server, not this test process's heap (its GC pauses after the tests before it).
            stop, lat_q = ctx.Event(), ctx.Queue()
            th = ctx.Process(target=_caller_process, args=(srv.address, stop, lat_q), daemon=True)
            th.start()
            procs.append(th)
            time.sleep(0.5)  # some samples with the streams open and idle
            go.go.set()
            outcomes = _drain(results, CLIENTS, 40, "clients committed")
            stop.set()
            lat: list[float] = lat_q.get(timeout=15)
            go.release.set()
            for p in procs:
                p.join(20)
            assert [p.exitcode for p in procs] == [0] * (PROCS + 1)
        finally:
            go.go.set()
            go.release.set()
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join()
        failures = [o for o in outcomes if o != "ok"]
        assert not failures, failures[:5]
        assert len(lat) >= 100, len(lat)
        lat.sort()
        p99 = lat[int(0.99 * (len(lat) - 1))]
        # A stall guard, not the latency figure (scripts/bench_clients.py measures that: p99
        # 7-29 ms at 1,000 clients). The server this guards against stalled for seconds (3
        # calls in 8 s, calls failing at their 5 s deadline). A healthy server's p99 here was
        # 92 ms on a shared machine running at half speed, and 268 ms beside a Spark job on
        # the same two cores: the bound is 1 s.
        assert p99 < STALL_P99_S, (
            f"separate caller's Tso p99 {p99 * 1000:.1f} ms over {len(lat)} calls"
        )
        rows = c.read(table).to_pylist()
        assert len(rows) == CLIENTS and {r["v"] for r in rows} == {TXNS - 1}
    assert time.monotonic() - t0 < 60


# Not server_fixture: files are written before the server starts and their paths go to the tests.
@pytest.fixture
def token_server(tmp_path):
    tok = tmp_path / "token"
    tok.write_text("s3cret\n")
    with EmbeddedServer(str(tmp_path / "d"), extra_args=["--auth-token-file", str(tok)]) as srv:
        yield srv, str(tok)


SILENT = 64


def test_silent_unauthenticated_streams_are_refused_at_once(token_server):
    """64 calls without the token that open a stream and send nothing (on the TsoStream and on
    unary methods alike) are each answered UNAUTHENTICATED within a second, and an authorized
    client is served meanwhile."""
    srv, tok = token_server
    methods = [
        "/snapview.v1.Coordinator/TsoStream",
        "/snapview.v1.Coordinator/Tso",
        "/snapview.v1.KvStore/Scan",
        "/snapview.v1.KvStore/Prewrite",
    ]

    async def silent(ch: grpc.aio.Channel, method: str) -> tuple[grpc.StatusCode, float]:
        t = time.perf_counter()
        call = ch.stream_stream(method)(timeout=10)  # opened; nothing is ever written
        try:
            await call.read()
        except grpc.aio.AioRpcError as e:
            return e.code(), time.perf_counter() - t
        return grpc.StatusCode.OK, time.perf_counter() - t

    async def main() -> list[tuple[grpc.StatusCode, float]]:
        chans = [grpc.aio.insecure_channel(srv.address, options=OWN_CONNECTION) for _ in range(8)]
        try:
            return await asyncio.gather(
                *(silent(chans[i % 8], methods[i % len(methods)]) for i in range(SILENT))
            )
        finally:
            for ch in chans:
                await ch.close()

    answers: list = []
    th = threading.Thread(target=lambda: answers.extend(asyncio.run(main())))
    th.start()
    with coordinator.connect(srv.address, token_file=tok) as c:
        t = time.perf_counter()
        assert c.tso() > 0
        c.create_table("t", "id BIGINT", primary_key=["id"])
        with c.transaction() as txn:
            txn.put("t", {"id": 1})
        assert time.perf_counter() - t < 5
    th.join(20)
    assert len(answers) == SILENT
    assert {code for code, _ in answers} == {grpc.StatusCode.UNAUTHENTICATED}
    assert max(s for _, s in answers) < 1.0, sorted(s for _, s in answers)[-5:]


def test_health_needs_no_token_and_wrong_token_is_refused(token_server):
    srv, _ = token_server
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(srv.address) as ch:
        assert (
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
            == health_pb2.HealthCheckResponse.SERVING
        )
        tso = cpb_grpc.CoordinatorStub(ch).Tso
        for md in [(("authorization", "Bearer s3cre"),), (("authorization", "Bearer s3cret!"),)]:
            with pytest.raises(grpc.RpcError) as e:
                tso(cpb.TsoRequest(count=1), metadata=md, timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ok = tso(cpb.TsoRequest(count=1), metadata=(("authorization", "Bearer s3cret"),))
        assert ok.first > 0


def test_one_connection_holds_at_most_max_streams(server):
    """One connection gets MAX_STREAMS_PER_CONNECTION calls at a time; its further calls wait
    (in the client) until one ends, and other connections are served meanwhile."""
    from coordinator.server.serve import MAX_STREAMS_PER_CONNECTION as LIMIT

    async def main() -> tuple[int, float, int]:
        async with grpc.aio.insecure_channel(server.address, options=OWN_CONNECTION) as ch:
            calls = [cpb_grpc.CoordinatorStub(ch).TsoStream(timeout=30) for _ in range(LIMIT + 20)]

            async def first(call) -> None:
                await call.write(cpb.TsoRequest(count=1))
                await call.read()

            tasks = [asyncio.ensure_future(first(c)) for c in calls]
            answered = lambda: sum(t.done() and not t.cancelled() for t in tasks)  # noqa: E731
            deadline = time.monotonic() + 10
            while answered() < LIMIT and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # give any call past the limit the time to be answered
            at_limit = answered()
            async with grpc.aio.insecure_channel(server.address, options=OWN_CONNECTION) as other:
                t = time.perf_counter()
                await cpb_grpc.CoordinatorStub(other).Tso(cpb.TsoRequest(count=1), timeout=5)
                other_s = time.perf_counter() - t
            done = [c for c, t in zip(calls, tasks, strict=True) if t.done()]
            for c in done[:20]:
                await c.done_writing()
                await c.read()  # the end of the stream
            deadline = time.monotonic() + 10
            while answered() < LIMIT + 20 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            after = answered()
            for c in calls:
                c.cancel()
            return at_limit, other_s, after

    at_limit, other_s, after = asyncio.run(main())
    assert at_limit == LIMIT
    assert other_s < 1.0
    assert after == LIMIT + 20


def test_server_wide_cap_on_calls_in_progress(tmp_path):
    """Past ServeConfig.max_rpcs calls in progress a new call is refused RESOURCE_EXHAUSTED at
    once (not queued); once calls end, new ones are served. Runs the server in this process
    through its synchronous API (start/stop from a plain thread)."""
    from coordinator.server.serve import ServeConfig, SnapviewServer

    srv = SnapviewServer(ServeConfig(data_dir=str(tmp_path / "d"), port=0, max_rpcs=8))
    srv.start()
    try:
        address = f"127.0.0.1:{srv.port}"

        async def main() -> tuple[grpc.StatusCode | None, float, int]:
            async with grpc.aio.insecure_channel(address, options=OWN_CONNECTION) as ch:
                stub = cpb_grpc.CoordinatorStub(ch)
                calls = [stub.TsoStream(timeout=30) for _ in range(8)]
                for c in calls:
                    await c.write(cpb.TsoRequest(count=1))
                    await c.read()
                t = time.perf_counter()
                try:
                    await stub.Tso(cpb.TsoRequest(count=1), timeout=10)
                    code = None
                except grpc.aio.AioRpcError as e:
                    code = e.code()
                took = time.perf_counter() - t
                for c in calls:
                    await c.done_writing()
                    await c.read()
                await asyncio.sleep(0.2)
                ok = (await stub.Tso(cpb.TsoRequest(count=1), timeout=10)).first
                return code, took, ok

        code, took, ok = asyncio.run(main())
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert took < 1.0
        assert ok > 0
    finally:
        srv.stop(grace=1)
