"""The primary-key index: key -> (live data file, row position) for one Iceberg table, kept on
local disk with ~1.3 bytes a key resident, valid for one snapshot at a time (``pk_index.py``)."""

from replicator.index.errors import DuplicateKeyError, IndexCorruptError, StaleIndexError
from replicator.index.pk_index import FileMove, FileRows, Lookup, PrimaryKeyIndex

__all__ = [
    "DuplicateKeyError",
    "FileMove",
    "FileRows",
    "IndexCorruptError",
    "Lookup",
    "PrimaryKeyIndex",
    "StaleIndexError",
]
