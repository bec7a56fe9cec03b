"""Verification: compare a source database's tables with their Iceberg tables.

Modules: ``digest`` (pure: canonical row encoding, range digests, row diff), ``sides`` (what
a source side provides), ``postgres_side`` / ``mysql_side`` (consistent snapshot, ordered
range scans, the engine's progress, keys changed after the snapshot), ``iceberg_side`` (the
pinned snapshot, digests and rows through Spark/Iceberg Java), ``diff`` (orchestration and
the consistency rule), ``report`` (text and JSON), ``model`` (results).
"""

from typing import TYPE_CHECKING

from replicator.verify.model import (
    EXIT_CANNOT_DIFF,
    EXIT_DIFFERS,
    EXIT_MATCH,
    DiffError,
    DiffReport,
    TableResult,
)

if TYPE_CHECKING:
    from replicator.verify.diff import run_diff

__all__ = [
    "EXIT_CANNOT_DIFF",
    "EXIT_DIFFERS",
    "EXIT_MATCH",
    "DiffError",
    "DiffReport",
    "TableResult",
    "run_diff",
]


def __getattr__(name: str) -> object:
    # Lazy: importing the package must not pull in psycopg/pyiceberg for the pure modules.
    if name == "run_diff":
        from replicator.verify.diff import run_diff

        return run_diff
    raise AttributeError(name)
