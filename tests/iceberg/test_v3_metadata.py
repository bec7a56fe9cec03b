"""What the v3 modules assume of pyiceberg 0.12, pinned: it refuses to write v3 metadata and v3
manifests itself (why ``v3_metadata`` and ``manifest_writer`` exist; when one of these tests
fails after an upgrade, the workaround may go), and the modules use no private pyiceberg name."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from pyiceberg.manifest import write_manifest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

from replicator.iceberg.v3_metadata import metadata_json
from tests.iceberg.tablekit import SCHEMA

V3_MODULES = ("roaring", "puffin", "manifest_schema", "manifest_writer", "dv_commit", "snapshot_summary", "v3_metadata")
ROOT = Path(__file__).resolve().parents[2] / "replicator" / "iceberg"


def _v3_metadata():  # type: ignore[no-untyped-def]
    return new_table_metadata(SCHEMA, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///w/t", {"format-version": "3"})


def test_pyiceberg_still_refuses_to_write_v3_metadata() -> None:
    with pytest.raises(NotImplementedError):
        _v3_metadata().model_dump_json()


def test_pyiceberg_still_refuses_to_write_v3_manifests(tmp_path: Path) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    output = PyArrowFileIO().new_output(f"file://{tmp_path}/m.avro")
    with pytest.raises(ValueError, match="version"):
        write_manifest(3, UNPARTITIONED_PARTITION_SPEC, SCHEMA, output, 1, "deflate")


def test_our_v3_metadata_json_has_the_v3_fields() -> None:
    metadata = _v3_metadata().model_copy(update={"next_row_id": 7})
    document = json.loads(metadata_json(metadata))
    assert document["format-version"] == 3 and document["next-row-id"] == 7
    assert document["last-sequence-number"] == 0 and document["table-uuid"]


@pytest.mark.parametrize("module", V3_MODULES)
def test_no_private_pyiceberg_names(module: str) -> None:
    tree = ast.parse((ROOT / f"{module}.py").read_text())
    private = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyiceberg")
        for alias in node.names
        if alias.name.startswith("_") or "._" in (node.module or "")
    ]
    assert not private, f"{module} imports private pyiceberg names: {private}"
