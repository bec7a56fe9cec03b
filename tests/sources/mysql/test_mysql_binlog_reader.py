"""The stream's own binlog reader (``binlog_reader.FastReader``) against mysql-replication's
``fetchone`` over the same binlog: the same events in the same order, the same fields the
stream reads (positions, GTIDs, queries, schemas, table ids, row images and bitmaps, rotation),
the same ``log_file``/``log_pos`` after each, and a lost connection resumed where it was."""

from __future__ import annotations

import io
import itertools
from typing import Any

import pytest
from mysql_testkit import TestDb

from replicator.sources.mysql import compat, setup
from replicator.sources.mysql.binlog_reader import Event, FastReader
from replicator.sources.mysql.stream import _EVENTS

pytestmark = pytest.mark.integration
_ids = itertools.count(6100)


def _library(db: TestDb, start: tuple[str, int]) -> Any:
    from pymysqlreplication import BinLogStreamReader

    compat.install()
    return BinLogStreamReader(
        connection_settings=setup.parse_dsn(db.dsn).replication_settings(), server_id=next(_ids),
        resume_stream=True, blocking=False, log_file=start[0], log_pos=start[1], only_events=_EVENTS,
        freeze_schema=False, enable_logging=False, pymysql_wrapper=compat.connect,
    )  # fmt: skip


def _fields(ev: Any) -> tuple[Any, ...]:
    """What the stream reads of an event, from either reader."""
    t = ev.event_type
    pkt = ev.packet
    out: list[Any] = [t, pkt.log_pos, pkt.event_size, ev.timestamp]
    if t == 19:
        out += [ev.table_id, ev.schema, ev.table, [c.name for c in ev.columns]]
    elif t in (23, 24, 25, 30, 31, 32):
        body = (ev.body, ev.present, ev.present2) if type(ev) is Event else compat.rows_body(ev)
        out += [ev.table_id, body]
    elif t == 2:
        out += [ev.query, bytes(ev.schema)]
    elif t == 162:
        out += [ev.gtid, ev.flags]
    elif t == 33:
        out += [ev.gtid]
    elif t == 4:
        out += [ev.next_binlog, ev.position]
    return tuple(out)


def _read(reader: Any) -> list[tuple[Any, ...]]:
    out = []
    while (ev := reader.fetchone()) is not None:
        out.append((_fields(ev), reader.log_file, reader.log_pos))
    reader.close()
    return out


def _workload(db: TestDb) -> None:
    db.sql(
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(300), d DECIMAL(12,2), t DATETIME(3))",
        "CREATE TABLE b (k1 INT, k2 VARCHAR(5), n BIGINT UNSIGNED, PRIMARY KEY (k1, k2))",
    )
    db.sql("INSERT INTO a VALUES (1, 'x', 1.50, '2024-01-01 00:00:00.123'), (2, NULL, NULL, NULL)")
    db.tx(
        "INSERT INTO b VALUES (1, 'é', 18446744073709551615)",
        "UPDATE a SET v = REPEAT('y', 300) WHERE id = 1",
        "DELETE FROM a WHERE id = 2",
    )
    db.sql("FLUSH BINARY LOGS")
    db.sql("ALTER TABLE a ADD COLUMN extra INT", "INSERT INTO a VALUES (3, 'z', 2, NULL, 7)")
    db.sql("INSERT INTO a SELECT seq, 'w', seq, NULL, seq FROM seq_10_to_400")
    db.sql("TRUNCATE TABLE b")
    # Two table maps with the same body, written at different times (the reader builds the
    # event for a body once: each must still carry its own header).
    db.sql("SET timestamp = 1700000000", "INSERT INTO a VALUES (900, 'p', 1, NULL, 1)",
           "SET timestamp = 1700000007", "INSERT INTO a VALUES (901, 'q', 2, NULL, 2)")  # fmt: skip


def test_the_fast_reader_reads_what_the_library_reads(db: TestDb) -> None:
    start = tuple(setup.master_status(db.connect()))
    _workload(db)
    want = _read(_library(db, start))
    got = _read(FastReader(_library(db, start)))
    assert len(want) > 30
    assert {f[0][0] for f in want} >= {2, 4, 16, 19, 162} and {f[0][0] for f in want} & {23, 30}
    assert got == want


def test_a_lost_connection_is_resumed_at_the_last_event(db: TestDb) -> None:
    """As ``fetchone``: the stream connection lost mid-binlog (error 2013) is opened again at
    the last event read (the server starts the new dump with a rotation to that point), and
    reading goes on with the next event."""
    start = tuple(setup.master_status(db.connect()))
    _workload(db)

    def read(fast: bool) -> tuple[list[Any], list[Any]]:
        lib = _library(db, start)
        connects: list[Any] = []
        connect = lib._BinLogStreamReader__connect_to_stream

        def counted() -> None:
            connects.append(lib.log_pos)
            connect()

        lib._BinLogStreamReader__connect_to_stream = counted
        reader = FastReader(lib) if fast else lib
        got = []
        for i in itertools.count():
            ev = reader.fetchone()
            if ev is None:
                break
            got.append((_fields(ev), reader.log_file, reader.log_pos))
            if i in (3, 17):
                lib._stream_connection._rfile = io.BytesIO(b"")  # the next read comes up short
        reader.close()
        return got, connects

    want, want_connects = read(fast=False)
    got, connects = read(fast=True)
    assert got == want
    assert connects == want_connects and len(connects) == 3
    assert [f[0][0] for f in got].count(4) == [f[0][0] for f in _read(_library(db, start))].count(4) + 2
