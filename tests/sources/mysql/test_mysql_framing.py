"""Binlog transaction framing (``framing.TxStarts``), the rule the stream's positions and the
diff's reading of the binlog share, over hand-made events (no server)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import WriteRowsEvent

from replicator.sources.mysql.framing import TxStarts

_TYPES = {MariadbGtidEvent: 162, GtidEvent: 33, QueryEvent: 2, XidEvent: 16, WriteRowsEvent: 30}


def _ev(cls: type, at: int, **attrs: Any) -> Any:
    """The library's event object, as its constructor leaves what the framing reads (the
    stream's own events, ``binlog_reader.Event``, carry the same fields)."""
    ev: Any = object.__new__(cls)
    ev.__dict__.update(packet=SimpleNamespace(log_pos=at + 10, event_size=10),
                       event_type=_TYPES[cls], **attrs)  # fmt: skip
    return ev


def test_each_event_belongs_to_the_transaction_started_by_its_gtid_or_begin() -> None:
    starts = TxStarts()
    events = [
        _ev(MariadbGtidEvent, 100, flags=0),  # MariaDB: explicit group
        _ev(QueryEvent, 110, query="BEGIN"),
        _ev(WriteRowsEvent, 120),
        _ev(XidEvent, 130),
        _ev(MariadbGtidEvent, 200, flags=1),  # standalone: one statement
        _ev(QueryEvent, 210, query="CREATE TABLE t (id int)"),
        _ev(GtidEvent, 300),  # MySQL: explicit from its BEGIN on
        _ev(QueryEvent, 310, query=" begin"),
        _ev(QueryEvent, 320, query="INSERT INTO t VALUES (1)"),  # statement inside: no end
        _ev(WriteRowsEvent, 330),
        _ev(QueryEvent, 340, query="COMMIT"),
        _ev(QueryEvent, 400, query="BEGIN"),  # no GTIDs
        _ev(WriteRowsEvent, 410),
        _ev(XidEvent, 420),
        _ev(WriteRowsEvent, 500),  # outside any transaction: its own start
    ]
    assert [starts.see(e) for e in events] == [
        100, 100, 100, 100, 200, 200, 300, 300, 300, 300, 300, 400, 400, 400, 500
    ]
    assert starts.begin is None
