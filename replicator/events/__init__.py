"""Change events: the typed, source-independent shape every reader produces."""

from replicator.events.model import (
    ChangeBatch,
    ChangeEvent,
    ColumnSpec,
    Op,
    SourcePosition,
    TableSchema,
)

__all__ = ["ChangeBatch", "ChangeEvent", "ColumnSpec", "Op", "SourcePosition", "TableSchema"]
