"""Tables without a primary key on a MySQL/MariaDB source (``source.keyless_tables``,
README "Tables without a primary key"): selected only when listed, told apart from a table
that has gone, copied by the initial snapshot only, every image checked to be FULL."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mysql_testkit import TestDb, drain

from replicator.checkpoint import Checkpoints
from replicator.errors import SourceSetupError, TerminalError
from replicator.events.model import Op
from replicator.pipeline.staging import BadChangeError, check_old_images
from replicator.sources.mysql import MySQLSource
from replicator.sources.mysql.emit import SourceStats, make_event
from replicator.sources.mysql.keyless import NOT_FULL, full_images, not_full_items


def _setup_error(src: MySQLSource, checkpoints: Checkpoints | None = None) -> SourceSetupError:
    with pytest.raises(SourceSetupError) as err:
        src.start(checkpoints or Checkpoints.at({}))
    assert err.value.hint
    return err.value


@pytest.mark.integration
def test_keyless_tables_are_selected_only_when_listed(db: TestDb, make_source: Callable[..., Any]) -> None:
    db.sql(
        "CREATE TABLE k (a INT PRIMARY KEY, b INT)",
        "CREATE TABLE log (a INT, b VARCHAR(10))",
        "CREATE TABLE other (a INT)",
        "INSERT INTO log VALUES (1, 'x'), (1, 'x'), (NULL, 'y')",
    )
    listed = f"{db.name}.log"
    # not listed: left out (default scope) or refused (configured), the hint names the setting
    src = make_source(db)
    src.start(Checkpoints.at({}))
    assert {e.table for e in drain(src)} == set()  # k is empty, log is not replicated
    err = _setup_error(make_source(db, tables=["log"]))
    assert "source.keyless_tables" in err.message and err.table == listed
    # listed: a name that is not replicated, or a table with a key, is refused
    err = _setup_error(make_source(db, tables=["k"], keyless_tables=[listed]))
    assert "no such table is replicated" in err.message
    err = _setup_error(make_source(db, keyless_tables=[f"{db.name}.k"]))
    assert "has a primary key (a)" in err.message and err.table == f"{db.name}.k"
    # listed: snapshotted whole (duplicates and NULLs kept), then streamed without a key
    src = make_source(db, keyless_tables=[listed], snapshot_chunk_rows=2)
    src.start(Checkpoints.at({}))
    snap = [e for e in drain(src) if e.table == listed]
    assert sorted((e.after["a"] or 0, e.after["b"]) for e in snap) == [(0, "y"), (1, "x"), (1, "x")]
    assert {e.schema_.key_columns for e in snap} == {()}
    db.sql("UPDATE log SET b = 'z' WHERE b = 'x' LIMIT 1", "DELETE FROM log WHERE a IS NULL")
    upd, dele = drain(src)
    assert (upd.op, upd.before, upd.after) == (Op.UPDATE, {"a": 1, "b": "x"}, {"a": 1, "b": "z"})
    assert (dele.op, dele.before, dele.error) == (Op.DELETE, {"a": None, "b": "y"}, None)
    check_old_images(listed, [upd, dele])  # whole old rows: applicable


@pytest.mark.integration
def test_a_listed_table_is_not_gone_but_a_dropped_one_is(
    db: TestDb, make_source: Callable[..., Any], tmp_path: Path
) -> None:
    """A committed keyless table still without a key is live (snapshot done, streamed); a
    committed keyless table dropped while the engine was stopped is followed to its DROP."""
    db.sql("CREATE TABLE log (a INT)", "INSERT INTO log VALUES (1), (1)")
    listed = f"{db.name}.log"
    src = make_source(db, keyless_tables=[listed], state_dir=tmp_path, server_id=4901)
    src.start(Checkpoints.at({}))
    snap = drain(src)
    for e in snap:
        src.acknowledge(e.position)
    db.sql("INSERT INTO log VALUES (2)")
    (ins,) = drain(src)
    src.acknowledge(ins.position)
    src.close()
    again = make_source(db, keyless_tables=[listed], state_dir=tmp_path, server_id=4901)
    again.start(Checkpoints.at({listed: ins.position}))
    db.sql("DELETE FROM log WHERE a = 1 LIMIT 1")
    (dele,) = drain(again)
    assert (dele.op, dele.before) == (Op.DELETE, {"a": 1})
    again.close()
    db.sql("DROP TABLE log")
    gone = make_source(db, keyless_tables=[listed], state_dir=tmp_path, server_id=4901)
    gone.start(Checkpoints.at({listed: dele.position}))
    with pytest.raises(Exception, match="was dropped"):
        drain(gone)


@pytest.mark.integration
def test_a_resumed_snapshot_of_a_keyless_table_is_refused(
    db: TestDb, make_source: Callable[..., Any], tmp_path: Path
) -> None:
    db.sql("CREATE TABLE k (a INT PRIMARY KEY)", "CREATE TABLE log (a INT)",
           "INSERT INTO k VALUES (1)", "INSERT INTO log VALUES (1), (1), (2)")  # fmt: skip
    listed = f"{db.name}.log"
    src = make_source(db, keyless_tables=[listed], state_dir=tmp_path, server_id=4902, snapshot_chunk_rows=1)
    src.start(Checkpoints.at({}))
    first = next(iter(src.poll()))  # one row committed, the snapshot interrupted
    src.close()
    again = make_source(db, keyless_tables=[listed], state_dir=tmp_path, server_id=4902)
    err = _setup_error(again, Checkpoints.at({first.table: first.position}))
    assert listed in err.message and "overlaps the binlog stream" in err.message
    assert err.table == listed


@pytest.mark.integration
def test_a_keyless_table_added_to_a_streaming_pipeline_is_refused(
    db: TestDb, make_source: Callable[..., Any], tmp_path: Path
) -> None:
    """Tables new to a pipeline are copied while it streams (incrementally on MariaDB): a
    copy that overlaps the stream, so never one of a keyless table."""
    db.sql("CREATE TABLE k (a INT PRIMARY KEY)", "CREATE TABLE log (a INT)", "INSERT INTO k VALUES (1)",
           "INSERT INTO log VALUES (1)")  # fmt: skip
    src = make_source(db, tables=["k"], state_dir=tmp_path, server_id=4904)
    src.start(Checkpoints.at({}))
    (row,) = drain(src)
    src.acknowledge(row.position)
    src.close()
    listed = f"{db.name}.log"
    again = make_source(db, tables=["k", "log"], keyless_tables=[listed], state_dir=tmp_path, server_id=4904)
    err = _setup_error(again, Checkpoints.at({row.table: row.position}))
    assert err.table == listed and "already streams" in err.message


@pytest.mark.integration
def test_an_empty_keyless_table_resumes_at_the_snapshot_not_copied_again(
    db: TestDb, make_source: Callable[..., Any], tmp_path: Path
) -> None:
    """An empty keyless table has nothing committed after the initial snapshot; a keyed one
    would be snapshotted again at restart, a keyless one cannot be (that copy would overlap
    the stream): it counts as committed at the snapshot's end, so a change of it that was
    not committed before the restart comes again from the binlog."""
    db.sql("CREATE TABLE k (a INT PRIMARY KEY)", "CREATE TABLE log (a INT)", "INSERT INTO k VALUES (1)")
    listed = f"{db.name}.log"
    src = make_source(db, keyless_tables=[listed], state_dir=tmp_path, server_id=4903)
    src.start(Checkpoints.at({}))
    for e in drain(src):
        src.acknowledge(e.position)
    db.sql("INSERT INTO log VALUES (5)", "INSERT INTO k VALUES (2)")
    lost, keyed = drain(src)  # only k's change is committed
    src.close()
    again = make_source(db, keyless_tables=[listed], state_dir=tmp_path, server_id=4903)
    again.start(Checkpoints.at({keyed.table: keyed.position}))
    got = drain(again)
    assert [(e.table, e.op, e.after) for e in got] == [(listed, Op.CREATE, {"a": 5})]
    assert got[0].position == lost.position


@pytest.mark.integration
def test_minimal_and_noblob_sessions_still_log_whole_rows_of_a_keyless_table(
    db: TestDb, make_source: Callable[..., Any]
) -> None:
    """The global binlog_row_image must be FULL (checked at start), but a session may set
    MINIMAL or NOBLOB: MariaDB then still logs every column of a table without a primary key
    (the whole row is what names it), defaults and blobs included, so such a table stays
    correct (the rows events are checked all the same: ``keyless.full_images``)."""
    db.sql("CREATE TABLE log (a INT, b INT DEFAULT 7, t TEXT, j BLOB)")
    listed = f"{db.name}.log"
    src = make_source(db, keyless_tables=[listed])
    src.start(Checkpoints.at({}))
    drain(src)
    for image in ("MINIMAL", "NOBLOB"):
        db.sql(f"SET SESSION binlog_row_image = '{image}'", "INSERT INTO log (a, t) VALUES (1, 'x')",
               "UPDATE log SET b = 8", "DELETE FROM log")  # fmt: skip
        ins, upd, dele = drain(src)
        row = {"a": 1, "b": 7, "t": "x", "j": None}
        assert (ins.after, upd.before, upd.after) == (row, row, {**row, "b": 8}), image
        assert dele.before == {**row, "b": 8} and not any(e.error for e in (ins, upd, dele))


@dataclass
class _Ev:
    """What ``full_images`` and ``not_full_items`` read of a rows event."""

    number_of_columns: int
    columns_present_bitmap: bytes
    columns_present_bitmap2: bytes | None = None
    rows: tuple[Any, ...] = ({},)
    timestamp: int = 1


def test_an_image_that_is_not_full_stops_the_table() -> None:
    """A row image without every column (MySQL may log one; MariaDB logs whole rows of a
    table without a key, above): each row becomes an error change that stops the table."""
    assert full_images(_Ev(9, b"\xff\x01", b"\xff\x01")) and full_images(_Ev(3, b"\x07"))
    assert not full_images(_Ev(9, b"\xff\x01", b"\xfe\x01")) and not full_images(_Ev(3, b"\x05"))
    tx = SimpleNamespace(file="binlog.000001", begin=4, tx_id="binlog.000001:4")
    items = list(not_full_items(_Ev(3, b"\x05", b"\x07", rows=({}, {})), "d.log", None, tx, 0,
                                ("binlog.000001", 4, 0), SourceStats()))  # fmt: skip
    assert [i[4] for i in items] == [("binlog.000001", 4, 1)]  # the first row was applied
    ev = make_event(*items[0], True)
    assert ev.op is Op.DELETE and ev.error == NOT_FULL
    with pytest.raises(BadChangeError) as err:
        check_old_images("d.log", [ev])
    assert err.value.table == "d.log" and "binlog row image is not FULL" in str(err.value)


@pytest.mark.integration
def test_a_minimal_image_of_a_keyed_table_stops_with_the_table_named(
    db: TestDb, make_source: Callable[..., Any]
) -> None:
    """A session's MINIMAL image of a table with a key leaves out columns whose values are
    unknown (not NULL): a terminal error naming the table, never a row written with NULLs."""
    db.sql("CREATE TABLE kt (id INT PRIMARY KEY, b INT DEFAULT 7, t TEXT)")
    src = make_source(db)
    src.start(Checkpoints.at({}))
    drain(src)
    db.sql("SET SESSION binlog_row_image = 'MINIMAL'", "INSERT INTO kt (id) VALUES (1)")
    with pytest.raises(TerminalError, match="does not carry every column") as err:
        drain(src)
    assert err.value.table == f"{db.name}.kt" and "binlog_row_image = FULL" in (err.value.hint or "")
