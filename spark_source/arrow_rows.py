"""Store rows and changes as Arrow record batches shaped for Spark."""

from __future__ import annotations

import pyarrow as pa

from kvstore.results import ChangeRecord
from kvstore.table_info import TableInfo
from spark_source.options import CHANGE_TYPE, COMMIT_TS

INSERT, PRE, POST, DELETE = "insert", "update_preimage", "update_postimage", "delete"


def change_schema(info: TableInfo) -> pa.Schema:
    base = info.table_schema.arrow_schema()
    return base.append(pa.field(CHANGE_TYPE, pa.string(), nullable=False)).append(
        pa.field(COMMIT_TS, pa.int64(), nullable=False)
    )


def snapshot_as_changes(info: TableInfo, values: list[bytes], ts: int) -> pa.RecordBatch:
    """A snapshot chunk as change rows: every row an insert at ``ts`` (a stream's first batch)."""
    batch = info.row_codec.decode_arrow(values)
    n = batch.num_rows
    return pa.RecordBatch.from_arrays(
        [*batch.columns, pa.array([INSERT] * n, pa.string()), pa.array([ts] * n, pa.int64())],
        schema=change_schema(info),
    )


def changes_to_arrow(info: TableInfo, changes: list[ChangeRecord]) -> pa.RecordBatch:
    """Delta-CDF-shaped rows: insert, update_preimage + update_postimage, or delete per key."""
    images: list[bytes] = []
    kinds: list[str] = []
    tss: list[int] = []
    for c in changes:
        old, new = c.old, c.new
        if old is None:
            assert new is not None, "a net change has an old or a new value"
            images.append(new)
            kinds.append(INSERT)
            tss.append(c.commit_ts)
        elif new is None:
            images.append(old)
            kinds.append(DELETE)
            tss.append(c.commit_ts)
        else:
            images += [old, new]
            kinds += [PRE, POST]
            tss += [c.commit_ts, c.commit_ts]
    batch = info.row_codec.decode_arrow(images)
    return pa.RecordBatch.from_arrays(
        [*batch.columns, pa.array(kinds, pa.string()), pa.array(tss, pa.int64())],
        schema=change_schema(info),
    )
