"""The manifests' Avro files (``replicator.iceberg.avro_io``): the same bytes pyiceberg's
``AvroOutputFile`` writes, the same records its ``AvroFile`` reads, and the per-schema writer
and reader trees built once."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.avro import resolver
from pyiceberg.avro.file import AvroFile, AvroOutputFile
from pyiceberg.io import InputFile, OutputFile, OutputStream
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import Record
from pyiceberg.types import IntegerType, NestedField, StructType

from replicator.iceberg import avro_io
from replicator.iceberg.manifest_schema import entry_schema, manifest_list_schema


class _Memory(OutputFile):
    def __init__(self) -> None:
        super().__init__("memory://x")
        self.data = b""

    def __len__(self) -> int:
        return len(self.data)

    def exists(self) -> bool:
        return False

    def to_input_file(self) -> InputFile:
        raise NotImplementedError

    def create(self, overwrite: bool = False) -> OutputStream:
        owner = self

        class _Stream(io.BytesIO):
            def close(self) -> None:
                owner.data = self.getvalue()
                super().close()

        return _Stream()


def _list_records(n: int) -> list[Record]:
    return [
        Record(f"s3://b/m{i}.avro", 100 + i, 0, i % 2, 7, 3, 42 + i, 1, 2, 0, 10, 20, 0,
               [Record(False, None, b"\x01", b"\x09")], None, None)
        for i in range(n)
    ]  # fmt: skip


@pytest.mark.parametrize("count", [0, 1, 5])
def test_bytes_are_pyicebergs(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(avro_io.os, "urandom", lambda n: b"s" * n)
    import pyiceberg.avro.file as pyiceberg_file

    monkeypatch.setattr(pyiceberg_file.os, "urandom", lambda n: b"s" * n)
    schema = manifest_list_schema(3)
    meta = {"snapshot-id": "42", "format-version": "3", "avro.codec": "deflate"}
    theirs = _Memory()
    with AvroOutputFile[Record](theirs, schema, "manifest_file", metadata=meta) as out:
        out.write_block(_list_records(count))
    assert avro_io.avro_bytes(schema, "manifest_file", meta, _list_records(count)) == theirs.data


def test_records_are_pyicebergs_and_the_trees_are_built_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partition = StructType(NestedField(1000, "p", IntegerType(), required=False))
    schema = entry_schema(2, partition)
    # A written list read back with pyiceberg's reader and ours.
    path = tmp_path / "list.avro"
    path.write_bytes(avro_io.avro_bytes(manifest_list_schema(2), "manifest_file", {}, _list_records(3)))
    io_ = PyArrowFileIO()
    with AvroFile[Record](io_.new_input(str(path)), manifest_list_schema(3)) as reader:
        theirs = list(reader)
    ours = avro_io.read_avro(io_.new_input(str(path)), manifest_list_schema(3))
    assert ours == theirs and len(ours) == 3

    built: list[str] = []
    construct, resolve = resolver.construct_writer, resolver.resolve_reader

    def counting_writer(*args: Any, **kwargs: Any) -> Any:
        built.append("writer")
        return construct(*args, **kwargs)

    def counting_reader(*args: Any, **kwargs: Any) -> Any:
        built.append("reader")
        return resolve(*args, **kwargs)

    monkeypatch.setattr(avro_io, "construct_writer", counting_writer)
    monkeypatch.setattr(avro_io, "resolve_reader", counting_reader)
    monkeypatch.setattr(avro_io, "_writers", {})
    monkeypatch.setattr(avro_io, "_readers", {})
    entry = Record(1, 7, None, None, Record(0, "f.parquet", "PARQUET", Record(3), 5, 100, None, None, None,
                                            None, None, None, None, None, None, None, None))  # fmt: skip
    for i in range(3):
        (tmp_path / f"m{i}.avro").write_bytes(avro_io.avro_bytes(schema, "manifest_entry", {}, [entry]))
        assert len(avro_io.read_avro(io_.new_input(str(tmp_path / f"m{i}.avro")), schema)) == 1
    assert built == ["writer", "reader"]


@pytest.mark.parametrize("version", [2, 3])
def test_a_written_manifest_list_is_remembered_as_it_reads_back(tmp_path: Path, version: int) -> None:
    """The next commit reads its parent's list from memory: what is kept is what a reader
    decodes from the file (v2 lists carry no first row ids; v3 ones only on data manifests)."""
    from replicator.iceberg import manifest_writer
    from replicator.iceberg.dv_commit import commit_files
    from replicator.iceberg.manifest_writer import content_file, read_manifest_list
    from replicator.iceberg.roaring import positions
    from replicator.iceberg.v3_metadata import create_v3_table
    from tests.iceberg.tablekit import SCHEMA, data_file, eq_deletes, sql_catalog

    catalog = sql_catalog(tmp_path)
    if version == 3:
        table = create_v3_table(catalog, "db.t", SCHEMA, location=f"file://{tmp_path}/db/t")
    else:
        table = catalog.create_table("db.t", SCHEMA, properties={"format-version": "2"})
    d1 = data_file(table, "d1", [(1, "a"), (2, "b")])
    table = commit_files(table, data_files=[content_file(d1)]).table
    head = table.current_snapshot()
    assert head is not None
    vectors = {d1.file_path: positions([0])} if version == 3 else None
    table = commit_files(table, data_files=[content_file(data_file(table, "d2", [(3, "c")]))],
                         delete_files=[content_file(eq_deletes(table, "e2", [2]))], deletion_vectors=vectors,
                         expected_parent_snapshot_id=head.snapshot_id).table  # fmt: skip
    head = table.current_snapshot()
    assert head is not None
    remembered = read_manifest_list(table.io, head.manifest_list)
    manifest_writer._lists.clear()
    decoded = read_manifest_list(table.io, head.manifest_list)
    assert remembered == decoded and len(decoded) >= 3
    assert {m.content for m in decoded} == {0, 1}
