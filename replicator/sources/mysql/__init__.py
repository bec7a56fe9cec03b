"""MySQL / MariaDB source: binlog row events (mysql-replication) -> ChangeEvents.

Modules: ``setup`` (DSN, connections, pre-flight checks), ``types`` (type mapping and value
converters for binlog and snapshot), ``schema_history`` (DDL parsing; what the binlog does not
say about columns), ``snapshot`` (consistent initial snapshot and its resume state),
``stream`` (binlog events -> transactions and positions), ``framing`` (which transaction a
binlog event belongs to), ``position`` (``BinlogPosition``/``BinlogPoint``), ``emit``
(events, dead letters, counters), ``compat`` (fixes to mysql-replication), ``source``
(``MySQLSource``: start/resume planning, poll, acknowledge) with ``snapshot_phase`` (its
snapshot half), ``incremental`` (tables copied while streaming, MariaDB).
"""

from replicator.sources.mysql.emit import SourceStats
from replicator.sources.mysql.source import MySQLSource

__all__ = ["MySQLSource", "SourceStats"]
