"""Streaming: order, transactions, schema changes, resume, rotation, purged binlogs."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from itertools import groupby
from typing import Any

import pytest
from mysql_testkit import TestDb, drain, summary

from replicator.checkpoint import Checkpoints
from replicator.errors import SchemaChangeError, TerminalError
from replicator.events.block import row_events
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.sources.mysql import MySQLSource
from replicator.sources.mysql.stream import ROW_SHIFT, BinlogStream

pytestmark = pytest.mark.integration


def _tables(db: TestDb) -> None:
    db.sql(
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TABLE b (k1 INT, k2 INT, v VARCHAR(20), PRIMARY KEY (k2, k1))",
        "CREATE TABLE other (id INT PRIMARY KEY)",
    )


def _started(db: TestDb, make_source: Callable[..., MySQLSource], **kw: Any) -> MySQLSource:
    src = make_source(db, tables=[f"{db.name}.a", f"{db.name}.b"], **kw)
    src.start(Checkpoints.at(kw.pop("committed", {})))
    assert drain(src) == []
    return src


def _workload(db: TestDb) -> None:
    db.sql("INSERT INTO a VALUES (1, 'one')")
    db.tx(
        "INSERT INTO a VALUES (2, 'two')",
        "INSERT INTO b VALUES (1, 1, 'b11')",
        "INSERT INTO other VALUES (1)",
        "UPDATE a SET v = 'uno' WHERE id = 1",
        "UPDATE b SET k2 = 2 WHERE k1 = 1 AND k2 = 1",
        "DELETE FROM a WHERE id = 2",
    )
    db.sql("INSERT INTO a VALUES (3, 'x'), (4, 'y'), (5, 'z')")
    db.sql("UPDATE a SET v = 'w' WHERE id >= 3")
    db.sql("DELETE FROM a WHERE id > 3")


@pytest.mark.parametrize("blocks", [0, 1])
def test_order_transactions_and_images(
    db: TestDb, make_source: Callable[..., MySQLSource], blocks: int
) -> None:
    """Row by row (``change_blocks`` 0) and as blocks (taken as their rows): the same
    changes; a block's old image is its key (all the pipeline reads of it)."""
    _tables(db)
    src = _started(db, make_source, change_blocks=blocks)
    _workload(db)
    evs = drain(src)
    t = f"{db.name}."
    assert [(e.table, e.op.value) for e in evs] == [
        (t + "a", "c"),
        (t + "a", "c"),
        (t + "b", "c"),
        (t + "a", "u"),
        (t + "b", "u"),
        (t + "a", "d"),
        (t + "a", "c"),
        (t + "a", "c"),
        (t + "a", "c"),
        (t + "a", "u"),
        (t + "a", "u"),
        (t + "a", "u"),
        (t + "a", "d"),
        (t + "a", "d"),
    ]
    groups = [list(g) for _, g in groupby(evs, key=lambda e: e.tx_id)]
    assert [len(g) for g in groups] == [1, 5, 3, 3, 2]
    for g in groups:
        assert [e.last_in_tx for e in g] == [False] * (len(g) - 1) + [True]
        assert len({e.position.parts[1] for e in g}) == 1  # one transaction start
    assert len({e.tx_id for e in evs}) == 5
    assert all(re.fullmatch(r"\d+-\d+-\d+", e.tx_id or "") for e in evs)  # MariaDB GTIDs
    positions = [e.position for e in evs]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # rows of one statement share a rows event; the unselected table's event still counts
    tx2 = [e.position.parts[2] for e in groups[1]]
    assert [p >> ROW_SHIFT for p in tx2] == [0, 1, 3, 4, 5]
    assert [p >> ROW_SHIFT for p in (e.position.parts[2] for e in groups[2])] == [0, 0, 0]
    # images
    upd_b = groups[1][3]
    old_b = {"k1": 1, "k2": 1, "v": "b11"} if not blocks else {"k1": 1, "k2": 1}
    assert upd_b.before == old_b and upd_b.after == {
        "k1": 1,
        "k2": 2,
        "v": "b11",
    }
    assert upd_b.schema_ is not None and upd_b.schema_.key_columns == ("k1", "k2")
    old_a = {"id": 2, "v": "two"} if not blocks else {"id": 2}
    assert groups[1][4].before == old_a and groups[1][4].after is None
    assert all(e.ts_ms and e.ts_ms > 1_600_000_000_000 for e in evs)
    # the unvalidated fast constructor builds the same events as the validated one
    for e in evs:
        again = ChangeEvent(
            table=e.table,
            op=e.op,
            before=e.before,
            after=e.after,
            position=SourcePosition(source="mysql", parts=e.position.parts),
            schema=e.schema_,
            ts_ms=e.ts_ms,
            tx_id=e.tx_id,
            last_in_tx=e.last_in_tx,
        )
        assert (
            again == e and again.position == e.position and hash(again.position) == hash(e.position)
        )


def test_resume_inside_a_transaction_reproduces_the_rest(
    db: TestDb, make_source: Callable[..., MySQLSource]
) -> None:
    _tables(db)
    src = _started(db, make_source)
    _workload(db)
    evs = drain(src)
    src.close()
    for k in (0, 2, 3, 5, 7, len(evs) - 1):  # inside and at the end of transactions
        pos = evs[k].position
        again = make_source(db, tables=[f"{db.name}.a", f"{db.name}.b"])
        again.start(Checkpoints.at({f"{db.name}.a": pos, f"{db.name}.b": pos}))
        assert summary(drain(again)) == summary(evs[k + 1 :]), k
        again.close()
    # per-table positions: b committed further than a
    again = make_source(db, tables=[f"{db.name}.a", f"{db.name}.b"])
    again.start(Checkpoints.at({f"{db.name}.a": evs[0].position, f"{db.name}.b": evs[4].position}))
    want = [e for e in evs[1:] if e.table.endswith(".a") or e.position > evs[4].position]
    assert summary(drain(again)) == summary(want)


@pytest.mark.parametrize("blocks", [0, 1])
def test_consumer_stopping_mid_event_loses_nothing(
    db: TestDb, make_source: Callable[..., MySQLSource], blocks: int
) -> None:
    """Stopping inside a rows event (row by row) or inside a poll's group of blocks (the
    first statement's block taken, the second's not yet): the rest comes next."""
    _tables(db)
    src = _started(db, make_source, change_blocks=blocks)
    db.sql(
        "INSERT INTO a VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')",
        "INSERT INTO a VALUES (5, 'e')",
    )
    gen = src.poll()
    first = row_events([next(gen)] if blocks else [next(gen), next(gen)])
    gen.close()  # e.g. the pipeline stops after a batch
    rest = drain(src)
    assert len(rest) == (1 if blocks else 3)
    assert [e.after["id"] for e in first + rest if e.after] == [1, 2, 3, 4, 5]
    assert [e.last_in_tx for e in first + rest] == [False, False, False, True, True]


def test_schema_changes_mid_stream(db: TestDb, make_source: Callable[..., MySQLSource]) -> None:
    db.sql("CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1)")
    src = make_source(db, tables=[f"{db.name}.t"])
    src.start(Checkpoints.at({}))
    snap = drain(src)
    db.sql(
        "ALTER TABLE t ADD COLUMN extra VARCHAR(10) AFTER id, ADD COLUMN flag BOOLEAN, "
        "ADD COLUMN doc JSON",
        "INSERT INTO t VALUES (2, 'x', 2, 1, '{\"a\": [1, 2]}')",
        "ALTER TABLE t MODIFY v BIGINT",
        "UPDATE t SET v = 10000000000 WHERE id = 2",
        "ALTER TABLE t DROP COLUMN extra",
        "INSERT INTO t (id, v) VALUES (3, 3)",
        "ALTER TABLE t CHANGE flag enabled TINYINT(1)",
        "INSERT INTO t VALUES (4, 4, 0, NULL)",
    )
    evs = drain(src)

    def cols(e: ChangeEvent) -> list[tuple[str, str]]:
        assert e.schema_ is not None
        return [(c.name, c.type) for c in e.schema_.columns]

    assert cols(snap[0]) == [("id", "int"), ("v", "int")]
    assert cols(evs[0]) == [
        ("id", "int"),
        ("extra", "string"),
        ("v", "int"),
        ("flag", "boolean"),
        ("doc", "string"),
    ]
    assert evs[0].after == {"id": 2, "extra": "x", "v": 2, "flag": True, "doc": '{"a":[1,2]}'}
    assert cols(evs[1])[2] == ("v", "long") and evs[1].after["v"] == 10_000_000_000  # type: ignore[index]
    assert cols(evs[2]) == [("id", "int"), ("v", "long"), ("flag", "boolean"), ("doc", "string")]
    assert cols(evs[3]) == [("id", "int"), ("v", "long"), ("enabled", "boolean"), ("doc", "string")]
    assert evs[3].after == {"id": 4, "v": 4, "enabled": False, "doc": None}
    assert evs[0].schema_ is not evs[1].schema_ and evs[1].schema_ is not None


def test_rename_drop_and_truncate(db: TestDb, make_source: Callable[..., MySQLSource]) -> None:
    db.sql("CREATE TABLE t (id INT PRIMARY KEY)", "CREATE TABLE u (id INT PRIMARY KEY)")
    src = make_source(db, tables=[f"{db.name}.t", f"{db.name}.u"])
    src.start(Checkpoints.at({}))
    drain(src)
    db.sql(
        "INSERT INTO t VALUES (1)",
        "TRUNCATE TABLE t",
        "INSERT INTO t VALUES (2)",
        "RENAME TABLE t TO t_old",
        "INSERT INTO t_old VALUES (3)",
    )
    got: list[ChangeEvent] = []
    with pytest.raises(SchemaChangeError) as err:
        for e in src.poll():
            got.append(e)
    assert [e.after["id"] for e in got if e.after] == [1, 2]
    assert [e.op.value for e in got] == ["c", "t", "c"]  # TRUNCATE is an event in between
    assert err.value.table == f"{db.name}.t" and "renamed to" in err.value.message
    assert "source.tables" in (err.value.hint or "") and err.value.position is not None
    assert src.stats.truncates == 1 and src.dead_letters.total == 0
    # a restart from before the rename stops at the same statement again
    again = make_source(db, tables=[f"{db.name}.u"])  # t no longer exists: take it out
    again.start(Checkpoints.at({f"{db.name}.u": got[-1].position}))
    db.sql("DROP TABLE u")
    with pytest.raises(SchemaChangeError, match="dropped"):
        drain(again)


def _flush(db: TestDb, until: int) -> None:
    while True:
        name = db.sql("SHOW MASTER STATUS")[0][0]
        if int(str(name).rsplit(".", 1)[1]) >= until:
            return
        db.sql("FLUSH BINARY LOGS")


def test_rotation_order_and_resume_across_files(
    db: TestDb, make_source: Callable[..., MySQLSource]
) -> None:
    _tables(db)
    src = _started(db, make_source)
    _flush(db, 8)
    for i in range(1, 7):  # transactions in binlog.000008, .000009, .000010, ...
        db.tx(f"INSERT INTO a VALUES ({i}, 'v{i}')", f"INSERT INTO b VALUES ({i}, {i}, 'b')")
        db.sql("FLUSH BINARY LOGS")
    evs = drain(src)
    files = [str(e.position.parts[0]) for e in evs]
    assert len(evs) == 12 and "binlog.000009" in files and "binlog.000010" in files
    assert [e.position for e in evs] == sorted(e.position for e in evs)
    assert SourcePosition(source="mysql", parts=("binlog.000009", 999999, 9)) < SourcePosition(
        source="mysql", parts=("binlog.000010", 4, 0)
    )
    for k in (1, 2, 5):  # resume in an older file: the rest comes back exactly, across files
        again = make_source(db, tables=[f"{db.name}.a", f"{db.name}.b"])
        again.start(Checkpoints.at({f"{db.name}.a": evs[k].position, f"{db.name}.b": evs[k].position}))
        assert summary(drain(again)) == summary(evs[k + 1 :])
        again.close()


def test_purged_binlog_is_a_terminal_error(
    extra_server: Callable[..., Any], make_source: Callable[..., Any]
) -> None:
    from mysql_testkit import TestDb as Db

    server = extra_server()
    db = Db(server, "shop")
    db.sql("CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))")
    src = make_source(db, tables=["shop.a"])
    src.start(Checkpoints.at({}))
    drain(src)
    db.sql("INSERT INTO a VALUES (1, 'x')")
    evs = drain(src)
    src.close()
    db.sql("FLUSH BINARY LOGS", "INSERT INTO a VALUES (2, 'y')")
    current = db.sql("SHOW MASTER STATUS")[0][0]
    for _ in range(100):  # MariaDB purges a file only after its binlog checkpoint (async)
        db.sql(f"PURGE BINARY LOGS TO '{current}'")
        if [r[0] for r in db.sql("SHOW BINARY LOGS")] == [current]:
            break
        time.sleep(0.05)
    again = make_source(db, tables=["shop.a"])
    with pytest.raises(TerminalError) as err:
        again.start(Checkpoints.at({"shop.a": evs[0].position}))
    assert "no longer on the server" in err.value.message and "re-snapshot" in (
        err.value.hint or ""
    )
    assert not isinstance(err.value, SchemaChangeError)
    db.sql("RESET MASTER")  # numbering starts over: binlog.000001 exists again, with other content
    again = make_source(db, tables=["shop.a"])
    with pytest.raises(TerminalError, match="was reset"):
        again.start(Checkpoints.at({"shop.a": evs[0].position}))


def test_idle_and_unrelated_activity(db: TestDb, make_source: Callable[..., MySQLSource]) -> None:
    _tables(db)
    src = _started(db, make_source)
    assert list(src.poll()) == []
    before = src.resume_position
    db.sql("INSERT INTO other VALUES (1), (2)")
    assert drain(src) == []
    assert src.resume_position > before  # the stream moved past the unrelated transaction
    db.sql("INSERT INTO a VALUES (1, 'x')")
    assert [e.op for e in drain(src)] == [Op.CREATE]


def test_a_poll_waits_for_changes_before_it_comes_back_empty(
    db: TestDb, make_source: Callable[..., MySQLSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty poll tells the pipeline the source is idle (it commits at once and starts an
    idle maintenance slice): a binlog read that finds nothing between two transactions must
    not end the poll. Here each read of the binlog finds nothing, then a statement commits
    (first to a table not replicated, then to one that is): the poll goes on to the change."""
    _tables(db)
    src = _started(db, make_source)
    src.poll_wait_s = 120.0  # (only reached if the poll never sees the change)
    statements = ["INSERT INTO other VALUES (7)", "INSERT INTO a VALUES (1, 'x')"]
    reads: list[int] = []
    read = BinlogStream.poll

    def poll_then_commit(self: BinlogStream, *args: Any, **kw: Any) -> Iterator[ChangeEvent]:
        got = list(read(self, *args, **kw))
        reads.append(len(got))
        yield from got
        if not got and statements:
            db.sql(statements.pop(0))

    monkeypatch.setattr(BinlogStream, "poll", poll_then_commit)
    assert [(e.table, e.op) for e in src.poll()] == [(f"{db.name}.a", Op.CREATE)]
    assert reads == [0, 0, 1]
