from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EpochState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EPOCH_STATE_UNSPECIFIED: _ClassVar[EpochState]
    EPOCH_PREWRITE: _ClassVar[EpochState]
    EPOCH_COMMITTED: _ClassVar[EpochState]
    EPOCH_ABORTED: _ClassVar[EpochState]
EPOCH_STATE_UNSPECIFIED: EpochState
EPOCH_PREWRITE: EpochState
EPOCH_COMMITTED: EpochState
EPOCH_ABORTED: EpochState

class TsoRequest(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class TsoResponse(_message.Message):
    __slots__ = ("first", "count")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    first: int
    count: int
    def __init__(self, first: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class EpochInfo(_message.Message):
    __slots__ = ("job", "epoch", "state", "start_ts", "commit_ts", "primary_key", "attempt", "metadata", "batch", "owner", "rebuild")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REBUILD_FIELD_NUMBER: _ClassVar[int]
    job: str
    epoch: int
    state: EpochState
    start_ts: int
    commit_ts: int
    primary_key: bytes
    attempt: int
    metadata: str
    batch: str
    owner: str
    rebuild: int
    def __init__(self, job: _Optional[str] = ..., epoch: _Optional[int] = ..., state: _Optional[_Union[EpochState, str]] = ..., start_ts: _Optional[int] = ..., commit_ts: _Optional[int] = ..., primary_key: _Optional[bytes] = ..., attempt: _Optional[int] = ..., metadata: _Optional[str] = ..., batch: _Optional[str] = ..., owner: _Optional[str] = ..., rebuild: _Optional[int] = ...) -> None: ...

class OpenTransactionRequest(_message.Message):
    __slots__ = ("job", "epoch", "lock_ttl_ms", "batch", "owner")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOCK_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    job: str
    epoch: int
    lock_ttl_ms: int
    batch: str
    owner: str
    def __init__(self, job: _Optional[str] = ..., epoch: _Optional[int] = ..., lock_ttl_ms: _Optional[int] = ..., batch: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class CommitTransactionRequest(_message.Message):
    __slots__ = ("job", "epoch", "start_ts", "metadata")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    job: str
    epoch: int
    start_ts: int
    metadata: str
    def __init__(self, job: _Optional[str] = ..., epoch: _Optional[int] = ..., start_ts: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class AbortTransactionRequest(_message.Message):
    __slots__ = ("job", "epoch", "start_ts")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    job: str
    epoch: int
    start_ts: int
    def __init__(self, job: _Optional[str] = ..., epoch: _Optional[int] = ..., start_ts: _Optional[int] = ...) -> None: ...

class HeartbeatTransactionRequest(_message.Message):
    __slots__ = ("job", "epoch", "start_ts", "ttl_ms")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    job: str
    epoch: int
    start_ts: int
    ttl_ms: int
    def __init__(self, job: _Optional[str] = ..., epoch: _Optional[int] = ..., start_ts: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class GetEpochRequest(_message.Message):
    __slots__ = ("job", "epoch")
    JOB_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    job: str
    epoch: int
    def __init__(self, job: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("version", "tso", "tables", "jobs", "data_dir", "uptime_ms", "map_size_bytes", "used_bytes", "group_commits", "grouped_actions", "instance_id", "lmdb_path")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TSO_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    MAP_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    GROUP_COMMITS_FIELD_NUMBER: _ClassVar[int]
    GROUPED_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LMDB_PATH_FIELD_NUMBER: _ClassVar[int]
    version: str
    tso: int
    tables: int
    jobs: int
    data_dir: str
    uptime_ms: int
    map_size_bytes: int
    used_bytes: int
    group_commits: int
    grouped_actions: int
    instance_id: str
    lmdb_path: str
    def __init__(self, version: _Optional[str] = ..., tso: _Optional[int] = ..., tables: _Optional[int] = ..., jobs: _Optional[int] = ..., data_dir: _Optional[str] = ..., uptime_ms: _Optional[int] = ..., map_size_bytes: _Optional[int] = ..., used_bytes: _Optional[int] = ..., group_commits: _Optional[int] = ..., grouped_actions: _Optional[int] = ..., instance_id: _Optional[str] = ..., lmdb_path: _Optional[str] = ...) -> None: ...

class RegisterJobRequest(_message.Message):
    __slots__ = ("job", "sink", "sources", "kind", "query", "strategy")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SINK_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    job: str
    sink: str
    sources: _containers.RepeatedScalarFieldContainer[str]
    kind: str
    query: str
    strategy: str
    def __init__(self, job: _Optional[str] = ..., sink: _Optional[str] = ..., sources: _Optional[_Iterable[str]] = ..., kind: _Optional[str] = ..., query: _Optional[str] = ..., strategy: _Optional[str] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("job", "sink", "sources", "kind", "query", "strategy", "registered_wall_ms", "last_committed", "state", "last_error", "reported_wall_ms")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SINK_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    REPORTED_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    job: str
    sink: str
    sources: _containers.RepeatedScalarFieldContainer[str]
    kind: str
    query: str
    strategy: str
    registered_wall_ms: int
    last_committed: int
    state: str
    last_error: str
    reported_wall_ms: int
    def __init__(self, job: _Optional[str] = ..., sink: _Optional[str] = ..., sources: _Optional[_Iterable[str]] = ..., kind: _Optional[str] = ..., query: _Optional[str] = ..., strategy: _Optional[str] = ..., registered_wall_ms: _Optional[int] = ..., last_committed: _Optional[int] = ..., state: _Optional[str] = ..., last_error: _Optional[str] = ..., reported_wall_ms: _Optional[int] = ...) -> None: ...

class ReportJobRequest(_message.Message):
    __slots__ = ("job", "state", "error", "ttl_ms")
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    job: str
    state: str
    error: str
    ttl_ms: int
    def __init__(self, job: _Optional[str] = ..., state: _Optional[str] = ..., error: _Optional[str] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class UnregisterJobRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class ReleaseJobRequest(_message.Message):
    __slots__ = ("job", "owner")
    JOB_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    job: str
    owner: str
    def __init__(self, job: _Optional[str] = ..., owner: _Optional[str] = ...) -> None: ...

class ReleaseJobResponse(_message.Message):
    __slots__ = ("released", "epoch", "holds")
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    released: bool
    epoch: EpochInfo
    holds: _containers.RepeatedCompositeFieldContainer[GcHold]
    def __init__(self, released: _Optional[bool] = ..., epoch: _Optional[_Union[EpochInfo, _Mapping]] = ..., holds: _Optional[_Iterable[_Union[GcHold, _Mapping]]] = ...) -> None: ...

class TopologyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TableNode(_message.Message):
    __slots__ = ("table", "kind", "writer")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WRITER_FIELD_NUMBER: _ClassVar[int]
    table: str
    kind: str
    writer: str
    def __init__(self, table: _Optional[str] = ..., kind: _Optional[str] = ..., writer: _Optional[str] = ...) -> None: ...

class TopologyResponse(_message.Message):
    __slots__ = ("jobs", "tables")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobInfo]
    tables: _containers.RepeatedCompositeFieldContainer[TableNode]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobInfo, _Mapping]]] = ..., tables: _Optional[_Iterable[_Union[TableNode, _Mapping]]] = ...) -> None: ...

class TableRead(_message.Message):
    __slots__ = ("table", "read_ts", "changed")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    READ_TS_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    table: str
    read_ts: int
    changed: bool
    def __init__(self, table: _Optional[str] = ..., read_ts: _Optional[int] = ..., changed: _Optional[bool] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ("tables", "mode", "barrier")
    TABLES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    tables: _containers.RepeatedScalarFieldContainer[str]
    mode: str
    barrier: int
    def __init__(self, tables: _Optional[_Iterable[str]] = ..., mode: _Optional[str] = ..., barrier: _Optional[int] = ...) -> None: ...

class SnapshotResponse(_message.Message):
    __slots__ = ("barrier", "mode", "reads", "barrier_wall_ms")
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    READS_FIELD_NUMBER: _ClassVar[int]
    BARRIER_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    barrier: int
    mode: str
    reads: _containers.RepeatedCompositeFieldContainer[TableRead]
    barrier_wall_ms: int
    def __init__(self, barrier: _Optional[int] = ..., mode: _Optional[str] = ..., reads: _Optional[_Iterable[_Union[TableRead, _Mapping]]] = ..., barrier_wall_ms: _Optional[int] = ...) -> None: ...

class PlanBarriersRequest(_message.Message):
    __slots__ = ("job", "limit", "after", "upto")
    JOB_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    UPTO_FIELD_NUMBER: _ClassVar[int]
    job: str
    limit: int
    after: int
    upto: int
    def __init__(self, job: _Optional[str] = ..., limit: _Optional[int] = ..., after: _Optional[int] = ..., upto: _Optional[int] = ...) -> None: ...

class BarrierPlan(_message.Message):
    __slots__ = ("barrier", "reads", "wall_ms")
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    READS_FIELD_NUMBER: _ClassVar[int]
    WALL_MS_FIELD_NUMBER: _ClassVar[int]
    barrier: int
    reads: _containers.RepeatedCompositeFieldContainer[TableRead]
    wall_ms: int
    def __init__(self, barrier: _Optional[int] = ..., reads: _Optional[_Iterable[_Union[TableRead, _Mapping]]] = ..., wall_ms: _Optional[int] = ...) -> None: ...

class PlanBarriersResponse(_message.Message):
    __slots__ = ("barriers", "last_committed", "newest_barrier")
    BARRIERS_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    NEWEST_BARRIER_FIELD_NUMBER: _ClassVar[int]
    barriers: _containers.RepeatedCompositeFieldContainer[BarrierPlan]
    last_committed: int
    newest_barrier: int
    def __init__(self, barriers: _Optional[_Iterable[_Union[BarrierPlan, _Mapping]]] = ..., last_committed: _Optional[int] = ..., newest_barrier: _Optional[int] = ...) -> None: ...

class DelayRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TableDelay(_message.Message):
    __slots__ = ("table", "kind", "job", "barrier", "barriers_behind", "barrier_lag_ms", "e2e_delay_ms", "job_state", "path")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    BARRIERS_BEHIND_FIELD_NUMBER: _ClassVar[int]
    BARRIER_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    E2E_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    JOB_STATE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    table: str
    kind: str
    job: str
    barrier: int
    barriers_behind: int
    barrier_lag_ms: int
    e2e_delay_ms: int
    job_state: str
    path: _containers.RepeatedCompositeFieldContainer[JobContribution]
    def __init__(self, table: _Optional[str] = ..., kind: _Optional[str] = ..., job: _Optional[str] = ..., barrier: _Optional[int] = ..., barriers_behind: _Optional[int] = ..., barrier_lag_ms: _Optional[int] = ..., e2e_delay_ms: _Optional[int] = ..., job_state: _Optional[str] = ..., path: _Optional[_Iterable[_Union[JobContribution, _Mapping]]] = ...) -> None: ...

class JobContribution(_message.Message):
    __slots__ = ("table", "job", "barrier", "own_ms", "wait_ms", "bottleneck", "estimated")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    OWN_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECK_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    table: str
    job: str
    barrier: int
    own_ms: int
    wait_ms: int
    bottleneck: bool
    estimated: bool
    def __init__(self, table: _Optional[str] = ..., job: _Optional[str] = ..., barrier: _Optional[int] = ..., own_ms: _Optional[int] = ..., wait_ms: _Optional[int] = ..., bottleneck: _Optional[bool] = ..., estimated: _Optional[bool] = ...) -> None: ...

class DelayResponse(_message.Message):
    __slots__ = ("newest_barrier", "tables")
    NEWEST_BARRIER_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    newest_barrier: int
    tables: _containers.RepeatedCompositeFieldContainer[TableDelay]
    def __init__(self, newest_barrier: _Optional[int] = ..., tables: _Optional[_Iterable[_Union[TableDelay, _Mapping]]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("id", "holder", "ts", "ttl_ms", "expires_ms", "created_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    holder: str
    ts: int
    ttl_ms: int
    expires_ms: int
    created_ms: int
    def __init__(self, id: _Optional[str] = ..., holder: _Optional[str] = ..., ts: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., expires_ms: _Optional[int] = ..., created_ms: _Optional[int] = ...) -> None: ...

class AcquireLeaseRequest(_message.Message):
    __slots__ = ("holder", "ts", "ttl_ms")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    holder: str
    ts: int
    ttl_ms: int
    def __init__(self, holder: _Optional[str] = ..., ts: _Optional[int] = ..., ttl_ms: _Optional[int] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("id", "ttl_ms", "ts")
    ID_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    id: str
    ttl_ms: int
    ts: int
    def __init__(self, id: _Optional[str] = ..., ttl_ms: _Optional[int] = ..., ts: _Optional[int] = ...) -> None: ...

class ReleaseLeaseRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ReleaseLeaseResponse(_message.Message):
    __slots__ = ("existed",)
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    def __init__(self, existed: _Optional[bool] = ...) -> None: ...

class GcStatusRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "holder")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    holder: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., holder: _Optional[str] = ...) -> None: ...

class GcHold(_message.Message):
    __slots__ = ("kind", "name", "ts")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    ts: int
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., ts: _Optional[int] = ...) -> None: ...

class GcProgress(_message.Message):
    __slots__ = ("passes", "steps", "versions_removed", "records_examined", "records_deleted", "step_seconds", "pass_safepoint", "pass_phase", "last_pass_seconds", "last_pass_end_ms", "epoch_records_removed", "barriers_removed")
    PASSES_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_EXAMINED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DELETED_FIELD_NUMBER: _ClassVar[int]
    STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PASS_SAFEPOINT_FIELD_NUMBER: _ClassVar[int]
    PASS_PHASE_FIELD_NUMBER: _ClassVar[int]
    LAST_PASS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAST_PASS_END_MS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_RECORDS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    BARRIERS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    passes: int
    steps: int
    versions_removed: int
    records_examined: int
    records_deleted: int
    step_seconds: float
    pass_safepoint: int
    pass_phase: str
    last_pass_seconds: float
    last_pass_end_ms: int
    epoch_records_removed: int
    barriers_removed: int
    def __init__(self, passes: _Optional[int] = ..., steps: _Optional[int] = ..., versions_removed: _Optional[int] = ..., records_examined: _Optional[int] = ..., records_deleted: _Optional[int] = ..., step_seconds: _Optional[float] = ..., pass_safepoint: _Optional[int] = ..., pass_phase: _Optional[str] = ..., last_pass_seconds: _Optional[float] = ..., last_pass_end_ms: _Optional[int] = ..., epoch_records_removed: _Optional[int] = ..., barriers_removed: _Optional[int] = ...) -> None: ...

class GcStatusResponse(_message.Message):
    __slots__ = ("enabled", "safepoint", "retention_s", "interval_s", "holds", "leases", "progress", "now_ms", "lease_count", "next_page_token", "total_leases", "oldest_lease_ts")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    SAFEPOINT_FIELD_NUMBER: _ClassVar[int]
    RETENTION_S_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_COUNT_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LEASES_FIELD_NUMBER: _ClassVar[int]
    OLDEST_LEASE_TS_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    safepoint: int
    retention_s: float
    interval_s: float
    holds: _containers.RepeatedCompositeFieldContainer[GcHold]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    progress: GcProgress
    now_ms: int
    lease_count: int
    next_page_token: str
    total_leases: int
    oldest_lease_ts: int
    def __init__(self, enabled: _Optional[bool] = ..., safepoint: _Optional[int] = ..., retention_s: _Optional[float] = ..., interval_s: _Optional[float] = ..., holds: _Optional[_Iterable[_Union[GcHold, _Mapping]]] = ..., leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., progress: _Optional[_Union[GcProgress, _Mapping]] = ..., now_ms: _Optional[int] = ..., lease_count: _Optional[int] = ..., next_page_token: _Optional[str] = ..., total_leases: _Optional[int] = ..., oldest_lease_ts: _Optional[int] = ...) -> None: ...

class Revision(_message.Message):
    __slots__ = ("id", "table", "kind", "state", "who", "started_wall_ms", "ended_wall_ms", "target_ts", "target_barrier", "start_ts", "commit_ts", "barrier", "restored", "removed", "mode", "job", "views", "error", "key")
    ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WHO_FIELD_NUMBER: _ClassVar[int]
    STARTED_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TS_FIELD_NUMBER: _ClassVar[int]
    TARGET_BARRIER_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    BARRIER_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    VIEWS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    id: int
    table: str
    kind: str
    state: str
    who: str
    started_wall_ms: int
    ended_wall_ms: int
    target_ts: int
    target_barrier: int
    start_ts: int
    commit_ts: int
    barrier: int
    restored: int
    removed: int
    mode: str
    job: str
    views: _containers.RepeatedScalarFieldContainer[str]
    error: str
    key: str
    def __init__(self, id: _Optional[int] = ..., table: _Optional[str] = ..., kind: _Optional[str] = ..., state: _Optional[str] = ..., who: _Optional[str] = ..., started_wall_ms: _Optional[int] = ..., ended_wall_ms: _Optional[int] = ..., target_ts: _Optional[int] = ..., target_barrier: _Optional[int] = ..., start_ts: _Optional[int] = ..., commit_ts: _Optional[int] = ..., barrier: _Optional[int] = ..., restored: _Optional[int] = ..., removed: _Optional[int] = ..., mode: _Optional[str] = ..., job: _Optional[str] = ..., views: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class ReviseRequest(_message.Message):
    __slots__ = ("table", "to_ts", "to_barrier", "dry_run", "who", "key")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    TO_TS_FIELD_NUMBER: _ClassVar[int]
    TO_BARRIER_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    WHO_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    table: str
    to_ts: int
    to_barrier: int
    dry_run: bool
    who: str
    key: str
    def __init__(self, table: _Optional[str] = ..., to_ts: _Optional[int] = ..., to_barrier: _Optional[int] = ..., dry_run: _Optional[bool] = ..., who: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class BeginCorrectionsRequest(_message.Message):
    __slots__ = ("table", "mode", "who", "lock_ttl_ms")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    WHO_FIELD_NUMBER: _ClassVar[int]
    LOCK_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    table: str
    mode: str
    who: str
    lock_ttl_ms: int
    def __init__(self, table: _Optional[str] = ..., mode: _Optional[str] = ..., who: _Optional[str] = ..., lock_ttl_ms: _Optional[int] = ...) -> None: ...

class BeginCorrectionsResponse(_message.Message):
    __slots__ = ("revision", "epoch")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    revision: Revision
    epoch: EpochInfo
    def __init__(self, revision: _Optional[_Union[Revision, _Mapping]] = ..., epoch: _Optional[_Union[EpochInfo, _Mapping]] = ...) -> None: ...

class RebuildRequest(_message.Message):
    __slots__ = ("view", "who")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    WHO_FIELD_NUMBER: _ClassVar[int]
    view: str
    who: str
    def __init__(self, view: _Optional[str] = ..., who: _Optional[str] = ...) -> None: ...

class GetRevisionRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class ListRevisionsRequest(_message.Message):
    __slots__ = ("table", "limit")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    table: str
    limit: int
    def __init__(self, table: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListRevisionsResponse(_message.Message):
    __slots__ = ("revisions",)
    REVISIONS_FIELD_NUMBER: _ClassVar[int]
    revisions: _containers.RepeatedCompositeFieldContainer[Revision]
    def __init__(self, revisions: _Optional[_Iterable[_Union[Revision, _Mapping]]] = ...) -> None: ...
