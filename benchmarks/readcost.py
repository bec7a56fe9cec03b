"""What reading the replicated table costs afterwards, with Spark (Iceberg Java).

Three versions of the same rows: the table as the engine left it (data files plus position
and equality deletes, read merge-on-read), the same table compacted (read through Spark and
written as a fresh Iceberg table in a Hadoop catalog: ``CALL system.rewrite_data_files`` needs
a catalog the engine's SQL catalog is not registered as), and a plain copy of the source table
(one Parquet file). For each: ``count(*)`` and a point lookup by key, first run and best of
``repeat`` runs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq


@dataclass
class ReadTimes:
    label: str
    rows: int
    count_first: float
    count_best: float
    lookup_first: float
    lookup_best: float
    files: dict[str, int] = field(default_factory=dict)
    bytes: int = 0


def _time(fn: Callable[[], Any], repeat: int) -> tuple[Any, float, float]:
    out, times = None, []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, times[0], min(times)


def measure(spark: Any, label: str, load: Callable[[], Any], key: int, repeat: int = 3) -> ReadTimes:
    rows, c1, cb = _time(lambda: load().count(), repeat)
    _, l1, lb = _time(lambda: load().where(f"id = {int(key)}").collect(), repeat)
    return ReadTimes(label, int(rows), c1, cb, l1, lb)


def file_counts(spark: Any, metadata_location: str) -> tuple[dict[str, int], int]:
    rows = (
        spark.read.format("iceberg").load(metadata_location + "#files")
        .groupBy("content").agg({"file_size_in_bytes": "sum", "*": "count"}).collect()
    )  # fmt: skip
    names = {0: "data", 1: "position deletes", 2: "equality deletes"}
    counts = {names.get(r[0], str(r[0])): int(r["count(1)"]) for r in rows}
    size = sum(int(r["sum(file_size_in_bytes)"] or 0) for r in rows)
    return counts, size


@dataclass
class ReadCost:
    table: str
    replicated: ReadTimes
    compacted: ReadTimes
    plain: ReadTimes
    compaction_seconds: float
    source_rows: int


def read_cost(spark: Any, root: Path, table: str, metadata_location: str, source_rows: Any,
              key: int) -> ReadCost:  # fmt: skip
    """``source_rows``: the source table as Arrow (for the plain copy)."""
    from spark.session import configure_iceberg_catalog

    root.mkdir(parents=True, exist_ok=True)

    def replicated() -> Any:
        return spark.read.format("iceberg").load(metadata_location)

    rep = measure(spark, "replicated (merge-on-read)", replicated, key)
    rep.files, rep.bytes = file_counts(spark, metadata_location)

    catalog = f"bench_compact_{uuid.uuid4().hex[:8]}"
    configure_iceberg_catalog(
        spark, catalog, {"type": "hadoop", "warehouse": (root / "compacted").as_uri()}
    )
    ident = f"{catalog}.db.{table}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db")
    t0 = time.perf_counter()
    (replicated().writeTo(ident).using("iceberg")
     .tableProperty("format-version", "2").create())  # fmt: skip
    compaction = time.perf_counter() - t0
    comp = measure(spark, "compacted (rewritten)", lambda: spark.table(ident), key)
    spark.sql(f"REFRESH TABLE {ident}")
    meta = spark.sql(f"SELECT file FROM {ident}.metadata_log_entries ORDER BY timestamp DESC")
    latest = meta.first()
    if latest is not None:
        comp.files, comp.bytes = file_counts(spark, latest[0])

    plain_path = root / f"{table}.parquet"
    pq.write_table(source_rows, plain_path, compression="zstd")
    plain = measure(spark, "plain copy of the source (Parquet)",
                    lambda: spark.read.parquet(str(plain_path)), key)  # fmt: skip
    plain.files, plain.bytes = {"data": 1}, plain_path.stat().st_size
    return ReadCost(table, rep, comp, plain, compaction, source_rows.num_rows)
