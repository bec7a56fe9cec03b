"""Metadata hygiene: however many commits, the head lists a bounded number of manifests of each
content type and only a bounded number of metadata.json files stay on storage; the table still
reads the same (Spark, DuckDB)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import ManifestContent

from replicator.iceberg.row_delta import MANIFESTS_PER_CONTENT_MAX, commit_row_delta
from replicator.iceberg.tables import (
    HYGIENE_PROPERTIES,
    METADATA_PREVIOUS_VERSIONS_MAX,
    TABLE_PROPERTIES,
    ensure_hygiene_properties,
)
from tests.iceberg.tablekit import (
    SCHEMA,
    data_file,
    eq_deletes,
    file_count,
    id_name,
    pos_deletes,
    sql_catalog,
)
from tests.judges import assert_no_duplicate_data_files, duckdb_rows, spark_rows

COMMITS = 45


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    return sql_catalog(tmp_path)


@pytest.mark.spark
def test_many_commits_keep_manifests_and_metadata_bounded(catalog: SqlCatalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, properties=TABLE_PROPERTIES)
    model: dict[int, str] = {}
    most_manifests = 0
    for i in range(1, COMMITS + 1):
        # Key 0 is updated by every batch (equality delete + new row); key i is inserted; every
        # third batch deletes its own key i again by position; every fifth deletes key i-1.
        rows = [(0, f"zero{i}"), (i, f"v{i}")]
        data = data_file(table, f"d{i}", rows)
        deletes = [eq_deletes(table, f"e{i}", [0])] if i > 1 else []
        model.update(rows)
        if i % 3 == 0:
            deletes.append(pos_deletes(table, f"p{i}", [(data.file_path, 1)]))
            del model[i]
        if i % 5 == 0 and (i - 1) in model:
            deletes.append(eq_deletes(table, f"k{i}", [i - 1]))
            del model[i - 1]
        commit_row_delta(table, data_files=[data], delete_files=deletes, snapshot_properties={})

        head = table.current_snapshot()
        assert head is not None
        manifests = head.manifests(table.io)
        for content in (ManifestContent.DATA, ManifestContent.DELETES):
            count = sum(1 for m in manifests if m.content == content)
            assert count <= MANIFESTS_PER_CONTENT_MAX + 1, (i, content, count)
        most_manifests = max(most_manifests, len(manifests))
        assert file_count(table, ".metadata.json") <= METADATA_PREVIOUS_VERSIONS_MAX + 1

    assert most_manifests > MANIFESTS_PER_CONTENT_MAX  # the bound was reached, so merges ran
    assert len(table.metadata.metadata_log) <= METADATA_PREVIOUS_VERSIONS_MAX
    expected = sorted(model.items())
    assert id_name(spark_rows(table.metadata_location)) == expected
    assert id_name(duckdb_rows(table.metadata_location)) == expected
    assert_no_duplicate_data_files(table.metadata_location)


def test_merged_manifests_keep_sequence_numbers(catalog: SqlCatalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, properties=TABLE_PROPERTIES)
    for i in range(1, MANIFESTS_PER_CONTENT_MAX + 3):
        commit_row_delta(
            table,
            data_files=[data_file(table, f"d{i}", [(i, "x")])],
            delete_files=[eq_deletes(table, f"e{i}", [i - 1])],
            snapshot_properties={},
        )
    head = table.current_snapshot()
    assert head is not None
    seen: dict[str, tuple[int | None, int | None]] = {}
    for manifest in head.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            name = Path(entry.data_file.file_path).stem
            seen[name] = (entry.sequence_number, entry.file_sequence_number)
    assert seen == {
        f"{kind}{i}": (i, i) for i in range(1, MANIFESTS_PER_CONTENT_MAX + 3) for kind in "de"
    }


def test_existing_tables_get_hygiene_properties(catalog: SqlCatalog) -> None:
    old = catalog.create_table("db.old", SCHEMA, properties={"format-version": "2"})
    ensure_hygiene_properties(old)
    assert {k: old.properties.get(k) for k in HYGIENE_PROPERTIES} == HYGIENE_PROPERTIES
    assert catalog.load_table("db.old").properties == old.properties
    location = old.metadata_location
    ensure_hygiene_properties(old)  # nothing missing: no commit
    assert old.metadata_location == location

    user = "write.metadata.previous-versions-max"
    mine = catalog.create_table("db.mine", SCHEMA, properties={"format-version": "2", user: "3"})
    ensure_hygiene_properties(mine)
    assert mine.properties[user] == "3"
    assert mine.properties["write.metadata.delete-after-commit.enabled"] == "true"
