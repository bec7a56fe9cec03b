"""What a table holds, for people: snapshots, files, rows, committed position."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table

from replicator.checkpoint import read_checkpoint
from replicator.iceberg.tables import SOURCE_TABLE_PROPERTY
from replicator.storage.fileio import file_io_properties
from replicator.text import text_table
from spark.s3a import configure_spark


@dataclass
class TableReport:
    identifier: str
    source_table: str | None
    snapshots: int
    data_files: int
    position_delete_files: int
    equality_delete_files: int
    data_records: int
    position: str | None
    metadata_location: str
    rows: int | None = None  # live rows as Iceberg Java (Spark) reads them


def table_report(table: Table, spark: Any = None) -> TableReport:
    counts = {c: 0 for c in DataFileContent}
    records = 0
    if table.current_snapshot() is not None:
        for task_file in table.inspect.files().to_pylist():
            content = DataFileContent(task_file["content"])
            counts[content] += 1
            if content is DataFileContent.DATA:
                records += task_file["record_count"]
    cp = read_checkpoint(table)
    pos = cp.position if cp is not None else None
    rep = TableReport(
        identifier=".".join(table.name()),
        source_table=table.properties.get(SOURCE_TABLE_PROPERTY),
        snapshots=len(table.metadata.snapshots),
        data_files=counts[DataFileContent.DATA],
        position_delete_files=counts[DataFileContent.POSITION_DELETES],
        equality_delete_files=counts[DataFileContent.EQUALITY_DELETES],
        data_records=records,
        position=str(pos) if pos else None,
        metadata_location=table.metadata_location,
    )
    if spark is not None:
        configure_spark(spark, table.metadata_location, file_io_properties(table.io.properties))
        rep.rows = spark.read.format("iceberg").load(table.metadata_location).count()
    return rep


def format_reports(reports: list[TableReport]) -> str:
    head = ["table", "source", "rows", "snapshots", "data files", "pos-del files", "eq-del files", "position"]
    rows = [
        [
            r.identifier,
            r.source_table or "-",
            "-" if r.rows is None else f"{r.rows:,}",
            str(r.snapshots),
            str(r.data_files),
            str(r.position_delete_files),
            str(r.equality_delete_files),
            r.position or "-",
        ]
        for r in reports
    ]
    return "\n".join(text_table(head, rows))
