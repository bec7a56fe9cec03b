"""Binlog transaction framing: which transaction a binlog event belongs to, the one
definition both the stream (``stream.py``) and the diff (``verify.mysql_side``) use.

A transaction starts at its GTID event (MariaDB; MySQL with GTIDs), else at its ``BEGIN``
query; that offset is the ``pos`` of a ``BinlogPosition``. It ends at its XID event or
``COMMIT`` query; a group that is not explicit (a MySQL GTID without ``BEGIN`` yet, a MariaDB
standalone GTID, no GTID at all) ends after its single statement.
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.constants import BINLOG

_MARIADB_FL_STANDALONE = 1  # GTID event flag: a single statement without BEGIN/COMMIT
# Event type codes: the library's event objects and the stream's own (``binlog_reader``)
# both carry ``event_type``.
_GTID, _MARIADB_GTID = BINLOG.GTID_LOG_EVENT, BINLOG.MARIADB_GTID_EVENT
_QUERY, _XID = BINLOG.QUERY_EVENT, BINLOG.XID_EVENT


def event_offset(ev: Any) -> int:
    """Where the event starts in its binlog file."""
    pkt = ev.packet
    return int(pkt.log_pos - pkt.event_size)


def opens_explicit_group(ev: Any) -> bool:
    """A GTID event whose group ends at XID / COMMIT (MariaDB, not standalone); a MySQL GTID
    event's group becomes explicit at its ``BEGIN``."""
    return ev.event_type == _MARIADB_GTID and not bool(ev.flags & _MARIADB_FL_STANDALONE)


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
        t = ev.event_type
        here = event_offset(ev)
        if t in (_GTID, _MARIADB_GTID):
            self.begin, self.explicit = here, opens_explicit_group(ev)
            return here
        start = here if self.begin is None else self.begin
        if t == _XID:
            self.begin = None
        elif t == _QUERY:
            if is_begin(ev.query):
                self.begin, self.explicit = start, True
            elif is_commit(ev.query) or not self.explicit:  # COMMIT, or a single statement
                self.begin = None
        return start
