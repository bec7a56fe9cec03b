"""The SQL catalog's cheaper commit path (``replicator.iceberg.sql_commit``): the metadata it
commits is pyiceberg's own, it reads a metadata file once, and the tables stay readable."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.update import SetPropertiesUpdate, update_table_metadata
from sqlalchemy import create_engine

from replicator.errors import CommitConflictError
from replicator.iceberg import sql_commit
from replicator.iceberg.row_delta import commit_row_delta
from tests.iceberg.tablekit import SCHEMA, data_file
from tests.judges import duckdb_rows


def _table(tmp_path: Path) -> tuple[Any, Any]:
    catalog = sql_commit.FastCommitSqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    return catalog, catalog.create_table("db.t", SCHEMA, properties={"format-version": "2"})


def test_updated_metadata_is_pyicebergs_less_the_copy(tmp_path: Path) -> None:
    _, table = _table(tmp_path)
    commit_row_delta(table, data_files=[data_file(table, "d0", [(0, "a")])], delete_files=[],
                     snapshot_properties={"replicator.position": "0"})  # fmt: skip
    updates = (SetPropertiesUpdate(updates={"k": "v"}),)
    ours = sql_commit.updated_metadata(table.metadata, updates, table.metadata_location)
    theirs = update_table_metadata(table.metadata, updates, metadata_location=table.metadata_location)
    assert ours.model_copy(update={"last_updated_ms": theirs.last_updated_ms}) == theirs
    assert ours.metadata_log[-1].metadata_file == table.metadata_location


def test_commits_read_each_metadata_file_once_and_stay_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog, table = _table(tmp_path)
    parsed: list[str] = []
    parse = FromInputFile.table_metadata

    def counting(input_file: Any, encoding: str = "utf-8") -> Any:
        parsed.append(input_file.location)
        return parse(input_file, encoding)

    monkeypatch.setattr(FromInputFile, "table_metadata", staticmethod(counting))
    rows = []
    for i in range(6):
        rows.append((i, f"n{i}"))
        commit_row_delta(table, data_files=[data_file(table, f"d{i}", [(i, f"n{i}")])], delete_files=[],
                         snapshot_properties={"replicator.position": str(i)})  # fmt: skip
    assert parsed == []  # each commit's base is the file the one before wrote
    assert catalog.load_table("db.t").metadata == table.metadata
    # What was written is what the cache holds: a second catalog object (pyiceberg's own class)
    # parses the same metadata.
    fresh = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db").load_table("db.t")
    assert fresh.metadata_location == table.metadata_location
    assert fresh.metadata == table.metadata
    assert duckdb_rows(table.metadata_location, ["id"]) == [{"id": i, "name": n} for i, n in rows]


def _commit(table: Any, i: int) -> None:
    commit_row_delta(table, data_files=[data_file(table, f"d{i}", [(i, f"n{i}")])], delete_files=[],
                     snapshot_properties={"replicator.position": str(i)})  # fmt: skip


def test_a_commit_on_a_parsed_base_does_not_select_the_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog, table = _table(tmp_path)
    _commit(table, 0)
    loads: list[Any] = []
    monkeypatch.setattr(SqlCatalog, "load_table", lambda self, ident: loads.append(ident))
    for i in range(1, 4):
        _commit(table, i)
    monkeypatch.undo()
    assert loads == []
    assert catalog.load_table("db.t").metadata_location == table.metadata_location
    assert len(table.snapshots()) == 4


def test_a_row_moved_by_another_writer_gets_pyicebergs_answer(tmp_path: Path) -> None:
    """The swap finds the row moved: nothing of ours is left behind, and the outcome is the one
    pyiceberg's commit_table gives (a moved branch is refused; a change elsewhere is built on)."""
    catalog, table = _table(tmp_path)
    _commit(table, 0)
    other = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db").load_table("db.t")
    with other.transaction() as tx:  # another writer: a property only, the branch stays
        tx.set_properties({"owner": "them"})
    _commit(table, 1)  # our base is stale; its requirements hold on the current one
    reloaded = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db").load_table("db.t")
    assert reloaded.metadata_location == table.metadata_location
    assert reloaded.properties["owner"] == "them" and len(reloaded.snapshots()) == 2

    _commit(other := SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db").load_table("db.t"), 2)
    stale = catalog.load_table("db.t")
    stale.metadata, stale.metadata_location = table.metadata, table.metadata_location  # one commit behind
    files = set((tmp_path / "db.db" / "t" / "metadata").glob("*.metadata.json"))
    with pytest.raises(CommitConflictError):
        _commit(stale, 3)
    assert set((tmp_path / "db.db" / "t" / "metadata").glob("*.metadata.json")) == files
    assert catalog.load_table("db.t").metadata_location == other.metadata_location


def _journal_mode(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as con:
        return str(con.execute("PRAGMA journal_mode").fetchone()[0])


def test_a_sqlite_catalog_commits_in_wal_mode_and_other_processes_read_it(tmp_path: Path) -> None:
    """No rollback journal is created per commit; pyiceberg's own class in another process
    reads every commit (the engine's judges open the same file)."""
    catalog, table = _table(tmp_path)
    assert _journal_mode(tmp_path / "catalog.db") == "wal"
    with catalog.engine.connect() as connection:  # each commit synced before it returns
        assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
    for i in range(3):
        commit_row_delta(table, data_files=[data_file(table, f"d{i}", [(i, f"n{i}")])], delete_files=[],
                         snapshot_properties={"replicator.position": str(i)})  # fmt: skip
    code = (
        "import sys; from pyiceberg.catalog.sql import SqlCatalog; "
        "t = SqlCatalog('test', uri=sys.argv[1]).load_table('db.t'); print(t.metadata_location)"
    )
    out = subprocess.run([sys.executable, "-c", code, f"sqlite:///{tmp_path}/catalog.db"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == table.metadata_location
    assert duckdb_rows(table.metadata_location, ["id"]) == [{"id": i, "name": f"n{i}"} for i in range(3)]


def test_a_catalog_file_that_cannot_switch_stays_as_it_is(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "locked.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as holder:
        holder.execute("CREATE TABLE x (a)")
        holder.execute("BEGIN EXCLUSIVE")
        engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
        assert sql_commit.use_write_ahead_log(engine) is None
        holder.execute("ROLLBACK")
    assert "stays in its journal mode" in caplog.text
    assert _journal_mode(path) == "delete"
    assert sql_commit.use_write_ahead_log(create_engine("sqlite://")) is None  # in memory
    assert sql_commit.use_write_ahead_log(engine) == "wal"  # once the lock is gone


_OTHER_WRITER = """
import sys
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
catalog = SqlCatalog("test", uri=sys.argv[1])
n = int(sys.argv[2])
for i in range(n):
    while True:
        table = catalog.load_table("db.t")
        try:
            with table.transaction() as tx:
                tx.set_properties({"other": str(i)})
            break
        except CommitFailedException:
            continue
print("done")
"""


def test_another_process_commits_to_the_wal_catalog_while_the_engine_does(tmp_path: Path) -> None:
    """Another tool (pyiceberg's own class, its own process) commits to the same table while
    the engine's catalog commits row deltas: both finish (no "database is locked" escapes the
    WAL file's writers), nothing of either is lost."""
    catalog, table = _table(tmp_path)
    n, theirs = 25, 200
    other = subprocess.Popen([sys.executable, "-c", _OTHER_WRITER, f"sqlite:///{tmp_path}/catalog.db", str(theirs)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while "other" not in catalog.load_table("db.t").properties:  # they have started
        assert time.monotonic() < deadline and other.poll() is None, other.stderr
        time.sleep(0.01)
    seen = set()
    for i in range(n):
        written = data_file(table, f"d{i}", [(i, f"n{i}")])
        while True:  # as the engine's commit loop: a conflict re-reads the table and tries again
            try:
                commit_row_delta(table, data_files=[written], delete_files=[],
                                 snapshot_properties={"replicator.position": str(i)})  # fmt: skip
                break
            except CommitConflictError:
                table = catalog.load_table("db.t")
        seen.add(table.properties.get("other"))
    out, err = other.communicate(timeout=120)
    assert other.returncode == 0 and out.strip() == "done", err
    assert len(seen) > 1  # their commits landed between ours
    final = SqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db").load_table("db.t")
    assert final.properties["other"] == str(theirs - 1)
    assert len(final.snapshots()) == n
    assert duckdb_rows(final.metadata_location, ["id"]) == [{"id": i, "name": f"n{i}"} for i in range(n)]
