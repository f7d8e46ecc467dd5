from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TxnStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_STATUS_UNSPECIFIED: _ClassVar[TxnStatus]
    TXN_LOCKED: _ClassVar[TxnStatus]
    TXN_COMMITTED: _ClassVar[TxnStatus]
    TXN_ROLLED_BACK: _ClassVar[TxnStatus]
TXN_STATUS_UNSPECIFIED: TxnStatus
TXN_LOCKED: TxnStatus
TXN_COMMITTED: TxnStatus
TXN_ROLLED_BACK: TxnStatus

class Mutation(_message.Message):
    __slots__ = ("op", "key", "value")
    class Op(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PUT: _ClassVar[Mutation.Op]
        DELETE: _ClassVar[Mutation.Op]
        LOCK: _ClassVar[Mutation.Op]
    PUT: Mutation.Op
    DELETE: Mutation.Op
    LOCK: Mutation.Op
    OP_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    op: Mutation.Op
    key: bytes
    value: bytes
    def __init__(self, op: _Optional[_Union[Mutation.Op, str]] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ...) -> None: ...

class MutationBatch(_message.Message):
    __slots__ = ("ops", "keys", "key_sizes", "values", "value_sizes")
    OPS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    KEY_SIZES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    VALUE_SIZES_FIELD_NUMBER: _ClassVar[int]
    ops: bytes
    keys: bytes
    key_sizes: _containers.RepeatedScalarFieldContainer[int]
    values: bytes
    value_sizes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ops: _Optional[bytes] = ..., keys: _Optional[bytes] = ..., key_sizes: _Optional[_Iterable[int]] = ..., values: _Optional[bytes] = ..., value_sizes: _Optional[_Iterable[int]] = ...) -> None: ...

class LockInfo(_message.Message):
    __slots__ = ("key", "primary", "start_ts", "ttl_ms", "op", "txn_size", "keys")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    TXN_SIZE_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    primary: bytes
    start_ts: int
    ttl_ms: int
    op: Mutation.Op
    txn_size: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, key: _Optional[bytes] = ..., primary: _Optional[bytes] = ..., start_ts: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., op: _Optional[_Union[Mutation.Op, str]] = ..., txn_size: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class WriteConflict(_message.Message):
    __slots__ = ("key", "primary", "start_ts", "conflict_start_ts", "conflict_commit_ts")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_START_TS_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    primary: bytes
    start_ts: int
    conflict_start_ts: int
    conflict_commit_ts: int
    def __init__(self, key: _Optional[bytes] = ..., primary: _Optional[bytes] = ..., start_ts: _Optional[int] = ..., conflict_start_ts: _Optional[int] = ..., conflict_commit_ts: _Optional[int] = ...) -> None: ...

class TxnLockNotFound(_message.Message):
    __slots__ = ("key", "start_ts")
    KEY_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    start_ts: int
    def __init__(self, key: _Optional[bytes] = ..., start_ts: _Optional[int] = ...) -> None: ...

class TxnRolledBack(_message.Message):
    __slots__ = ("key", "start_ts")
    KEY_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    start_ts: int
    def __init__(self, key: _Optional[bytes] = ..., start_ts: _Optional[int] = ...) -> None: ...

class TxnAlreadyCommitted(_message.Message):
    __slots__ = ("key", "start_ts", "commit_ts")
    KEY_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    start_ts: int
    commit_ts: int
    def __init__(self, key: _Optional[bytes] = ..., start_ts: _Optional[int] = ..., commit_ts: _Optional[int] = ...) -> None: ...

class KeyError(_message.Message):
    __slots__ = ("locked", "conflict", "lock_not_found", "rolled_back", "already_committed")
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_FIELD_NUMBER: _ClassVar[int]
    LOCK_NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    ALREADY_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    locked: LockInfo
    conflict: WriteConflict
    lock_not_found: TxnLockNotFound
    rolled_back: TxnRolledBack
    already_committed: TxnAlreadyCommitted
    def __init__(self, locked: _Optional[_Union[LockInfo, _Mapping]] = ..., conflict: _Optional[_Union[WriteConflict, _Mapping]] = ..., lock_not_found: _Optional[_Union[TxnLockNotFound, _Mapping]] = ..., rolled_back: _Optional[_Union[TxnRolledBack, _Mapping]] = ..., already_committed: _Optional[_Union[TxnAlreadyCommitted, _Mapping]] = ...) -> None: ...

class PrewriteRequest(_message.Message):
    __slots__ = ("mutations", "primary", "start_ts", "lock_ttl_ms", "txn_size", "try_one_pc", "packed")
    MUTATIONS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    LOCK_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    TXN_SIZE_FIELD_NUMBER: _ClassVar[int]
    TRY_ONE_PC_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    mutations: _containers.RepeatedCompositeFieldContainer[Mutation]
    primary: bytes
    start_ts: int
    lock_ttl_ms: int
    txn_size: int
    try_one_pc: bool
    packed: MutationBatch
    def __init__(self, mutations: _Optional[_Iterable[_Union[Mutation, _Mapping]]] = ..., primary: _Optional[bytes] = ..., start_ts: _Optional[int] = ..., lock_ttl_ms: _Optional[int] = ..., txn_size: _Optional[int] = ..., try_one_pc: _Optional[bool] = ..., packed: _Optional[_Union[MutationBatch, _Mapping]] = ...) -> None: ...

class PrewriteResponse(_message.Message):
    __slots__ = ("errors", "one_pc_commit_ts")
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    ONE_PC_COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    errors: _containers.RepeatedCompositeFieldContainer[KeyError]
    one_pc_commit_ts: int
    def __init__(self, errors: _Optional[_Iterable[_Union[KeyError, _Mapping]]] = ..., one_pc_commit_ts: _Optional[int] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("start_ts", "commit_ts", "keys")
    START_TS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    start_ts: int
    commit_ts: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, start_ts: _Optional[int] = ..., commit_ts: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: KeyError
    def __init__(self, error: _Optional[_Union[KeyError, _Mapping]] = ...) -> None: ...

class RollbackRequest(_message.Message):
    __slots__ = ("start_ts", "keys")
    START_TS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    start_ts: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, start_ts: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class RollbackResponse(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: KeyError
    def __init__(self, error: _Optional[_Union[KeyError, _Mapping]] = ...) -> None: ...

class CheckTxnStatusRequest(_message.Message):
    __slots__ = ("primary_key", "lock_ts", "caller_start_ts", "rollback_if_not_exist")
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    LOCK_TS_FIELD_NUMBER: _ClassVar[int]
    CALLER_START_TS_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_IF_NOT_EXIST_FIELD_NUMBER: _ClassVar[int]
    primary_key: bytes
    lock_ts: int
    caller_start_ts: int
    rollback_if_not_exist: bool
    def __init__(self, primary_key: _Optional[bytes] = ..., lock_ts: _Optional[int] = ..., caller_start_ts: _Optional[int] = ..., rollback_if_not_exist: _Optional[bool] = ...) -> None: ...

class CheckTxnStatusResponse(_message.Message):
    __slots__ = ("status", "commit_ts", "lock", "error")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    LOCK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    status: TxnStatus
    commit_ts: int
    lock: LockInfo
    error: KeyError
    def __init__(self, status: _Optional[_Union[TxnStatus, str]] = ..., commit_ts: _Optional[int] = ..., lock: _Optional[_Union[LockInfo, _Mapping]] = ..., error: _Optional[_Union[KeyError, _Mapping]] = ...) -> None: ...

class ResolveLocksRequest(_message.Message):
    __slots__ = ("start_ts", "commit_ts", "keys")
    START_TS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    start_ts: int
    commit_ts: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, start_ts: _Optional[int] = ..., commit_ts: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ResolveLocksResponse(_message.Message):
    __slots__ = ("resolved_keys", "error")
    RESOLVED_KEYS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    resolved_keys: int
    error: KeyError
    def __init__(self, resolved_keys: _Optional[int] = ..., error: _Optional[_Union[KeyError, _Mapping]] = ...) -> None: ...

class TxnHeartbeatRequest(_message.Message):
    __slots__ = ("primary_key", "start_ts", "advise_ttl_ms")
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    START_TS_FIELD_NUMBER: _ClassVar[int]
    ADVISE_TTL_MS_FIELD_NUMBER: _ClassVar[int]
    primary_key: bytes
    start_ts: int
    advise_ttl_ms: int
    def __init__(self, primary_key: _Optional[bytes] = ..., start_ts: _Optional[int] = ..., advise_ttl_ms: _Optional[int] = ...) -> None: ...

class TxnHeartbeatResponse(_message.Message):
    __slots__ = ("ttl_ms", "error")
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ttl_ms: int
    error: KeyError
    def __init__(self, ttl_ms: _Optional[int] = ..., error: _Optional[_Union[KeyError, _Mapping]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("key", "version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    version: int
    def __init__(self, key: _Optional[bytes] = ..., version: _Optional[int] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("found", "value", "error")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: bytes
    error: KeyError
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[bytes] = ..., error: _Optional[_Union[KeyError, _Mapping]] = ...) -> None: ...

class ScanRequest(_message.Message):
    __slots__ = ("start_key", "end_key", "version", "limit", "chunk_rows")
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ROWS_FIELD_NUMBER: _ClassVar[int]
    start_key: bytes
    end_key: bytes
    version: int
    limit: int
    chunk_rows: int
    def __init__(self, start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ..., version: _Optional[int] = ..., limit: _Optional[int] = ..., chunk_rows: _Optional[int] = ...) -> None: ...

class ScanChunk(_message.Message):
    __slots__ = ("keys", "values", "error")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    values: _containers.RepeatedScalarFieldContainer[bytes]
    error: KeyError
    def __init__(self, keys: _Optional[_Iterable[bytes]] = ..., values: _Optional[_Iterable[bytes]] = ..., error: _Optional[_Union[KeyError, _Mapping]] = ...) -> None: ...

class KeyRange(_message.Message):
    __slots__ = ("start_key", "end_key")
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    start_key: bytes
    end_key: bytes
    def __init__(self, start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ...) -> None: ...

class ScanRangesRequest(_message.Message):
    __slots__ = ("ranges", "version", "limit", "range_limit")
    RANGES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    RANGE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[KeyRange]
    version: int
    limit: int
    range_limit: int
    def __init__(self, ranges: _Optional[_Iterable[_Union[KeyRange, _Mapping]]] = ..., version: _Optional[int] = ..., limit: _Optional[int] = ..., range_limit: _Optional[int] = ...) -> None: ...

class ScanChangesRequest(_message.Message):
    __slots__ = ("table", "from_ts", "to_ts", "chunk_rows")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    FROM_TS_FIELD_NUMBER: _ClassVar[int]
    TO_TS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ROWS_FIELD_NUMBER: _ClassVar[int]
    table: str
    from_ts: int
    to_ts: int
    chunk_rows: int
    def __init__(self, table: _Optional[str] = ..., from_ts: _Optional[int] = ..., to_ts: _Optional[int] = ..., chunk_rows: _Optional[int] = ...) -> None: ...

class Change(_message.Message):
    __slots__ = ("key", "has_old", "old_value", "has_new", "new_value", "commit_ts")
    KEY_FIELD_NUMBER: _ClassVar[int]
    HAS_OLD_FIELD_NUMBER: _ClassVar[int]
    OLD_VALUE_FIELD_NUMBER: _ClassVar[int]
    HAS_NEW_FIELD_NUMBER: _ClassVar[int]
    NEW_VALUE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    has_old: bool
    old_value: bytes
    has_new: bool
    new_value: bytes
    commit_ts: int
    def __init__(self, key: _Optional[bytes] = ..., has_old: _Optional[bool] = ..., old_value: _Optional[bytes] = ..., has_new: _Optional[bool] = ..., new_value: _Optional[bytes] = ..., commit_ts: _Optional[int] = ...) -> None: ...

class ChangeChunk(_message.Message):
    __slots__ = ("changes", "error")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[Change]
    error: KeyError
    def __init__(self, changes: _Optional[_Iterable[_Union[Change, _Mapping]]] = ..., error: _Optional[_Union[KeyError, _Mapping]] = ...) -> None: ...

class ResolvedTsRequest(_message.Message):
    __slots__ = ("table",)
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: str
    def __init__(self, table: _Optional[str] = ...) -> None: ...

class ResolvedTsResponse(_message.Message):
    __slots__ = ("resolved_ts",)
    RESOLVED_TS_FIELD_NUMBER: _ClassVar[int]
    resolved_ts: int
    def __init__(self, resolved_ts: _Optional[int] = ...) -> None: ...

class GcRequest(_message.Message):
    __slots__ = ("safepoint",)
    SAFEPOINT_FIELD_NUMBER: _ClassVar[int]
    safepoint: int
    def __init__(self, safepoint: _Optional[int] = ...) -> None: ...

class GcResponse(_message.Message):
    __slots__ = ("versions_removed",)
    VERSIONS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    versions_removed: int
    def __init__(self, versions_removed: _Optional[int] = ...) -> None: ...

class TableInfo(_message.Message):
    __slots__ = ("name", "id", "schema", "primary_key", "kind", "hidden_row_id", "created_ts", "recreated")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_ROW_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_TS_FIELD_NUMBER: _ClassVar[int]
    RECREATED_FIELD_NUMBER: _ClassVar[int]
    name: str
    id: int
    schema: str
    primary_key: _containers.RepeatedScalarFieldContainer[str]
    kind: str
    hidden_row_id: bool
    created_ts: int
    recreated: bool
    def __init__(self, name: _Optional[str] = ..., id: _Optional[int] = ..., schema: _Optional[str] = ..., primary_key: _Optional[_Iterable[str]] = ..., kind: _Optional[str] = ..., hidden_row_id: _Optional[bool] = ..., created_ts: _Optional[int] = ..., recreated: _Optional[bool] = ...) -> None: ...

class CreateTableRequest(_message.Message):
    __slots__ = ("name", "schema", "primary_key", "kind", "if_not_exists", "hidden_row_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    IF_NOT_EXISTS_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_ROW_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    schema: str
    primary_key: _containers.RepeatedScalarFieldContainer[str]
    kind: str
    if_not_exists: bool
    hidden_row_id: bool
    def __init__(self, name: _Optional[str] = ..., schema: _Optional[str] = ..., primary_key: _Optional[_Iterable[str]] = ..., kind: _Optional[str] = ..., if_not_exists: _Optional[bool] = ..., hidden_row_id: _Optional[bool] = ...) -> None: ...

class DropTableRequest(_message.Message):
    __slots__ = ("name", "if_exists", "cascade")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    CASCADE_FIELD_NUMBER: _ClassVar[int]
    name: str
    if_exists: bool
    cascade: bool
    def __init__(self, name: _Optional[str] = ..., if_exists: _Optional[bool] = ..., cascade: _Optional[bool] = ...) -> None: ...

class DropTableResponse(_message.Message):
    __slots__ = ("dropped", "also_dropped", "unregistered_jobs")
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    ALSO_DROPPED_FIELD_NUMBER: _ClassVar[int]
    UNREGISTERED_JOBS_FIELD_NUMBER: _ClassVar[int]
    dropped: bool
    also_dropped: _containers.RepeatedScalarFieldContainer[str]
    unregistered_jobs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, dropped: _Optional[bool] = ..., also_dropped: _Optional[_Iterable[str]] = ..., unregistered_jobs: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeTableRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListTablesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTablesResponse(_message.Message):
    __slots__ = ("tables",)
    TABLES_FIELD_NUMBER: _ClassVar[int]
    tables: _containers.RepeatedCompositeFieldContainer[TableInfo]
    def __init__(self, tables: _Optional[_Iterable[_Union[TableInfo, _Mapping]]] = ...) -> None: ...

class SplitRangeRequest(_message.Message):
    __slots__ = ("start_key", "end_key", "rows_per_split", "max_splits")
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    ROWS_PER_SPLIT_FIELD_NUMBER: _ClassVar[int]
    MAX_SPLITS_FIELD_NUMBER: _ClassVar[int]
    start_key: bytes
    end_key: bytes
    rows_per_split: int
    max_splits: int
    def __init__(self, start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ..., rows_per_split: _Optional[int] = ..., max_splits: _Optional[int] = ...) -> None: ...

class SplitRangeResponse(_message.Message):
    __slots__ = ("boundaries", "approx_rows")
    BOUNDARIES_FIELD_NUMBER: _ClassVar[int]
    APPROX_ROWS_FIELD_NUMBER: _ClassVar[int]
    boundaries: _containers.RepeatedScalarFieldContainer[bytes]
    approx_rows: int
    def __init__(self, boundaries: _Optional[_Iterable[bytes]] = ..., approx_rows: _Optional[int] = ...) -> None: ...

class ChangeBoundaryRequest(_message.Message):
    __slots__ = ("table", "from_ts", "to_ts", "max_changes")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    FROM_TS_FIELD_NUMBER: _ClassVar[int]
    TO_TS_FIELD_NUMBER: _ClassVar[int]
    MAX_CHANGES_FIELD_NUMBER: _ClassVar[int]
    table: str
    from_ts: int
    to_ts: int
    max_changes: int
    def __init__(self, table: _Optional[str] = ..., from_ts: _Optional[int] = ..., to_ts: _Optional[int] = ..., max_changes: _Optional[int] = ...) -> None: ...

class ChangeBoundaryResponse(_message.Message):
    __slots__ = ("ts", "changes")
    TS_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    ts: int
    changes: int
    def __init__(self, ts: _Optional[int] = ..., changes: _Optional[int] = ...) -> None: ...
