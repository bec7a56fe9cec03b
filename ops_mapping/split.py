"""Split one table's staged batch by key hash into shards that map independently.

A batch mapped as N shards, each through its own ``BatchMapper`` writing its own files, and
committed as ONE snapshot equals the batch mapped whole when no key's events span two shards:
each key's events stay in one shard, in their order (rows are taken, never reordered), so a
shard's position deletes name only its own files and its equality deletes only its own keys.

A row is routed by its key: the before key of a 'u'/'d', the after key of a 'c'/'r'. An update
that changes the key touches two keys (and, under a deferred unique check, a chain of them:
``u 1->2, u 2->1``), so a batch with any key change is not split (one shard: today's single
ordered task). Neither is a batch carrying the after-key-in-table column (only key changes
need it).

The hash is stable (pandas' ``hash_array``: SipHash with a fixed key, the same in every
process and run), though correctness needs only that one batch is split in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pandas.util import hash_array

from ops_mapping.contract import AFTER_KEY_IN_TABLE_COLUMN, OP_COLUMN, before_key_column

_FALSE = pa.scalar(False)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # a 64-bit odd constant to mix composite keys


def changes_a_key(staged: pa.Table, key_columns: Sequence[str]) -> bool:
    """Whether some 'u' of ``staged`` moves its row to another key."""
    if AFTER_KEY_IN_TABLE_COLUMN in staged.column_names:
        return True
    is_update = pc.equal(staged.column(OP_COLUMN), "u")
    for k in key_columns:
        moved = pc.fill_null(pc.not_equal(staged.column(before_key_column(k)), staged.column(k)), _FALSE)
        if pc.any(pc.and_(is_update, moved)).as_py():
            return True
    return False


def shard_of_rows(staged: pa.Table, key_columns: Sequence[str], shards: int) -> np.ndarray:
    """The shard (0..shards-1) of every row: a stable hash of its routing key."""
    is_delete_or_update = pc.is_in(staged.column(OP_COLUMN), pa.array(["u", "d"]))
    combined = np.zeros(staged.num_rows, dtype=np.uint64)
    for k in key_columns:
        key = pc.if_else(is_delete_or_update, staged.column(before_key_column(k)), staged.column(k))
        values = key.to_numpy(zero_copy_only=False)
        if values.dtype.kind in "US":
            values = values.astype(object)
        elif values.dtype.kind == "f":
            values = values + 0.0  # -0.0 is the key 0.0 (equal keys, one shard)
        hashed = hash_array(values, categorize=False)
        combined = (combined * _MIX) ^ hashed
    return (combined % np.uint64(shards)).astype(np.int64)


def split_by_key(staged: pa.Table, key_columns: Sequence[str], shards: int) -> list[pa.Table]:
    """``staged`` as up to ``shards`` tables, each key's rows in one of them in their order;
    ``[staged]`` when it must stay whole (one shard asked for, no rows, a key change). Empty
    shards are left out."""
    if shards <= 1 or staged.num_rows == 0 or not key_columns or changes_a_key(staged, key_columns):
        return [staged]
    of_row = shard_of_rows(staged, key_columns, shards)
    out = []
    for s in range(shards):
        rows = np.flatnonzero(of_row == s)
        if len(rows):
            out.append(staged.take(pa.array(rows)))
    return out
