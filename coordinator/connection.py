"""How to reach a snapview server: one set of settings for every client.

``ConnectionSettings(address, token, token_file, tls_ca)`` is taken, as one value, by
``coordinator.connect``, ``MaterializedView.builder(spark).connection(...)``, ``EpochWriter`` and
(as the options ``address``, ``token``/``tokenFile`` and ``tlsCa``) the Spark source; the CLI has
``--address``, ``--token-file`` and ``--tls-ca`` on every client verb. ``from_env()`` reads
``SNAPVIEW_ADDRESS`` (or the older ``SNAPVIEW_COORDINATOR``), ``SNAPVIEW_TOKEN_FILE`` and
``SNAPVIEW_TLS_CA``.

Files are read where a client connects: a Spark executor on another host needs the token file and
the CA at the same path (or give ``token`` itself, which travels with the settings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

DEFAULT_ADDRESS = "localhost:50051"


@dataclass(frozen=True)
class ConnectionSettings:
    """The address of ``snapview serve``, its shared token (or a file holding it) and the root
    certificate to verify a TLS server with. Frozen and picklable: Spark ships it to executors."""

    address: str = DEFAULT_ADDRESS
    token: str | None = None
    token_file: str | None = None
    tls_ca: str | None = None

    @classmethod
    def from_env(cls, **overrides: str | None) -> ConnectionSettings:
        """Settings from SNAPVIEW_ADDRESS (or SNAPVIEW_COORDINATOR), SNAPVIEW_TOKEN_FILE and
        SNAPVIEW_TLS_CA; ``overrides`` that are not None win."""
        env = os.environ
        s = cls(
            address=env.get("SNAPVIEW_ADDRESS")
            or env.get("SNAPVIEW_COORDINATOR")
            or DEFAULT_ADDRESS,
            token_file=env.get("SNAPVIEW_TOKEN_FILE") or None,
            tls_ca=env.get("SNAPVIEW_TLS_CA") or None,
        )
        return s.with_(**overrides)

    def with_(self, **changes: str | None) -> ConnectionSettings:
        """A copy with the given fields changed (None leaves a field as it is). A token and a
        token file exclude each other, so setting one clears the other."""
        given: dict[str, str | None] = {k: v for k, v in changes.items() if v is not None}
        if "token" in given:
            given.setdefault("token_file", None)
        elif "token_file" in given:
            given.setdefault("token", None)
        return replace(self, **given) if given else self  # type: ignore[arg-type]

    def resolved_token(self) -> str | None:
        """The token, read from ``token_file`` if that is how it was given."""
        if self.token:
            return self.token
        if self.token_file:
            with open(self.token_file) as f:
                return f.read().strip()
        return None

    def spark_options(self) -> dict[str, str]:
        """These settings as options of the ``snapview`` data sources."""
        opts = {"address": self.address}
        if self.token:
            opts["token"] = self.token
        if self.token_file:
            opts["tokenFile"] = self.token_file
        if self.tls_ca:
            opts["tlsCa"] = self.tls_ca
        return opts

    def __repr__(self) -> str:  # never print the token
        token = "'***'" if self.token else "None"
        return (
            f"ConnectionSettings(address={self.address!r}, token={token}, "
            f"token_file={self.token_file!r}, tls_ca={self.tls_ca!r})"
        )


def as_settings(
    conn: str | ConnectionSettings | None, token: str | None = None
) -> ConnectionSettings:
    """``conn`` as settings: an address string (the older way, with ``token`` beside it) or
    settings already; None is ``from_env()``."""
    if isinstance(conn, ConnectionSettings):
        return conn.with_(token=token)
    return ConnectionSettings.from_env(address=conn, token=token)
