"""One batch's commits over 100 tables on a SQLite catalog: the file in write-ahead-log mode
(what the engine's SQL catalog now switches it to, ``iceberg/sql_commit``) against
SQLite's default rollback journal, which creates, syncs and deletes a journal file per commit.

    .venv/bin/python -m benchmarks.catalog_journal [--tables 100] [--batches 7] [--dir /tmp]

Per table and batch, the stage's files of a mixed batch (a data file of 1,000 rows, an
equality-delete and a position-delete file) are written first, outside the clock; then the
tables' row deltas are committed one after another (the engine on a local SQL catalog), the
two catalogs alternated batch by batch. Wall seconds per batch; the first batch is warm-up.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _catalog(base: Path, wal: bool, tables: int) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    from replicator.iceberg.sql_commit import FastCommitSqlCatalog

    name = "wal" if wal else "rollback"
    cat = FastCommitSqlCatalog("micro", uri=f"sqlite:///{base}/{name}.db", warehouse=f"file://{base}/{name}")
    if not wal:  # back to SQLite's default: the engine before the switch
        with cat.engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA journal_mode=DELETE")
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()),
                    NestedField(3, "n", LongType()), NestedField(4, "at", TimestamptzType()),
                    identifier_field_ids=[1])  # fmt: skip
    cat.create_namespace("db")
    for i in range(tables):
        cat.create_table(f"db.t{i}", schema, properties={"format-version": "2"})
    return cat


def _journal_mode(cat: Any) -> str:
    with cat.engine.connect() as connection:
        return str(connection.exec_driver_sql("PRAGMA journal_mode").scalar())


def main(argv: list[str] | None = None) -> None:
    from benchmarks.micro import _commit_one, _stage_files

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=100)
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--dir", default="/tmp", help="where the catalogs and warehouses go")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="catalog-journal-", dir=args.dir))
    try:
        cats = {"rollback journal": _catalog(base, False, args.tables), "WAL": _catalog(base, True, args.tables)}
        seconds: dict[str, list[float]] = {name: [] for name in cats}
        for batch in range(args.batches):
            for name, cat in cats.items():
                tables = [cat.load_table(f"db.t{i}") for i in range(args.tables)]
                staged = [_stage_files(t, {}, f"b{batch}") for t in tables]
                t0 = time.perf_counter()
                for table, result in zip(tables, staged, strict=True):
                    _commit_one(table, result)
                seconds[name].append(time.perf_counter() - t0)
        for name, cat in cats.items():
            runs = seconds[name][1:]
            print(f"{name} (journal_mode={_journal_mode(cat)}): {args.tables} commits in "
                  f"{statistics.median(runs):.3f} s median ({statistics.median(runs) / args.tables * 1e3:.2f} ms "
                  f"a table); batches {', '.join(f'{s:.3f}' for s in runs)}")  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
