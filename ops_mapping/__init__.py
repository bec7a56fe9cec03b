"""Pure mapping of one table's ordered CDC events of one batch to Iceberg v2 writes.

No I/O: in go Arrow RecordBatches of events (see ``contract``), out come data rows assigned to
data files by index, equality deletes (key columns) and sorted position deletes. The caller
writes the files and commits them as one Iceberg commit.
"""

from ops_mapping.contract import (
    AFTER_KEY_IN_TABLE_COLUMN,
    BEFORE_KEY_PREFIX,
    OP_COLUMN,
    SEQ_COLUMN,
    DataSlice,
    MappedChunk,
    MappedTail,
    MappingPolicy,
    MappingStats,
    before_key_column,
)
from ops_mapping.errors import OpsMappingError
from ops_mapping.key_map import KeyPositionMap
from ops_mapping.mapper import BatchMapper
from ops_mapping.multiset import MultisetMapper

__all__ = [
    "AFTER_KEY_IN_TABLE_COLUMN",
    "BEFORE_KEY_PREFIX",
    "OP_COLUMN",
    "SEQ_COLUMN",
    "BatchMapper",
    "DataSlice",
    "KeyPositionMap",
    "MappedChunk",
    "MappedTail",
    "MappingPolicy",
    "MappingStats",
    "MultisetMapper",
    "OpsMappingError",
    "before_key_column",
]
