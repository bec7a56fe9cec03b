"""Helpers for Postgres -> Iceberg end-to-end tests: config files and the source tables as
the engine's type mapping sees them (the same converters the source uses)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import yaml

from replicator.config import RunConfig, load_config
from replicator.iceberg.tables import iceberg_table_name, open_catalog
from replicator.sources.postgres import setup
from replicator.sources.postgres.snapshot import table_columns, text_loaders
from replicator.sources.postgres.types import RowConverter, TypeMapper, catalog_lookup
from sample_dbs.postgres.server import PrivatePostgres


def write_config(root: Path, dsn: str, *, max_events: int = 5000, **source: Any) -> Path:
    cfg = {
        "source": {"type": "postgres", "dsn": dsn, **source},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": max_events, "max_seconds": 2},
        "state_dir": "state",
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def source_tables(dsn: str) -> list[setup.TableInfo]:
    with psycopg.connect(dsn) as conn:
        return setup.list_tables(conn, None)


def source_rows(dsn: str, table: setup.TableInfo) -> list[dict[str, Any]]:
    """Every row of the source table in engine values, ordered by primary key."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'iso_8601';"
                     " SET extra_float_digits = 3; SET bytea_output = 'hex'")
        cols = table_columns(conn, table)
        mapper = TypeMapper(catalog_lookup(conn))
        mappings = [mapper.column(n, oid, mod, key=n in table.pk_columns) for n, oid, mod in cols]
        conv = RowConverter([c[0] for c in cols], [m.convert for m in mappings])
        text_loaders(conn)
        names = ", ".join(f'"{c[0]}"' for c in cols)
        order = ", ".join(f'"{k}"' for k in table.pk_columns)
        rows = conn.execute(f"SELECT {names} FROM {table.sql} ORDER BY {order}").fetchall()
        return [conv.convert(r) for r in rows]


def iceberg_metadata(cfg: RunConfig, source_table: str) -> str:
    ident = iceberg_table_name(cfg.iceberg, source_table)
    return open_catalog(cfg.iceberg).load_table(ident).metadata_location


def load(cfg_path: Path) -> RunConfig:
    return load_config(cfg_path)


@contextmanager
def primary_and_standby(
    bin_dir: Path, standby_settings: dict[str, str]
) -> Iterator[tuple[PrivatePostgres, PrivatePostgres]]:
    """A private primary (wal_level=logical) and a physical standby streaming from it
    (pg_basebackup -R through the physical slot ``standby1``), of ``bin_dir``'s version."""
    base = Path(tempfile.mkdtemp(prefix="rp-pgha-"))
    base.chmod(0o755)  # the servers run as user postgres
    primary = PrivatePostgres(base / "primary", bin_dir=bin_dir)
    standby = PrivatePostgres(base / "standby", bin_dir=bin_dir, standby_of=primary,
                              settings=standby_settings)  # fmt: skip
    try:
        primary.start()
        standby.start()
        yield primary, standby
    finally:
        standby.stop()
        primary.stop()
        shutil.rmtree(base, ignore_errors=True)
