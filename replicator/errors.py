"""One root exception with transient and terminal kinds.

Transient errors (a catalog commit conflict, a dropped connection) may succeed on retry;
terminal errors (bad config, an unrepresentable value, an incompatible schema change) need a
person. Every error names what it is about (table, key, position) where it knows it.
"""

from __future__ import annotations

from typing import Any


class ReplicatorError(Exception):
    """Root of every error the engine raises on purpose."""

    transient: bool = False

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        key: Any = None,
        position: Any = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.table = table
        self.key = key
        self.position = position
        self.hint = hint
        super().__init__(self.describe())

    def describe(self) -> str:
        parts = [self.message]
        where = []
        if self.table is not None:
            where.append(f"table={self.table}")
        if self.key is not None:
            where.append(f"key={self.key!r}")
        if self.position is not None:
            where.append(f"position={self.position}")
        if where:
            parts.append("(" + ", ".join(where) + ")")
        if self.hint:
            parts.append(f"\n  hint: {self.hint}")
        return " ".join(parts)


class TransientError(ReplicatorError):
    """May succeed when retried (commit conflict, lost connection, lock timeout)."""

    transient = True


class TerminalError(ReplicatorError):
    """Will not succeed by retrying; a person must change something."""


class ConfigError(TerminalError):
    """The configuration file is missing, malformed or inconsistent."""


class BadInputError(TerminalError):
    """An input record cannot be parsed or mapped; goes to the dead-letter file."""


class SchemaChangeError(TerminalError):
    """A source schema change that cannot be applied to the Iceberg table."""


class SourceSetupError(TerminalError):
    """The source database is not set up for CDC; the hint says what to change."""


class CommitConflictError(TransientError):
    """The catalog refused the commit because the table moved underneath us."""


class CommitStateUnknownError(TransientError):
    """The catalog's answer to a commit was lost: it may or may not have taken it. The
    table's checkpoint tells which (see ``replicator.commit``)."""


class MissingFileError(TerminalError):
    """A file the table's current snapshot references is gone from storage: the table is
    damaged (a file removed by hand, a broken expiry), not merely moved on."""


class FencedError(TerminalError):
    """Another writer owns this table/slot; this one must stop instead of duplicating."""


class StorageUnavailableError(TransientError):
    """Object storage failed in a way that may pass: throttling, 5xx, a timeout, a reset."""


class CatalogUnavailableError(TransientError):
    """The Iceberg catalog failed in a way that may pass: 5xx, 429, a timeout, a reset."""


class TokenExpiredError(CatalogUnavailableError):
    """The catalog refused an expired token; a new one is fetched before the next try."""
