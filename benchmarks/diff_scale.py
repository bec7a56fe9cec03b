"""Scale of ``replicator diff``: time and peak memory on a generated N-row table.

    .venv/bin/python -m benchmarks.diff_scale --rows 1000000 [--mutate 100] [--chunk-rows 10000]

Set-up (not measured): a private Postgres with ``bench(id bigint PK, a int, b text,
c numeric(12,2), d timestamptz)`` filled by ``generate_series``; the same rows written to an
Iceberg table directly (pyarrow Parquet + ``commit_row_delta``, with a ``replicator.position``
before the diff's snapshot) and, with ``--mutate N``, N rows deleted, added or changed in
Iceberg (equality deletes + data), so the row-by-row pass runs too. A logical slot and a
publication stand in for a stopped engine that has applied everything.

Measured: ``replicator diff --json`` in a child process, which reports its own wall time and
peak RSS (VmHWM) plus those of the Spark JVM and the Python workers it started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BASE_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z in microseconds


def _vm_hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def run_diff_child(config: str, chunk_rows: int) -> None:
    """In the child: run the diff, then report time and peak RSS of this process and of the
    JVM and Python workers below it (read before Spark stops)."""
    from replicator.config import load_config
    from replicator.verify.diff import run_diff
    from replicator.verify.report import to_json

    cfg = load_config(Path(config))
    t0 = time.perf_counter()
    report = run_diff(cfg, chunk_rows=chunk_rows, progress=False)
    seconds = time.perf_counter() - t0
    procs = _descendants(os.getpid())
    jvm = [p for p in procs if "java" in _cmdline(p)]
    workers = [p for p in procs if "pyspark.daemon" in _cmdline(p)]  # daemon + its forks
    print(json.dumps({
        "seconds": round(seconds, 2),
        "exit_code": report.exit_code,
        "python_peak_rss_mib": round(_vm_hwm_kib(os.getpid()) / 1024, 1),
        "jvm_peak_rss_mib": round(max([_vm_hwm_kib(p) for p in jvm] or [0]) / 1024, 1),
        "worker_peak_rss_mib": round(max([_vm_hwm_kib(p) for p in workers] or [0]) / 1024, 1),
        "report": json.loads(to_json(report)),
    }))  # fmt: skip


def _setup_postgres(dsn: str, rows: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE bench (id bigint PRIMARY KEY, a int, b text, c numeric(12,2), "
            "d timestamptz)"
        )
        conn.execute(
            "INSERT INTO bench SELECT i, i %% 1000, 'row-' || i, (i %% 100000)::numeric(12,2), "
            "timestamptz '2024-01-01 00:00:00+00' + i * interval '1 second' "
            "FROM generate_series(1, %s) i",
            (rows,),
        )
        conn.execute("VACUUM ANALYZE bench")
        conn.execute("CREATE PUBLICATION replicator FOR TABLE bench")
        conn.execute("SELECT pg_create_logical_replication_slot('replicator', 'pgoutput')")


def _arrow_rows(lo: int, hi: int, schema: Any) -> Any:
    """Rows lo..hi-1 exactly as the Postgres side generates them, built column-wise."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(np.arange(lo, hi, dtype=np.int64))
    cols = [
        ids,
        pc.cast(pc.remainder(ids, 1000), pa.int32()),
        pc.binary_join_element_wise("row-", pc.cast(ids, pa.string()), ""),
        pc.cast(pc.cast(pc.remainder(ids, 100_000), pa.int32()), pa.decimal128(12, 2)),
        pa.array(BASE_US + np.arange(lo, hi, dtype=np.int64) * 1_000_000,
                 pa.timestamp("us", tz="UTC")),
    ]  # fmt: skip
    return pa.Table.from_arrays(
        [c.cast(f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
    )


def _setup_iceberg(root: Path, dsn: str, rows: int, mutate: int) -> None:
    import psycopg
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        DecimalType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    from replicator.checkpoint.model import POSITION_KEY as POSITION_PROPERTY
    from replicator.config import IcebergConfig
    from replicator.events.model import SourcePosition
    from replicator.iceberg.files import (
        data_file_from_parquet,
        equality_delete_arrow_schema,
        equality_delete_file_from_parquet,
    )
    from replicator.iceberg.row_delta import commit_row_delta
    from replicator.iceberg.tables import (
        SOURCE_TABLE_PROPERTY,
        TABLE_PROPERTIES,
        open_catalog,
    )

    cfg = IcebergConfig(catalog_uri=f"sqlite:///{root}/catalog.db", warehouse=str(root / "wh"))
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "a", IntegerType()),
        NestedField(3, "b", StringType()),
        NestedField(4, "c", DecimalType(12, 2)),
        NestedField(5, "d", TimestamptzType()),
        identifier_field_ids=[1],
    )
    table = open_catalog(cfg).create_table(
        "cdc.bench", schema, properties={**TABLE_PROPERTIES, SOURCE_TABLE_PROPERTY: "public.bench"}
    )
    arrow_schema = schema_to_pyarrow(table.schema())
    data_dir = Path(str(table.location()).removeprefix("file://")) / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    files = []
    step = 250_000
    for i, lo in enumerate(range(1, rows + 1, step)):
        path = data_dir / f"bench-{i:04d}.parquet"
        pq.write_table(_arrow_rows(lo, min(lo + step, rows + 1), arrow_schema), path,
                       row_group_size=step)  # fmt: skip
        files.append(data_file_from_parquet(table, path.as_uri()))
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots "
            "WHERE slot_name = 'replicator'"
        ).fetchone()
    assert row is not None
    position = SourcePosition(source="postgres", parts=(int(row[0]), 0)).to_json()
    commit_row_delta(table, data_files=files, delete_files=[],
                     snapshot_properties={POSITION_PROPERTY: position})  # fmt: skip
    if mutate:
        # A third each: deleted (missing), changed (delete + new value), added (extra).
        n = max(mutate // 3, 1)
        every = max(rows // (2 * n), 1)
        gone = [1 + k * every for k in range(n)]
        changed = [2 + k * every for k in range(n)]
        deletes = pa.Table.from_pylist(
            [{"id": i} for i in gone + changed], schema=equality_delete_arrow_schema(schema, [1])
        )
        del_path = data_dir / "tamper-eqdel.parquet"
        pq.write_table(deletes, del_path)
        new = _arrow_rows(1, 2, arrow_schema).to_pylist()[0]
        added = [dict(new, id=rows + 1 + k) for k in range(n)]
        edited = [
            dict(r, b="edited")
            for i in changed
            for r in _arrow_rows(i, i + 1, arrow_schema).to_pylist()
        ]
        add_path = data_dir / "tamper-data.parquet"
        pq.write_table(pa.Table.from_pylist(added + edited, schema=arrow_schema), add_path)
        commit_row_delta(
            table,
            data_files=[data_file_from_parquet(table, add_path.as_uri())],
            delete_files=[equality_delete_file_from_parquet(table, del_path.as_uri(), [1])],
            snapshot_properties={"replicator.writer-id": "benchmark-tamper"},
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--mutate", type=int, default=0, help="rows to change in Iceberg first")
    ap.add_argument("--chunk-rows", type=int, default=10_000)
    ap.add_argument("--child", metavar="CONFIG", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        run_diff_child(args.child, args.chunk_rows)
        return

    import yaml

    from sample_dbs.postgres.server import PrivatePostgres

    base = Path(tempfile.mkdtemp(prefix="rp-diffbench-"))
    pg_dir = tempfile.mkdtemp(prefix="rp-diffbench-pg-")  # its own: handed to user postgres
    try:
        with PrivatePostgres(pg_dir) as pg:
            t0 = time.perf_counter()
            _setup_postgres(pg.dsn, args.rows)
            _setup_iceberg(base, pg.dsn, args.rows, args.mutate)
            setup_s = time.perf_counter() - t0
            config = base / "replicator.yaml"
            config.write_text(yaml.safe_dump({
                "source": {"type": "postgres", "dsn": pg.dsn},
                "iceberg": {"catalog_uri": f"sqlite:///{base}/catalog.db",
                            "warehouse": str(base / "wh"), "namespace": "cdc"},
                "state_dir": str(base / "state"),
            }))  # fmt: skip
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.diff_scale", "--child", str(config),
                 "--chunk-rows", str(args.chunk_rows)],
                cwd=ROOT, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                sys.exit(f"diff child failed:\n{proc.stderr[-3000:]}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(pg_dir, ignore_errors=True)
    (t,) = result["report"]["tables"]
    print(json.dumps({
        "rows": args.rows, "mutated": args.mutate, "chunk_rows": args.chunk_rows,
        "setup_seconds": round(setup_s, 1),
        "diff_seconds": result["seconds"], "exit_code": result["exit_code"],
        "python_peak_rss_mib": result["python_peak_rss_mib"],
        "jvm_peak_rss_mib": result["jvm_peak_rss_mib"],
        "worker_peak_rss_mib": result["worker_peak_rss_mib"],
        "source_rows": t["source_rows"], "iceberg_rows": t["iceberg_rows"],
        "missing": t["missing"], "extra": t["extra"], "changed": t["changed"],
        "ranges": t["ranges"], "differing_ranges": t["differing_ranges"],
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
