"""Change an Iceberg table behind the engine's back: our own Parquet data / equality-delete
files (the table's Arrow schema, with field ids) committed with ``commit_row_delta`` under
another writer id. pyiceberg itself cannot rewrite tables that hold equality deletes."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from replicator.checkpoint.model import WRITER_KEY as WRITER_PROPERTY
from replicator.config import load_config
from replicator.iceberg.files import (
    data_file_from_parquet,
    equality_delete_arrow_schema,
    equality_delete_file_from_parquet,
)
from replicator.iceberg.row_delta import commit_row_delta
from replicator.iceberg.tables import open_catalog
from tests.judges import spark_rows

TAMPER_WRITER = "tamper-test"


def load_table(config: Path, identifier: str) -> Table:
    return open_catalog(load_config(config).iceberg).load_table(identifier)


def rows(table: Table, order_by: list[str]) -> list[dict[str, Any]]:
    """Live rows as Iceberg Java reads them (timestamptz as aware UTC datetimes)."""
    return spark_rows(table.metadata_location, order_by=order_by)


def _write(table: Table, arrow: pa.Table, kind: str) -> str:
    location = f"{table.location().rstrip('/')}/data/{kind}-{uuid.uuid4().hex}.parquet"
    local = urlparse(location).path if location.startswith("file:") else location
    Path(local).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(arrow, local)
    return location


def tamper(
    table: Table,
    *,
    add: list[dict[str, Any]] = (),
    delete: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> Snapshot:
    """One commit: equality-delete the keys of ``delete`` rows, append ``add`` rows."""
    schema = table.schema()
    data_files, delete_files = [], []
    if add:
        arrow = pa.Table.from_pylist(list(add), schema=schema_to_pyarrow(schema))
        data_files.append(data_file_from_parquet(table, _write(table, arrow, "tamper-data")))
    if delete:
        ids = sorted(schema.identifier_field_ids)
        eq_schema = equality_delete_arrow_schema(schema, ids)
        keys = [{f.name: r[f.name] for f in eq_schema} for r in delete]
        arrow = pa.Table.from_pylist(keys, schema=eq_schema)
        path = _write(table, arrow, "tamper-eqdel")
        delete_files.append(equality_delete_file_from_parquet(table, path, ids))
    return commit_row_delta(
        table,
        data_files=data_files,
        delete_files=delete_files,
        snapshot_properties={WRITER_PROPERTY: TAMPER_WRITER},
    )
