"""What the primary-key index refuses, as kinds of the engine's one root exception."""

from __future__ import annotations

from replicator.errors import ReplicatorError, TerminalError

__all__ = ["DuplicateKeyError", "IndexCorruptError", "StaleIndexError"]


class StaleIndexError(ReplicatorError):
    """The index is not valid for the table state asked about (another snapshot, a live file
    set it does not match): catch it up or rebuild it from the table, never answer from it."""


class IndexCorruptError(ReplicatorError):
    """The index on disk is missing, torn or of another format: rebuild it from the table."""


class DuplicateKeyError(TerminalError):
    """Two live rows would hold one key: the index (and the table) cannot tell which to delete."""
