"""Binlog transaction framing: which transaction a binlog event belongs to, the one
definition both the stream (``stream.py``) and the diff (``verify.mysql_side``) use.

A transaction starts at its GTID event (MariaDB; MySQL with GTIDs), else at its ``BEGIN``
query; that offset is the ``pos`` of a ``BinlogPosition``. It ends at its XID event or
``COMMIT`` query; a group that is not explicit (a MySQL GTID without ``BEGIN`` yet, a MariaDB
standalone GTID, no GTID at all) ends after its single statement.
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent

_MARIADB_FL_STANDALONE = 1  # GTID event flag: a single statement without BEGIN/COMMIT


def event_offset(ev: Any) -> int:
    """Where the event starts in its binlog file."""
    pkt = ev.packet
    return int(pkt.log_pos - pkt.event_size)


def opens_explicit_group(ev: Any) -> bool:
    """A GTID event whose group ends at XID / COMMIT (MariaDB, not standalone); a MySQL GTID
    event's group becomes explicit at its ``BEGIN``."""
    return type(ev) is MariadbGtidEvent and not bool(ev.flags & _MARIADB_FL_STANDALONE)


def is_begin(query: str) -> bool:
    return query.strip()[:5].upper() == "BEGIN"


def is_commit(query: str) -> bool:
    return query.strip()[:6].upper() == "COMMIT"


class TxStarts:
    """Follows the binlog event by event: the start of each event's transaction (a reader
    that needs no more of the transaction than where it starts)."""

    def __init__(self) -> None:
        self.begin: int | None = None  # the open transaction's start
        self.explicit = False

    def see(self, ev: Any) -> int:
        """The start of ``ev``'s transaction (an event outside any: its own offset)."""
        t = type(ev)
        here = event_offset(ev)
        if t is GtidEvent or t is MariadbGtidEvent:
            self.begin, self.explicit = here, opens_explicit_group(ev)
            return here
        start = here if self.begin is None else self.begin
        if t is XidEvent:
            self.begin = None
        elif t is QueryEvent:
            if is_begin(ev.query):
                self.begin, self.explicit = start, True
            elif is_commit(ev.query) or not self.explicit:  # COMMIT, or a single statement
                self.begin = None
        return start
