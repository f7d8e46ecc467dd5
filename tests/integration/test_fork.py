"""A program that forks after connecting (issue 24, item 1): children connect and commit, a
child may go on using the client it inherited, nothing hangs, and importing snapview's packages
changes nothing process-wide (no gRPC environment variable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(os.path.dirname(__file__), "fork_workers.py")
# What gRPC's core logs around a fork it could not prepare for, or in a child it prepared badly.
GRPC_FORK_NOISE = ("fork_posix", "skipping fork()", "epoll_wait error", "Fork support")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    env["PYTHONPATH"] = ROOT_DIR
    env.update(extra)
    return env


def _fork_workers(address: str, table: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, SCRIPT, address, table],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(**env),
    )


def test_forked_children_connect_commit_and_reuse_the_inherited_client(server, client):
    client.create_table("forked", "id BIGINT, pid BIGINT", primary_key=["id"])
    out = _fork_workers(server.address, "forked")
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(out.stdout.splitlines()) == 5, out.stdout
    assert not [ln for ln in out.stderr.splitlines() if any(n in ln for n in GRPC_FORK_NOISE)], (
        out.stderr
    )
    rows = {r["id"]: r["pid"] for r in client.read("forked").to_pylist()}
    assert sorted(rows) == [0, 1, 2, 3, 4, 5, 6]
    assert len({rows[i] for i in range(1, 6)}) == 5  # each child committed its own row


def test_fork_support_turned_off_by_the_program_is_a_clear_error_not_a_hang(server, client):
    """GRPC_ENABLE_FORK_SUPPORT=false is the program's own choice; gRPC cannot work in a child
    forked after it started, and the child says so at once."""
    client.create_table("forked_off", "id BIGINT, pid BIGINT", primary_key=["id"])
    out = _fork_workers(server.address, "forked_off", GRPC_ENABLE_FORK_SUPPORT="false")
    assert out.returncode == 1
    assert out.stdout.count(" exit 1 ") == 5, out.stdout  # every child failed, none hung
    assert "GRPC_ENABLE_FORK_SUPPORT='false' turns off gRPC's fork support" in out.stderr


def test_importing_the_packages_leaves_the_environment_alone():
    code = (
        "import json, os; before = dict(os.environ); "
        "import kvstore, coordinator, spark_source, spark_sink; "
        "print(json.dumps([before, dict(os.environ)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env()
    )
    assert out.returncode == 0, out.stderr
    before, after = json.loads(out.stdout)
    assert after == before
