"""The metrics endpoint of a real ``snapview serve`` is bounded (coordinator.server.metrics_http):
an idle connection is closed after ``--metrics-timeout``, many idle connections cost at most
``MAX_CONNECTIONS`` threads (those past it get 503 at once), a server with a token answers 401
without ``Authorization: Bearer TOKEN`` and 200 with it, and a loopback server without a token
stays plain."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import pytest

from coordinator.server.metrics_http import MAX_CONNECTIONS
from tests.conftest import serve, server_fixture, wait_for

TOKEN = "s3cret-metrics-token"
READ_TOKEN = "read-metrics-token"
TIMEOUT_S = 1.0


plain = server_fixture("plain", "--metrics-port", "0")


# Not server_fixture: the server reads token files written before it starts.
@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    d = tmp_path_factory.mktemp("guarded")
    tok = d / "token"
    tok.write_text(TOKEN + "\n")
    read_tok = d / "read-token"
    read_tok.write_text(READ_TOKEN + "\n")
    yield from serve(
        d / "data",
        "--token-file",
        str(tok),
        "--read-token-file",
        str(read_tok),
        "--metrics-port",
        "0",
        "--metrics-timeout",
        f"{TIMEOUT_S}s",
    )


def get(url: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def host_port(url: str) -> tuple[str, int]:
    hostport = url.split("//", 1)[1].split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads: line")


def test_loopback_without_a_token_stays_plain(plain):
    status, text = get(plain.metrics_address)
    assert status == 200 and "snapview_server_info" in text


def test_token_server_answers_401_without_the_token_and_200_with_it(guarded):
    status, text = get(guarded.metrics_address)
    assert status == 401, status
    assert "snapview_" not in text
    assert get(guarded.metrics_address, token="wrong")[0] == 401
    for token in (TOKEN, READ_TOKEN):  # the admin token, and the read token (roles)
        status, text = get(guarded.metrics_address, token=token)
        assert status == 200 and "snapview_server_info" in text


def test_idle_connection_is_closed_after_the_timeout(guarded):
    """A connection that sends nothing is closed by the server within the timeout (+ slack)."""
    with socket.create_connection(host_port(guarded.metrics_address)) as s:
        s.settimeout(TIMEOUT_S + 5)
        t0 = time.monotonic()
        assert s.recv(1024) == b""  # the server closed it
        assert time.monotonic() - t0 < TIMEOUT_S + 3


def test_many_idle_connections_hold_a_bounded_number_of_threads(plain):
    """200 idle connections: the server's process gains at most MAX_CONNECTIONS threads (the
    ones past it are answered 503 at once), and scrapes work again once they are gone."""
    pid = plain.proc.pid
    before = threads(pid)
    socks = [socket.create_connection(host_port(plain.metrics_address)) for _ in range(200)]
    try:
        # The last one is past the bound: answered and closed at once, not left to idle.
        socks[-1].settimeout(5)
        assert socks[-1].recv(1024).startswith(b"HTTP/1.0 503")
        assert threads(pid) <= before + MAX_CONNECTIONS + 2, (before, threads(pid))
        assert get(plain.metrics_address)[0] == 503
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: get(plain.metrics_address)[0] == 200, 10, "a scrape once they closed")
