"""PostgreSQL source: pgoutput logical decoding -> ChangeEvents.

Modules: ``pgoutput`` (pure protocol decoder), ``types`` (type mapping and converters),
``setup`` (checks, publication, fencing), ``replication`` (streaming protocol client),
``snapshot`` (initial snapshot and its resume state), ``toast`` (unchanged TOAST values),
``position`` (``PgPosition``), ``source`` (``PostgresSource``) with ``snapshot_phase`` (its
snapshot half), ``incremental`` (tables copied while streaming).
"""

from replicator.sources.postgres.source import PostgresSource, SourceStats

__all__ = ["PostgresSource", "SourceStats"]
