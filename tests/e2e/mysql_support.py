"""Helpers for MySQL/MariaDB -> Iceberg end-to-end tests: config files, the source tables as
the engine's type mapping sees them (the MySQL source's own snapshot converters), and the
comparison of every source table with its Iceberg table through Spark and DuckDB."""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

import yaml

from replicator.config import RunConfig, load_config
from replicator.iceberg.tables import iceberg_table_name, open_catalog
from replicator.sources.mysql import setup
from replicator.sources.mysql.snapshot import describe_tables, snap_table
from replicator.sources.mysql.types import ValueConversionError, quote_ident
from tests.judges import duckdb_rows, spark_rows

Row = dict[str, Any]


def write_config(
    root: Path, dsn: str, *, server_id: int, max_events: int = 5000, **source: Any
) -> Path:
    """``root/replicator.yaml``: the private server, a sqlite catalog, warehouse and state
    in ``root`` (relative paths resolve against the file's folder)."""
    cfg = {
        "source": {"type": "mysql", "dsn": dsn, "server_id": server_id, **source},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": max_events, "max_seconds": 2},
        "state_dir": "state",
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def load(cfg_path: Path) -> RunConfig:
    return load_config(cfg_path)


def source_tables(dsn: str) -> list[setup.TableInfo]:
    """The tables the source replicates by default: those with a primary key in the DSN's
    database."""
    params = setup.parse_dsn(dsn)
    conn = setup.connect(params)
    try:
        return setup.list_tables(conn, None, params.database)
    finally:
        conn.close()


def _key(row: Row, keys: list[str]) -> tuple[Any, ...]:
    return tuple(row[k] for k in keys)


def source_rows(
    dsn: str, table: setup.TableInfo, *, dead: list[tuple[Any, ...]] | None = None
) -> list[Row]:
    """Every row of the source table in engine values, ordered by primary key value (Python
    order: the server's collation may order string keys differently from the judges). Rows
    the source cannot convert (it dead-letters them, e.g. a zero date in a key column) are
    left out and appended to ``dead``."""
    params = setup.parse_dsn(dsn)
    conn = setup.connect(params)  # time_zone '+00:00', as the source reads TIMESTAMPs
    try:
        st = snap_table(table, describe_tables(conn, [table])[table.qualified], "null")
        select = ", ".join(m.select for m in st.mappings)
        order = ", ".join(quote_ident(k) for k in table.pk_columns)
        rows = setup.query(conn, f"SELECT {select} FROM {table.sql} ORDER BY {order}")
    finally:
        conn.close()
    out = []
    for r in rows:
        try:
            out.append(st.rows.from_snapshot(r))
        except ValueConversionError:
            if dead is not None:
                dead.append(tuple(r))
    return sorted(out, key=lambda r: _key(r, list(table.pk_columns)))


def iceberg_metadata(cfg: RunConfig, source_table: str) -> str:
    ident = iceberg_table_name(cfg.iceberg, source_table)
    return open_catalog(cfg.iceberg).load_table(ident).metadata_location


def iceberg_schema(cfg_path: Path, source_table: str) -> dict[str, str]:
    """Iceberg column name -> type, in schema order."""
    cfg = load(cfg_path)
    t = open_catalog(cfg.iceberg).load_table(iceberg_table_name(cfg.iceberg, source_table))
    return {f.name: str(f.field_type) for f in t.schema().fields}


def f32(v: Any) -> Any:
    """A float at Iceberg ``float`` (32-bit) precision."""
    return struct.unpack("f", struct.pack("f", v))[0] if isinstance(v, float) else v


def first_diff(got: list[Row], expected: list[Row], keys: list[str] | None = None) -> str:
    if len(got) != len(expected):
        msg = f"{len(got)} rows in Iceberg, {len(expected)} in the source"
        if keys:
            have = {_key(r, keys) for r in got}
            want = {_key(r, keys) for r in expected}
            missing, extra = sorted(want - have), sorted(have - want)
            msg += (f"; {len(missing)} missing, e.g. {missing[:10]}; {len(extra)} extra, "
                    f"e.g. {extra[:10]}")
        return msg
    for g, e in zip(got, expected, strict=True):
        if g != e:
            cols = [c for c in e if g.get(c) != e[c]]
            return f"row {e!r:.300}: columns {cols}: {[(g.get(c), e[c]) for c in cols]!r:.500}"
    return ""


def assert_tables_equal(
    cfg_path: Path, dsn: str, *, duckdb: bool = True, seconds: dict[str, float] | None = None
) -> dict[str, int]:
    """Every source table equals its Iceberg table, read by Iceberg Java (Spark) and, unless
    told otherwise, DuckDB; returns the row count per table. Columns Iceberg keeps after a
    DROP COLUMN are ignored. ``seconds`` collects the time spent per reader."""
    cfg = load(cfg_path)
    counts: dict[str, int] = {}
    spent = seconds if seconds is not None else {}
    for t in source_tables(dsn):
        t0 = time.perf_counter()
        expected = source_rows(dsn, t)
        spent["source"] = spent.get("source", 0.0) + time.perf_counter() - t0
        loc = iceberg_metadata(cfg, t.qualified)
        keys = list(t.pk_columns)
        cols = list(expected[0]) if expected else []
        judges = [("Spark", spark_rows)] + ([("DuckDB", duckdb_rows)] if duckdb else [])
        for name, judge in judges:
            t0 = time.perf_counter()
            got = [{c: r.get(c) for c in cols} for r in judge(loc, order_by=keys)]
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
            assert got == expected, (
                f"{name} disagrees on {t.qualified}: {first_diff(got, expected, keys)}"
            )
        counts[t.qualified] = len(expected)
    return counts
