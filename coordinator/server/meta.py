"""The coordinator's key space in the ``meta`` column family, and the records stored under it.

Every key the coordinator writes to ``meta`` is built here, so the whole space can be read in one
place and two modules can never choose overlapping prefixes. The store's own ``meta`` keys (the GC
safepoint, the next table id) are in ``kvstore.meta_keys``; the prefixes below are disjoint from
them.

    tso/high_water              decimal ms          the TSO's persisted high-water mark (tso)
    epoch/<job>\\0<epoch:8>      EpochRecord (JSON)    one per opened (job, epoch) (epochs)
    job/<job>                   {"last_committed", "open_epoch"} (JSON), per job (epochs)
    jobreg/<job>                JobRecord (JSON)    the registered topology (registry)
    jobrun/<job>                JobRun (JSON)       the job's last liveness report (registry)
    jobdrop/<job>               {"table", "table_id", "wall_ms"} (JSON)  a job unregistered by
                                                    its table's drop, until registered again
                                                    (drops)
    barrier/<T:8>               {"wall_ms"} (JSON)  one per issued barrier (barriers)
    vbar/<table>\\0<T:8>         ViewVersion (JSON, without ``barrier``) (barriers)
    vbar-newest/<table>         decimal T           a view's newest barrier (barriers)
    lease/<id>                  Lease (JSON)        a reader lease on the GC safepoint (leases)
    rev/<id:8>                  RevisionRecord (JSON) one per revision, the audit (revisions)
    rev-next                    decimal id          the id the next revision gets (revisions)
    rev-open/<id:8>             empty               a revision not finished yet (revisions)
    rev-key/<key>               decimal id          a client's revision key (revisions)
    rebuild/<job>               decimal id          a rebuild requested of a view's job (revisions)
    resolving/<start_ts:8>      decimal commit_ts   a committed epoch whose secondaries are still
                                                    being resolved in steps (epochs; restarts
                                                    finish each one)

``<n:8>`` is an 8-byte big-endian integer, so a prefix walk returns epochs and barriers in
order. Besides ``meta``, an epoch's primary key lives in the data space, in the system table
(``epoch_primary_key``): it is a Percolator key like any other, so it can be locked and committed.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import asdict, dataclass

from coordinator.jobs import EpochState
from kvstore.errors import InvalidArgument, cut
from kvstore.mvcc.keys import SYSTEM_TABLE_ID, table_prefix
from kvstore.text import control_character

_U64 = struct.Struct(">Q")

# One rule for job names, everywhere a name arrives (RegisterJob, OpenTransaction, every epoch
# call): printable, no spaces or NULs, short enough that every key built from it fits LMDB's
# 511-byte key limit.
JOB_NAME = re.compile(r"[A-Za-z0-9_.:\-/]{1,200}")
# Free-text fields stored in records (JSON values, not keys): bounded so one request cannot make
# a record of unbounded size.
MAX_LABEL_CHARS = 1024  # an epoch's batch and owner, a job's strategy
MAX_TEXT_BYTES = 1 << 20  # a job's query, an epoch's metadata


def check_job_name(job: object) -> str:
    """``job`` if it is a valid job name; else InvalidArgument naming it (cut) and the rule."""
    if not isinstance(job, str) or not JOB_NAME.fullmatch(job):
        raise InvalidArgument(f"job name {cut(job)} must match {JOB_NAME.pattern}")
    return job


def check_label(job: str, field: str, value: str, limit: int = MAX_LABEL_CHARS) -> None:
    """Refuse a free-text ``field`` of ``job`` longer than ``limit`` (characters for labels,
    UTF-8 bytes for texts) or holding a NUL; a label (one line, shown in the CLI's tables) also
    when it holds any control character (``kvstore.text``), texts may span lines."""
    size = len(value.encode()) if limit == MAX_TEXT_BYTES else len(value)
    if size > limit:
        raise InvalidArgument(f"job {job!r}: {field} has {size} characters; the limit is {limit}")
    if "\x00" in value:
        raise InvalidArgument(f"job {job!r}: {field} {cut(value)} contains a NUL character")
    bad = control_character(value) if limit != MAX_TEXT_BYTES else None
    if bad is not None:
        raise InvalidArgument(
            f"job {job!r}: {field} {cut(value)} contains the control character {bad}; "
            "only printable text is allowed"
        )


TSO_HIGH_WATER = b"tso/high_water"
EPOCH_PREFIX = b"epoch/"
JOB_STATE_PREFIX = b"job/"
JOB_RECORD_PREFIX = b"jobreg/"
JOB_RUN_PREFIX = b"jobrun/"
JOB_DROPPED_PREFIX = b"jobdrop/"
BARRIER_PREFIX = b"barrier/"
VIEW_VERSION_PREFIX = b"vbar/"
VIEW_NEWEST_PREFIX = b"vbar-newest/"
LEASE_PREFIX = b"lease/"
REVISION_PREFIX = b"rev/"
REVISION_NEXT = b"rev-next"
REVISION_OPEN_PREFIX = b"rev-open/"
REVISION_KEY_PREFIX = b"rev-key/"
REBUILD_PREFIX = b"rebuild/"
RESOLVING_PREFIX = b"resolving/"


def epoch_key(job: str, epoch: int) -> bytes:
    return epoch_prefix(job) + _U64.pack(epoch)


def job_state_key(job: str) -> bytes:
    return JOB_STATE_PREFIX + job.encode()


def job_record_key(job: str) -> bytes:
    return JOB_RECORD_PREFIX + job.encode()


def job_run_key(job: str) -> bytes:
    return JOB_RUN_PREFIX + job.encode()


def job_dropped_key(job: str) -> bytes:
    return JOB_DROPPED_PREFIX + job.encode()


def epoch_prefix(job: str) -> bytes:
    """The prefix of every ``epoch/`` record of ``job``."""
    return EPOCH_PREFIX + job.encode() + b"\x00"


def barrier_key(ts: int) -> bytes:
    return BARRIER_PREFIX + _U64.pack(ts)


def barrier_of_key(key: bytes) -> int:
    """The barrier a ``barrier/`` or ``vbar/`` key names (its last eight bytes)."""
    return _U64.unpack(key[-8:])[0]


def view_version_prefix(table: str) -> bytes:
    return VIEW_VERSION_PREFIX + table.encode() + b"\x00"


def view_version_key(table: str, ts: int) -> bytes:
    return view_version_prefix(table) + _U64.pack(ts)


def view_newest_key(table: str) -> bytes:
    return VIEW_NEWEST_PREFIX + table.encode()


def lease_key(lease_id: str) -> bytes:
    return LEASE_PREFIX + lease_id.encode()


def revision_key(rid: int) -> bytes:
    return REVISION_PREFIX + _U64.pack(rid)


def revision_open_key(rid: int) -> bytes:
    return REVISION_OPEN_PREFIX + _U64.pack(rid)


def revision_by_key_key(key: str) -> bytes:
    return REVISION_KEY_PREFIX + key.encode()


def rebuild_key(job: str) -> bytes:
    return REBUILD_PREFIX + job.encode()


def resolving_key(start_ts: int) -> bytes:
    return RESOLVING_PREFIX + _U64.pack(start_ts)


def resolving_start_ts(key: bytes) -> int:
    """The start_ts a ``resolving/`` key names (its last eight bytes)."""
    return _U64.unpack(key[-8:])[0]


def epoch_primary_prefix(job: str) -> bytes:
    """The prefix of every epoch primary key of ``job`` (its length is in it: no other job's
    keys share it)."""
    j = job.encode()
    return table_prefix(SYSTEM_TABLE_ID) + b"E" + struct.pack(">H", len(j)) + j


def epoch_primary_key(job: str, epoch: int) -> bytes:
    """The status key of (job, epoch) in the system table: the epoch transaction's primary."""
    return epoch_primary_prefix(job) + _U64.pack(epoch)


# ---------------------------------------------------------------------- records

# The server's names for EpochState's members (its values are what the records store).
PREWRITE, COMMITTED, ABORTED = EpochState.PREWRITE, EpochState.COMMITTED, EpochState.ABORTED


@dataclass(frozen=True)
class EpochRecord:
    """One attempt at (job, epoch) as stored: its state and timestamps (the client sees it as
    ``coordinator.jobs.EpochInfo``)."""

    job: str
    epoch: int
    state: EpochState
    start_ts: int
    commit_ts: int = 0
    attempt: int = 1
    metadata: str = ""
    batch: str = ""
    owner: str = ""

    @property
    def primary_key(self) -> bytes:
        return epoch_primary_key(self.job, self.epoch)

    def to_json(self) -> bytes:
        return json.dumps({**asdict(self), "state": self.state.value}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> EpochRecord:
        d = json.loads(raw)
        return cls(**{**d, "state": EpochState(d["state"])})


VIEW, SINK = "view", "sink"
JOB_KINDS = (VIEW, SINK)


@dataclass(frozen=True)
class JobRecord:
    """A registered job: the one writer of ``sink``, reading ``sources``."""

    job: str
    sink: str
    sources: tuple[str, ...] = ()
    kind: str = SINK
    query: str = ""
    strategy: str = ""
    registered_wall_ms: int = 0

    @property
    def is_view(self) -> bool:
        return self.kind == VIEW

    def to_json(self) -> bytes:
        d = asdict(self)
        d["sources"] = list(self.sources)
        return json.dumps(d).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> JobRecord:
        d = json.loads(raw)
        d["sources"] = tuple(d["sources"])
        return cls(**d)


@dataclass(frozen=True)
class ViewVersion:
    """A view's version at one barrier."""

    barrier: int
    read_ts: int  # the commit ts of the job's epoch for the barrier
    wall_ms: int  # when it was committed
    changed: bool  # the epoch wrote rows (False: same contents as at ``prev``)
    prev: int  # the barrier the job committed before this one (0: none)
    job: str = ""

    def to_json(self) -> bytes:
        d = asdict(self)
        del d["barrier"]  # the key names it
        return json.dumps(d).encode()

    @classmethod
    def from_json(cls, barrier: int, raw: bytes) -> ViewVersion:
        return cls(barrier=barrier, **json.loads(raw))


@dataclass(frozen=True)
class JobRun:
    """A job's last report of itself (``ReportJob``): its state, error and when."""

    state: str  # running | failed | stopped
    error: str = ""
    wall_ms: int = 0
    ttl_ms: int = 0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> JobRun:
        return cls(**json.loads(raw))
