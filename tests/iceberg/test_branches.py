"""The resnapshot branch against a real SQL catalog: commits on the branch leave main's rows
untouched (judged by DuckDB); publishing moves main to the branch head in one commit; a
commit on main meanwhile (another writer) makes the publish refuse rather than lose it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from replicator.iceberg.branches import (
    RESNAPSHOT_BRANCH,
    open_resnapshot_branch,
    publish_resnapshot,
    target_branch,
)
from replicator.iceberg.row_delta import commit_row_delta
from tests.iceberg.tablekit import SCHEMA, data_file, eq_deletes, id_name, sql_catalog
from tests.judges import duckdb_rows


@pytest.fixture
def table(tmp_path: Path) -> Table:
    t = sql_catalog(tmp_path).create_table("db.t", SCHEMA, properties={"format-version": "2"})
    commit_row_delta(t, data_files=[data_file(t, "old", [(1, "a"), (2, "b"), (99, "bogus")])],
                     delete_files=[], snapshot_properties={})  # fmt: skip
    return t


def _main(t: Table) -> list[tuple[int, str | None]]:
    return id_name(duckdb_rows(t.refresh().metadata_location, ["id"]))


def test_branch_commits_are_invisible_until_published(table: Table) -> None:
    assert target_branch(table) == "main"
    assert open_resnapshot_branch(table) and not open_resnapshot_branch(table)
    assert target_branch(table) == RESNAPSHOT_BRANCH
    commit_row_delta(table, data_files=[data_file(table, "new1", [(1, "a2"), (2, "b")])],
                     delete_files=[], snapshot_properties={}, branch=RESNAPSHOT_BRANCH)  # fmt: skip
    # a later batch on the branch: key 2 deleted (equality delete), 3 added
    commit_row_delta(table, data_files=[data_file(table, "new2", [(3, "c")])],
                     delete_files=[eq_deletes(table, "del2", [2])], snapshot_properties={},
                     branch=RESNAPSHOT_BRANCH)  # fmt: skip
    assert _main(table) == [(1, "a"), (2, "b"), (99, "bogus")]  # readers of main: old rows
    head = table.metadata.snapshot_by_name(RESNAPSHOT_BRANCH)
    assert head is not None
    assert publish_resnapshot(table) == head.snapshot_id
    assert _main(table) == [(1, "a2"), (3, "c")]
    assert target_branch(table.refresh()) == "main" and publish_resnapshot(table) is None


def test_publish_refuses_when_main_moved_meanwhile(table: Table) -> None:
    open_resnapshot_branch(table)
    stale = table.catalog.load_table("db.t")
    commit_row_delta(table, data_files=[data_file(table, "other", [(5, "x")])], delete_files=[],
                     snapshot_properties={})  # another writer on main  # fmt: skip
    with pytest.raises(CommitFailedException):
        publish_resnapshot(stale)
    assert RESNAPSHOT_BRANCH in table.refresh().metadata.refs
