"""The options of the ``snapview`` data source, parsed once with errors that name the option."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import overload

from coordinator.connection import ConnectionSettings
from coordinator.times import parse_ts
from kvstore.errors import InvalidArgument

CHANGE_TYPE = "_change_type"
COMMIT_TS = "_commit_ts"


@overload
def _int(opts: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int: ...


@overload
def _int(
    opts: Mapping[str, str], name: str, default: None = None, minimum: int = 0
) -> int | None: ...


def _int(
    opts: Mapping[str, str], name: str, default: int | None = None, minimum: int = 0
) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or raw == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise InvalidArgument(f"snapview option {name}={raw!r} is not an integer") from None
    if v < minimum:
        raise InvalidArgument(f"snapview option {name}={v} must be >= {minimum}")
    return v


def _timestamp(opts: Mapping[str, str], name: str) -> int | None:
    """A snapview timestamp, or a date and time (``coordinator.times.parse_ts``: ISO 8601, local
    time when it names no zone)."""
    raw = opts.get(name.lower())
    if raw is None or raw == "":
        return None
    try:
        v = parse_ts(raw)
    except InvalidArgument as e:
        raise InvalidArgument(f"snapview option {name}: {e}") from None
    if v < 1:
        raise InvalidArgument(f"snapview option {name}={v} must be >= 1")
    return v


@dataclass(frozen=True)
class SourceOptions:
    """Options of spark.read / spark.readStream / writeStream ``.format("snapview")``.

    address            HOST:PORT of snapview serve (``coordinator`` is an alias; default
                       $SNAPVIEW_ADDRESS, or localhost:50051)
    token, tokenFile   the server's shared token, or a file holding it (``authToken`` is an
                       alias of ``token``; default $SNAPVIEW_TOKEN_FILE)
    tlsCa              root certificate to verify a TLS server with (default $SNAPVIEW_TLS_CA)
                       These four are ``coordinator.ConnectionSettings`` (docs/design.md §5.7).
    table              the table to read or write (required)
    at                 snapshot timestamp, or a date and time ("2026-11-23 18:00:00", local time,
                       or ISO 8601 with a zone); default: a fresh timestamp when the read is
                       planned
    barrier            read the table's version at this barrier (a view: its commit for it)
    consistent         "true": read the table's version at its newest barrier. To read several
                       tables at one point, take ``client.snapshot(tables)`` and pass its
                       ``barrier`` to each read
    changes_from/_to   read net changes in (from, to] instead of a snapshot
    rowsPerPartition   target rows per snapshot partition (default 100000)
    maxPartitions      at most this many snapshot partitions (default 64)
    maxRowsPerTrigger  streaming admission control: about this many changes per micro-batch
    resumeFromJob      streaming: without a checkpoint, start after what this sink job committed
    leaseSeconds       hold a reader lease on the read's timestamp against GC, with this TTL in
                       seconds (0: none). Batch reads (default 0): the driver takes it when
                       Spark plans the read, and every partition renews it as it starts, so it holds
                       for the length of the read and lapses one TTL after. Streams (default
                       600): the driver holds it on the stream's committed offset, renewed in
                       the background and moved forward at each commit; it lapses one TTL
                       after the query stops
    mode, job          writers only (see spark_sink)
    """

    coordinator: str
    table: str
    at: int | None = None
    barrier: int | None = None
    consistent: bool = False
    changes_from: int | None = None
    changes_to: int | None = None
    rows_per_partition: int = 100_000
    max_partitions: int = 64
    max_rows_per_trigger: int | None = None
    resume_from_job: str | None = None
    auth_token: str | None = None
    mode: str = "upsert"
    job: str | None = None
    token_file: str | None = None
    tls_ca: str | None = None
    lease_s: int | None = None  # None: the default of the read (batch 0, stream 600)

    @property
    def connection(self) -> ConnectionSettings:
        return ConnectionSettings(self.coordinator, self.auth_token, self.token_file, self.tls_ca)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        table = opts.get("table")
        if not table:
            raise InvalidArgument("snapview needs .option('table', NAME)")
        changes_from = _int(opts, "changes_from")
        changes_to = _int(opts, "changes_to")
        if (changes_from is None) != (changes_to is None):
            raise InvalidArgument(f"table {table!r}: changes_from and changes_to go together")
        if changes_from is not None and changes_to is not None and changes_from >= changes_to:
            raise InvalidArgument(
                f"table {table!r}: changes_from ({changes_from}) must be below "
                f"changes_to ({changes_to})"
            )
        at = _timestamp(opts, "at")
        if at is not None and changes_from is not None:
            raise InvalidArgument(
                f"table {table!r}: 'at' and changes_from/changes_to exclude each other"
            )
        barrier = _int(opts, "barrier", minimum=1)
        consistent = str(opts.get("consistent", "false")).lower()
        if consistent not in ("true", "false"):
            raise InvalidArgument(f"table {table!r}: consistent={consistent!r} is not true/false")
        picked = [n for n, v in (("at", at), ("barrier", barrier)) if v is not None]
        picked += ["consistent"] if consistent == "true" else []
        picked += ["changes_from/changes_to"] if changes_from is not None else []
        if len(picked) > 1:
            raise InvalidArgument(
                f"table {table!r}: options {' and '.join(picked)} exclude each other"
            )
        mode = opts.get("mode", "upsert").lower()
        if mode not in ("upsert", "delete", "append"):
            raise InvalidArgument(f"table {table!r}: mode {mode!r} is not upsert, delete or append")
        conn = ConnectionSettings.from_env(
            address=opts.get("address") or opts.get("coordinator") or None,
            token=opts.get("token") or opts.get("authtoken") or None,
            token_file=opts.get("tokenfile") or None,
            tls_ca=opts.get("tlsca") or None,
        )
        return cls(
            coordinator=conn.address,
            table=table,
            at=at,
            barrier=barrier,
            consistent=consistent == "true",
            changes_from=changes_from,
            changes_to=changes_to,
            rows_per_partition=_int(opts, "rowsPerPartition", 100_000, 1),
            max_partitions=_int(opts, "maxPartitions", 64, 1),
            max_rows_per_trigger=_int(opts, "maxRowsPerTrigger", None, 1),
            resume_from_job=opts.get("resumefromjob") or None,
            auth_token=conn.token,
            token_file=conn.token_file,
            tls_ca=conn.tls_ca,
            mode=mode,
            job=opts.get("job") or None,
            lease_s=_int(opts, "leaseSeconds", None, 0),
        )
