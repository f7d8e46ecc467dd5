"""The ``/metrics`` HTTP endpoint of ``snapview serve``: bounded, timed out, and behind the token.

prometheus_client's ``start_http_server`` keeps a thread per connection and never times one out:
1,500 idle connections held 1,515 threads in the gRPC server's process. This endpoint serves the
same exposition (prometheus_client's WSGI app, one request per connection) with bounds:

- a connection that sends nothing (or stops reading) for ``idle_timeout_s`` (10 s by default,
  ``snapview serve --metrics-timeout``) is closed, so an idle one holds its thread that long at
  most;
- at most ``MAX_CONNECTIONS`` (64) are served at once, each on a thread of its own; one past that
  is answered ``503`` and closed at once by the accepting thread, without a thread of its own.
  So the endpoint costs at most 65 threads, however many connect; a client holding all 64 slots
  (sending a byte every few seconds) can delay scrapes, never the gRPC server;
- with ``tokens`` (the server has a token), a request without ``Authorization: Bearer TOKEN``
  naming one of them is answered ``401``: table and job names are not for anyone who asks.
  Without tokens (a loopback server without ``--token-file``) it stays plain.
"""

from __future__ import annotations

import hmac
import logging
import socket
import sys
import threading
from collections.abc import Iterable, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

log = logging.getLogger("snapview.metrics")

IDLE_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64
_BUSY_BODY = b"too many metrics connections; retry\n"
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)
_UNAUTHORIZED = b"missing or wrong token (send 'Authorization: Bearer TOKEN')\n"


class _Handler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        # Every read and write of this connection fails after this long without progress.
        self.connection.settimeout(self.server.idle_timeout_s)  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # a scrape every 15 s is no news


class MetricsHTTPServer(ThreadingMixIn, WSGIServer):
    """An HTTP server of ``registry`` holding at most ``max_connections`` connections (and as
    many threads) at once, each timed out after ``idle_timeout_s`` without progress."""

    daemon_threads = True  # a connection being served never holds up the process's exit
    request_queue_size = 128  # the listen backlog: a burst of connects is accepted, not dropped

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        tokens: Sequence[str] = (),
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = infos[0]
        self.address_family = family  # before TCPServer binds
        self.idle_timeout_s = idle_timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__((str(sockaddr[0]), int(sockaddr[1])), _Handler)
        self.set_app(_authorized_app(make_wsgi_app(registry), tokens))
        self._thread = threading.Thread(target=self.serve_forever, name="metrics-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting and close the listening socket (connections being served end on
        their own, within the idle timeout)."""
        if self._thread.is_alive():
            self.shutdown()
        self.server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            _refuse(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # timed out, reset, gone: the client's business
            log.debug("metrics connection from %s: %s", client_address, exc)
        else:
            log.exception("metrics request from %s failed", client_address)


def _refuse(request: socket.socket) -> None:
    """Answer 503 without waiting: the accepting thread must never block on a client."""
    try:
        request.setblocking(False)
        request.send(_BUSY)
    except OSError:
        pass


def _authorized_app(app: Any, tokens: Sequence[str]) -> Any:
    """``app`` behind ``Authorization: Bearer TOKEN`` for any of ``tokens`` (none: open)."""
    expected = [f"Bearer {t}".encode() for t in tokens]
    if not expected:
        return app

    def authorized(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        # WSGI hands header values over as latin-1 strings: back to the bytes that were sent.
        got = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        # Every token is compared, each in constant time: the answer's timing names none.
        if sum(hmac.compare_digest(got, e) for e in expected) == 0:
            start_response(
                "401 Unauthorized",
                [
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("WWW-Authenticate", 'Bearer realm="snapview metrics"'),
                ],
            )
            return [_UNAUTHORIZED]
        return app(environ, start_response)

    return authorized
