"""Small frictions of a first hour (issue 24, item 13), each as a user meets it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import coordinator


def test_write_conflict_names_the_table_and_key_columns(client, table_name):
    client.create_table(
        table_name, "id BIGINT, branch INT, balance BIGINT", primary_key=["id", "branch"]
    )
    first, second = client.transaction(), client.transaction()
    first.put(table_name, {"id": 1, "branch": 3, "balance": 5})
    first.commit()
    second.put(table_name, {"id": 1, "branch": 3, "balance": 6})
    with pytest.raises(coordinator.WriteConflict) as e:
        second.commit()
    assert f"write conflict on table '{table_name}' key id=1, branch=3:" in str(e.value)
    assert e.value.key and e.value.where  # the raw key is still there for code


def test_output_into_a_closed_pipe_exits_quietly(server, client, table_name):
    """``snapview read T | head``: no "[Errno 32] Broken pipe" error line, status 141."""
    client.create_table(table_name, "id BIGINT, v STRING", primary_key=["id"])
    with client.transaction() as txn:
        for i in range(5000):  # well beyond a pipe's buffer
            txn.put(table_name, {"id": i, "v": "x" * 40})
    p = subprocess.Popen(
        [sys.executable, "-m", "snapview.cli", "read", table_name, "--coordinator", server.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ},
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.readline()  # `head -1`: one line, then the reader goes away
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141
    assert err == ""
