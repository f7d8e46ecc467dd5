"""snapview serve as a process: health, reflection, auth, TLS, bind policy, CLI."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from unittest import mock

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

import coordinator
from coordinator.jobs import JobInfo
from coordinator.reports import GcHold, GcProgress, JobContribution, TableDelay, TableNode
from kvstore.errors import Unauthenticated
from kvstore.remote import RetryPolicy
from snapview.embedded import EmbeddedServer
from tests.conftest import cli, serve, wait_for

FAST_FAIL = RetryPolicy(max_attempts=2, max_elapsed_s=2)


def test_health_check_serving(server):
    """gRPC health checking answers SERVING for both services."""
    with grpc.insecure_channel(server.address) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for svc in ("", "snapview.v1.KvStore", "snapview.v1.Coordinator"):
            resp = stub.Check(health_pb2.HealthCheckRequest(service=svc), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_services(server):
    """Server reflection lists the KvStore and Coordinator services."""
    with grpc.insecure_channel(server.address) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        req = reflection_pb2.ServerReflectionRequest(list_services="")
        resp = next(stub.ServerReflectionInfo(iter([req]), timeout=5))
        names = {s.name for s in resp.list_services_response.service}
    assert {"snapview.v1.KvStore", "snapview.v1.Coordinator"} <= names


def test_second_server_on_same_data_dir_refused(server):
    """A second serve on a data dir in use exits non-zero with one clear line."""
    r = cli("serve", "--data-dir", server.data_dir, "--port", "0")
    assert r.returncode == 1
    assert "in use by another snapview serve" in r.stderr


def test_non_loopback_bind_refused_without_security(tmp_path):
    """Binding a non-loopback address needs TLS, a token or --insecure."""
    r = cli("serve", "--data-dir", str(tmp_path), "--host", "0.0.0.0", "--port", "0")
    assert r.returncode == 1
    assert "not loopback" in r.stderr and "--insecure" in r.stderr


def test_auth_token_required(tmp_path):
    """With --auth-token-file, calls without the token get UNAUTHENTICATED; with it they work."""
    tok = tmp_path / "token"
    tok.write_text("s3cret\n")
    with EmbeddedServer(str(tmp_path / "d"), extra_args=["--auth-token-file", str(tok)]) as srv:
        with pytest.raises(Unauthenticated):  # connect's probe names the missing token
            coordinator.connect(srv.address, retry=FAST_FAIL)
        bad = coordinator.connect(srv.address, retry=FAST_FAIL, probe=False)
        with pytest.raises(Unauthenticated):
            bad.tso()
        bad.close()
        good = coordinator.connect(srv.address, token_file=str(tok))
        assert good.tso() > 0
        good.close()
        with grpc.insecure_channel(srv.address) as ch:  # health needs no token
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_tls(tmp_path):
    """With --tls-cert/--tls-key the server speaks TLS; a client with the CA connects."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    with EmbeddedServer(
        str(tmp_path / "d"), extra_args=["--tls-cert", str(cert), "--tls-key", str(key)]
    ) as srv:
        c = coordinator.connect(f"localhost:{srv.port}", tls_ca_file=str(cert))
        assert c.tso() > 0
        c.close()
        with pytest.raises(coordinator.SnapviewError, match="requires TLS"):
            coordinator.connect(srv.address, retry=FAST_FAIL)
        plain = coordinator.connect(srv.address, retry=FAST_FAIL, probe=False)
        with pytest.raises(coordinator.SnapviewError):
            plain.tso()
        plain.close()


def test_client_reports_are_frozen_dataclasses(client, table_name):
    """status, topology, delay, gc_status and iter_leases answer the dataclasses of
    coordinator.reports (all the way down), built inside the client: no protobuf message
    reaches a caller."""
    client.create_table(table_name, "id BIGINT", primary_key=["id"])
    job = f"{table_name}_job"
    client.jobs.register_job(job, table_name)
    lease = client.lease(client.tso(), ttl_s=30, holder=f"typed {table_name}")
    try:
        st = client.status()
        assert type(st) is coordinator.ServerStatus and st.tables >= 1 and st.version
        with pytest.raises(dataclasses.FrozenInstanceError):
            st.tso = 0  # type: ignore[misc]

        topo = client.topology()
        assert type(topo) is coordinator.TopologyInfo
        assert all(type(j) is JobInfo for j in topo.jobs)
        assert all(type(t) is TableNode for t in topo.tables)
        node = next(t for t in topo.tables if t.table == table_name)
        assert node.writer == job and job in {j.job for j in topo.jobs}

        def row() -> TableDelay | None:
            return next((t for t in client.delay().tables if t.table == table_name), None)

        mine = wait_for(row, 10, "the table's delay row")
        delay = client.delay()
        assert type(delay) is coordinator.DelayInfo and delay.newest_barrier > 0
        assert all(type(t) is TableDelay for t in delay.tables)
        assert mine.path and all(type(p) is JobContribution for p in mine.path)

        gc = client.gc_status()
        assert type(gc) is coordinator.GcInfo and type(gc.progress) is GcProgress
        assert gc.holds and all(type(h) is GcHold for h in gc.holds)
        assert all(type(x) is coordinator.LeaseInfo for x in gc.leases)
        listed = [x for x in client.iter_leases(holder=lease.holder)]
        assert [type(x) for x in listed] == [coordinator.LeaseInfo]
        assert listed[0].id == lease.id and listed[0].ts == lease.ts
    finally:
        lease.release()
        client.jobs.unregister_job(job)


def test_cli_status_tables_read(server, client, table_name):
    """status, tables and read print what the server holds; read --at is a snapshot."""
    client.create_table(table_name, "id BIGINT, name STRING", primary_key=["id"])
    with client.transaction() as t:
        t.put(table_name, {"id": 1, "name": "ann"})
    first = t.commit_ts
    with client.transaction() as t:
        t.put(table_name, {"id": 2, "name": "bob"})
    addr = ["--coordinator", server.address]
    st = json.loads(cli("status", *addr, "--json").stdout)
    assert st["tso"] > first and st["tables"] >= 1
    tables = json.loads(cli("tables", *addr, "--json").stdout)
    assert any(t["name"] == table_name and t["primary_key"] == ["id"] for t in tables)
    latest = json.loads(cli("read", table_name, *addr, "--format", "json").stdout)
    assert latest == [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}]
    old = json.loads(cli("read", table_name, *addr, "--at", str(first), "--format", "json").stdout)
    assert old == [{"id": 1, "name": "ann"}]
    # --consistent reads the newest barrier: once one passes the last commit, it shows it all
    snap = client.snapshot([table_name], wait_s=5)
    while snap.barrier < t.commit_ts:
        snap = client.snapshot([table_name])
    consistent = json.loads(cli("read", table_name, *addr, "--consistent", "--json").stdout)
    assert consistent == latest
    at_first = cli("read", table_name, *addr, "--barrier", str(snap.barrier), "--json")
    assert json.loads(at_first.stdout) == latest and str(snap.barrier) in at_first.stderr
    csv = cli("read", table_name, *addr, "--format", "csv").stdout
    assert csv.splitlines()[0].replace('"', "") == "id,name"


def test_cli_errors_are_one_line(server):
    """A bad table or an unreachable server gives one line and a non-zero exit."""
    r = cli("read", "no_such_table", "--coordinator", server.address)
    assert r.returncode == 1
    assert r.stderr.strip() == "snapview: error: table 'no_such_table' does not exist"
    r = cli("read", "x", "--coordinator", "127.0.0.1:1")
    assert r.returncode == 1 and r.stderr.startswith("snapview: error:")
    assert len(r.stderr.strip().splitlines()) == 1


VERBS = ["serve", "status", "tables", "read", "topology", "delay", "demo", "chaos"]


@pytest.mark.parametrize("cmd", VERBS)
def test_cli_help(cmd):
    """Every command describes itself, and every option that has a default shows it."""
    r = cli(cmd, "--help")
    assert r.returncode == 0 and "usage: snapview " + cmd in r.stdout
    description = r.stdout.split("\n\n")[1]  # after the usage block
    assert description[0].isupper() and len(description) > 10, description
    defaults = {
        "serve": ["(default: 127.0.0.1)", "(default: 50051)", "(default: 1s)", "(default: 64)"],
        "demo": ["(default: 30s)", "(default: 1000)", "(default: 3)", "(default: 100.0)"],
        "chaos": ["(default: bank)", "(default: 120s)", "(default: local[2])"],
    }.get(cmd, ["(default: localhost:50051)", "(default: text)"])
    flat = " ".join(r.stdout.split())  # help wraps lines
    for d in defaults:
        assert d in flat, (cmd, d)
    top = cli("--help").stdout
    assert any(line.split()[:1] == [cmd] and len(line.split()) > 1 for line in top.splitlines())


def test_cli_one_output_flag():
    """--format is the output flag; --json and topology's --dot are aliases that exclude it."""
    r = cli("topology", "--dot", "--json")
    assert r.returncode == 2 and "not allowed with" in r.stderr
    r = cli("read", "t", "--format", "json", "--json")
    assert r.returncode == 2 and "not allowed with" in r.stderr
    assert "--json" not in cli("status", "--help").stdout


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["tables"],
        ["read", "x"],
        ["topology"],
        ["delay"],
        ["status", "--auth-token-file", "/no/such/file"],
    ],
)
def test_cli_verb_errors_are_one_line(args):
    """Each client verb reports a failure as one line and exit status 1, no traceback."""
    r = cli(*args, "--coordinator", "127.0.0.1:1")
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("snapview: error: "), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cli_tables_on_an_empty_server_says_so(tmp_path):
    for srv in serve(tmp_path):
        r = cli("tables", "--coordinator", srv.address)
        assert r.returncode == 0 and r.stdout.strip() == "no tables"
        assert (
            json.loads(cli("tables", "--coordinator", srv.address, "--format", "json").stdout) == []
        )


def test_cli_status_loads_neither_spark_nor_arrow(server):
    """``import snapview.cli`` and the status verb load no PySpark, pandas, pyarrow or numpy:
    they are what made every call take seconds."""
    code = (
        "import sys, snapview.cli as c\n"
        f"assert c.main(['status', '--coordinator', {server.address!r}]) == 0\n"
        "heavy = [m for m in ('pyspark', 'pandas', 'pyarrow', 'numpy', 'py4j') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout, r.stdout


def test_cli_chaos_refuses_unknown_faults():
    r = cli("chaos", "--faults", "kill-server,meteor")
    assert r.returncode == 2 and "meteor" in r.stderr and "kill-server" in r.stderr


def test_cli_times_a_person_can_read(server, client, table_name):
    """Barriers come with their wall time (local; TZ=UTC here), ``read --at`` takes a date and
    time, and a read before the table existed says so instead of printing no rows."""
    from coordinator.times import format_ts

    before = time.time()
    time.sleep(0.01)
    client.create_table(table_name, "id BIGINT", primary_key=["id"])
    with client.transaction() as t:
        t.put(table_name, {"id": 1})
    addr = ["--coordinator", server.address]
    utc = {"TZ": "UTC"}
    stamp = dt.datetime.fromtimestamp(before, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    r = cli("read", table_name, *addr, "--at", stamp, env=utc)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"table {table_name!r} did not exist at " in r.stderr
    assert "it was created at" in r.stderr and "+00:00)" in r.stderr
    later = dt.datetime.fromtimestamp(time.time() + 0.01, dt.UTC).isoformat()  # with +00:00
    time.sleep(0.02)
    r = cli("read", table_name, *addr, "--at", later, "--format", "json")
    assert json.loads(r.stdout) == [{"id": 1}], r.stderr
    r = cli("read", table_name, *addr, "--at", "teatime")
    assert r.returncode == 1 and "not a timestamp: 'teatime'" in r.stderr
    delay = cli("delay", *addr, env=utc).stdout.splitlines()
    newest = int(delay[0].split()[2])
    with mock.patch.dict(os.environ, utc):
        time.tzset()
        wall = format_ts(newest)
    time.tzset()
    assert delay[0] == f"newest barrier {newest} ({wall})" and wall.endswith("+00:00")
    row = next(line for line in delay if line.startswith(table_name))
    assert re.search(r" \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\+00:00 ", row), row
    st = json.loads(cli("status", *addr, "--format", "json", env=utc).stdout)
    assert st["tso_time"].endswith("+00:00")
    r = cli("read", table_name, *addr, "--consistent", env=utc)
    assert re.search(r"at barrier \d+ \(\d{4}-.*\+00:00\), read ts \d+", r.stderr), r.stderr
