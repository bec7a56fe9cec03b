"""Micro-benchmarks of single engine parts, each against the code it replaced where that
still exists (same process, same data):

    .venv/bin/python -m benchmarks.micro commits      # SQL-catalog commits, fast path vs pyiceberg's
    .venv/bin/python -m benchmarks.micro staging      # stage_events of mixed events
    .venv/bin/python -m benchmarks.micro staging-tail # 100 tables' block events, with and without
                                                      # a few row-by-row changes after them
    .venv/bin/python -m benchmarks.micro reader       # Postgres reader path: decode + assembly + events
                                                      # (--change-blocks 1 --tables 100: blocks,
                                                      # compiled vs numpy split)
    .venv/bin/python -m benchmarks.micro compaction   # bytes rewritten per byte appended
    .venv/bin/python -m benchmarks.micro deleted-share   # random updates over a big table: rewrites vs threshold
    .venv/bin/python -m benchmarks.micro partitioned  # the apply stage's worker: unpartitioned
                                                      # vs day(created) + bucket(16, id) fan-out
    .venv/bin/python -m benchmarks.micro describe     # a batch's files described for manifests:
                                                      # footers kept by the writer vs read back
                                                      # (local disk, and SeaweedFS S3)
    .venv/bin/python -m benchmarks.micro positions    # v3 position deletes per data file: one sort
                                                      # vs the per-file scan it replaced
    .venv/bin/python -m benchmarks.micro files        # creating a small file in /tmp, /var/tmp, ...

``staging`` has no old path left in the tree: run it on an older checkout for the baseline
(``git worktree add --detach /tmp/old <rev>``, then the same command there).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import decimal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MB = 1 << 20


def commits(before: int, measured: int = 100) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    from replicator.iceberg import sql_commit
    from replicator.iceberg.catalog import make_resilient
    from replicator.iceberg.row_delta import commit_row_delta
    from tests.iceberg.tablekit import SCHEMA, data_file, sql_catalog

    def run(fast: bool) -> float:
        root = Path(tempfile.mkdtemp(prefix="rp-micro-"))
        if fast:
            props = {"uri": f"sqlite:///{root}/catalog.db", "warehouse": f"file://{root}"}
            sql: SqlCatalog = sql_commit.FastCommitSqlCatalog("test", **props)
            sql.create_namespace("db")
        else:
            sql = sql_catalog(root)
        catalog = make_resilient(sql)
        table = catalog.create_table("db.t", SCHEMA, properties={"format-version": "2"})
        files = [data_file(table, f"d{i}", [(i, f"n{i}")]) for i in range(before + measured)]
        t0 = 0.0
        for i, f in enumerate(files):
            if i == before:
                t0 = time.perf_counter()
            commit_row_delta(table, data_files=[f], delete_files=[], snapshot_properties={"replicator.position": str(i)})
        return (time.perf_counter() - t0) / measured * 1000

    print(f"{measured} one-file commits after {before} snapshots: pyiceberg's path {run(False):.1f} ms each, "
          f"fast path {run(True):.1f} ms each")  # fmt: skip


def staging(events: int = 100_000, repeat: int = 5) -> None:
    from replicator.events.deadletter import DeadLetterSink
    from replicator.events.model import ChangeEvent, Op, SourcePosition
    from replicator.pipeline.staging import stage_events

    cols = [("id", "long"), ("a", "int"), ("b", "string"), ("c", "decimal(12,2)"), ("d", "double"),
            ("e", "timestamptz"), ("f", "boolean"), ("g", "date")]  # fmt: skip
    evs = []
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    for i in range(events):
        row = {"id": i, "a": i % 1000, "b": f"name-{i}", "c": decimal.Decimal(i % 100_000) / 100,
               "d": i * 0.25, "e": start + dt.timedelta(seconds=i), "f": i % 3 == 0,
               "g": dt.date(2000, 1, 1) + dt.timedelta(days=i % 9000)}  # fmt: skip
        pos = SourcePosition("postgres", (1, i))
        if i % 10 == 0:
            evs.append(ChangeEvent("t", Op.DELETE, {"id": i}, None, position=pos))
        else:
            evs.append(ChangeEvent("t", Op.UPDATE if i % 2 else Op.CREATE, None, row, position=pos))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        stage_events(evs, cols, ["id"], DeadLetterSink(None))
        best = min(best, time.perf_counter() - t0)
    print(f"stage_events of {events:,} mixed events (8 columns), best of {repeat}: {best:.3f} s")


def staging_tail(events: int = 200_000, tables: int = 100, tail: int = 3, repeat: int = 15) -> None:
    """``stage_events`` of a batch over ``tables`` tables as the reader hands it out (block
    events of the mixed shape, ``reader --change-blocks 1``), each table's events alone and
    with ``tail`` changes after them that came row by row (a poll's last group held fewer
    than ``source.change_blocks`` of the table's changes; issue 27): CPU-s for all tables,
    best of ``repeat``."""
    from collections import defaultdict

    from replicator.events.deadletter import DeadLetterSink
    from replicator.events.model import ChangeEvent, Op, SourcePosition
    from replicator.pipeline.staging import stage_events

    by_table: dict[str, list[Any]] = defaultdict(list)
    for ev in _assembled(_mixed_pgoutput(events, tables=tables), tables, 1):
        by_table[ev.table].append(ev)
    schema = next(iter(by_table.values()))[0].schema_
    cols = [(c.name, c.type) for c in schema.columns]
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)

    def row(table: str, i: int) -> ChangeEvent:
        after = {"id": 10**6 + i, "txn": 5, "a": 7, "b": "x", "c": decimal.Decimal("1.25"), "d": start,
                 "e": 0.5, "f": True}  # fmt: skip
        return ChangeEvent(table, Op.CREATE, None, after, position=SourcePosition("postgres", (2**40, i)))

    with_tail = {t: [*evs, *(row(t, i) for i in range(tail))] for t, evs in by_table.items()}
    for label, batch in (("block events only", by_table), (f"block events + {tail} row-by-row changes", with_tail)):
        best = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            for evs in batch.values():
                stage_events(evs, cols, ["id"], DeadLetterSink(None))
            best = min(best, time.process_time() - t0)
        print(f"stage_events, {len(batch)} tables x {events // tables:,} changes, {label}: {best:.3f} CPU-s "
              f"(best of {repeat})")  # fmt: skip


def compaction(appends: int = 300, file_mb: float = 3.0, target_mb: int = 128, min_input_files: int = 4) -> None:
    from replicator.maintenance.compaction_inputs import (
        MAX_INPUT_TARGETS,
        SMALL_FRACTION,
        Candidate,
        choose_inputs,
    )

    target = target_mb * MB

    def plain(files: list[Candidate]) -> list[Candidate]:
        """The rule before size tiers: every small file, in write order, within the budget."""
        small = [f for f in files if f.size < SMALL_FRACTION * target]
        if len(small) < min_input_files:
            return []
        chosen: list[Candidate] = []
        for f in sorted(small, key=lambda f: f.path):
            if chosen and sum(c.size for c in chosen) + f.size > MAX_INPUT_TARGETS * target:
                break
            chosen.append(f)
        return chosen

    def tiers(files: list[Candidate]) -> list[Candidate]:
        return choose_inputs(files, target_file_bytes=target, min_input_files=min_input_files, delete_files=0)

    for name, rule in (("plain bin-packing", plain), ("size tiers", tiers)):
        files: list[Candidate] = []
        n = appended = rewritten = 0
        for _ in range(appends):
            files.append(Candidate(f"f{n:06d}", int(file_mb * MB), False))
            n += 1
            appended += int(file_mb * MB)
            while picked := rule(files):
                paths = {f.path for f in picked}
                files = [f for f in files if f.path not in paths]
                total = sum(f.size for f in picked)
                rewritten += total
                for out in [target] * (total // target) + ([total % target] if total % target else []):
                    files.append(Candidate(f"f{n:06d}", out, False))
                    n += 1
        print(f"{name}: {appends} appends of {file_mb} MB files -> rewritten / appended "
              f"{rewritten / appended:.1f}, files left {len(files)}")  # fmt: skip


def deleted_share(batches: int = 300, files: int = 40, rows_per_file: int = 1_000_000,
                  updates: int = 10_000, target_mb: int = 128, seed: int = 1) -> None:
    """Random updates over a big table: a step per batch, as between batches. Bytes rewritten
    per byte appended, and the deleted share readers skip at the end, at several
    ``compact_min_deleted_share`` values (0: a file is rewritten for any delete, the old rule)."""
    import numpy as np

    from replicator.maintenance.compaction_inputs import Candidate, choose_inputs

    target = target_mb * MB
    row_bytes = target / rows_per_file
    for share in (0.0, 0.05, 0.1, 0.3):
        rng = np.random.default_rng(seed)
        rows = {f"f{i:06d}": rows_per_file for i in range(files)}
        dead = dict.fromkeys(rows, 0)
        n, appended, rewritten, steps = files, 0.0, 0.0, 0
        for _ in range(batches):
            names = sorted(rows)
            live = np.array([rows[p] - dead[p] for p in names], dtype=float)
            for p, k in zip(names, rng.multinomial(updates, live / live.sum()), strict=True):
                dead[p] += int(k)
            new = f"f{n:06d}"  # the batch's new row versions: one small file
            n += 1
            rows[new], dead[new] = updates, 0
            appended += updates * row_bytes
            cands = [Candidate(p, int(rows[p] * row_bytes), dead[p] > 0, dead[p] / rows[p]) for p in sorted(rows)]
            picked = choose_inputs(cands, target_file_bytes=target, min_input_files=4,
                                   delete_files=batches, min_deleted_share=share)  # fmt: skip
            if picked:
                steps += 1
                kept = sum(rows[c.path] - dead[c.path] for c in picked)
                rewritten += sum(c.size for c in picked)
                for c in picked:
                    del rows[c.path], dead[c.path]
                while kept > 0:
                    out = min(kept, rows_per_file)
                    rows[f"f{n:06d}"], dead[f"f{n:06d}"] = out, 0
                    n, kept = n + 1, kept - out
        total = sum(rows.values())
        print(f"compact_min_deleted_share {share}: {batches} batches of {updates:,} random updates over "
              f"{files * rows_per_file:,} rows -> rewritten / appended {rewritten / appended:.1f}, "
              f"{steps} rewriting steps, deleted rows left {sum(dead.values()) / total:.1%} of {total:,}, "
              f"{len(rows)} files")  # fmt: skip


def partitioned(rows: int = 300_000, days: int = 30, repeat: int = 3) -> None:
    """Rows/s and files of the stage's worker (map + write, in this process) for one batch of
    snapshot reads plus updates that move a tenth of them to another day."""
    import pyarrow as pa
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, DayTransform
    from pyiceberg.types import DecimalType, LongType, NestedField, StringType, TimestamptzType

    from ops_mapping import MappingPolicy
    from ops_mapping.contract import OP_COLUMN, SEQ_COLUMN, before_key_column
    from replicator.iceberg.files import equality_delete_arrow_schema, position_delete_arrow_schema
    from replicator.storage.file_writer import CONTENT_DATA, WriterSpec
    from replicator.storage.partitioning import partition_plan
    from spark.apply_stage import StageSpec, apply_local

    schema = Schema(
        NestedField(1, "id", LongType(), required=True), NestedField(2, "created", TimestamptzType()),
        NestedField(3, "amount", DecimalType(10, 2)), NestedField(4, "note", StringType()),
        identifier_field_ids=[1],
    )  # fmt: skip
    spec = PartitionSpec(
        PartitionField(2, 1000, DayTransform(), "created_day"), PartitionField(1, 1001, BucketTransform(16), "id_bucket"),
        spec_id=1,
    )  # fmt: skip
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    ids = list(range(rows)) + list(range(0, rows, 10))
    n = len(ids)
    staged = pa.table({
        SEQ_COLUMN: pa.array(range(n), pa.int64()),
        OP_COLUMN: ["r"] * rows + ["u"] * (n - rows),
        before_key_column("id"): pa.array([None] * rows + ids[rows:], pa.int64()),
        "id": pa.array(ids, pa.int64()),
        "created": pa.array([start + dt.timedelta(days=(i * 7 + (j >= rows)) % days, seconds=i % 86_400)
                             for j, i in enumerate(ids)], pa.timestamp("us", tz="UTC")),
        "amount": pa.array([decimal.Decimal(i % 10_000) / 100 for i in ids], pa.decimal128(10, 2)),
        "note": [f"note {i}" for i in ids],
    })  # fmt: skip
    for label, plan in (("unpartitioned", None), ("day + bucket(16)", partition_plan(spec, schema))):
        best = float("inf")
        files = 0
        for _ in range(repeat):
            with tempfile.TemporaryDirectory(prefix="rp-micro-") as tmp:
                writer = WriterSpec(
                    data_location=Path(tmp).as_uri(), batch_id="b", data_schema=schema_to_pyarrow(schema),
                    equality_schema=equality_delete_arrow_schema(schema, [1]),
                    position_schema=position_delete_arrow_schema(), partition=plan,
                )  # fmt: skip
                stage = StageSpec(writer, ("id",), ("id", "created", "amount", "note"), MappingPolicy())
                t0 = time.perf_counter()
                result = apply_local(staged, stage)
                best = min(best, time.perf_counter() - t0)
                files = sum(f.content == CONTENT_DATA for f in result.files)
        print(f"{label}: {n:,} events in {best:.2f} s = {n / best:,.0f} events/s, {files} data files")


def _mixed_pgoutput(events: int, seed: int = 1, bulk: bool = False, tables: int = 4) -> list[bytes]:
    """The mixed workload's shape as pgoutput: ``tables`` tables of the 8 ``narrow_table`` columns,
    transactions of 1 (60%), 2-20 (30%) or 50-500 changes (10%), 50% inserts, 40% updates,
    10% deletes over 100k keys, each transaction's changes grouped by table, then deletes,
    updates, inserts (as ``benchmarks.workloads.TxOps`` runs them). ``bulk``: transactions of
    500 inserts of one table instead."""
    import random

    from tests.sources.postgres import pg_testkit as kit

    cols = [(1, "id", 20, -1), (0, "txn", 20, -1), (0, "a", 23, -1), (0, "b", 25, -1),
            (0, "c", 1700, (12 << 16 | 2) + 4), (0, "d", 1184, -1), (0, "e", 701, -1), (0, "f", 16, -1)]  # fmt: skip
    rng = random.Random(seed)

    def row(key: int, txn: int) -> list[str]:
        return [str(key), str(txn), str(rng.randint(-(2**31), 2**31 - 1)),
                f"alpha beta gamma #{rng.randint(0, 10**6)}", f"{rng.randint(-10**11, 10**11) / 100:.2f}",
                "2024-03-04 05:06:07.123456+00", repr(rng.random() * 1e6), "t" if rng.random() < 0.5 else "f"]  # fmt: skip

    msgs = [kit.relation(16400 + t, "public", f"m{t}", cols) for t in range(tables)]
    lsn, n, tx = 0x1000000, 0, 0
    while n < events:
        r = rng.random()
        size = 1 if r < 0.6 else rng.randint(2, 20) if r < 0.9 else rng.randint(50, 500)
        size = 500 if bulk else size
        msgs.append(kit.begin(lsn + 512, 800_000_000_000_000 + tx, 1000 + tx))
        bulk_rel = 16400 + rng.randrange(tables)
        ops = []
        for _ in range(size):
            rel, key, op = 16400 + rng.randrange(tables), rng.randrange(100_000), rng.random()
            ops.append((bulk_rel, key, 0.0) if bulk else (rel, key, op))
        for rel, key, op in sorted(ops, key=lambda o: (o[0], 0 if o[2] >= 0.9 else 1 if o[2] >= 0.5 else 2)):
            if op < 0.5:
                msgs.append(kit.insert(rel, row(key, tx)))
            elif op < 0.9:
                msgs.append(kit.update(rel, row(key, tx)))
            else:
                msgs.append(kit.delete(rel, [str(key)] + [None] * 7))
            n += 1
        msgs.append(kit.commit(lsn + 512, lsn + 560, 800_000_000_000_000 + tx))
        lsn, tx = lsn + 1024, tx + 1
    return msgs


def _assembled(msgs: list[bytes], tables: int, blocks: int) -> list[Any]:
    """The events the Postgres reader path hands out for ``msgs`` (``_mixed_pgoutput``):
    pgoutput decode, the ChangeAssembler (``change_blocks`` = ``blocks``) and its events."""
    from replicator.events.deadletter import DeadLetterSink
    from replicator.sources.postgres.changes import ChangeAssembler, SourceStats
    from replicator.sources.postgres.pgoutput import decode
    from replicator.sources.postgres.setup import TableInfo
    from replicator.sources.postgres.toast import RowCache
    from replicator.sources.postgres.types import TypeMapper

    # A poll's end: every source.poll_max_messages, or a group's worth with blocks (source.py).
    poll = 65_536 if blocks else 10_000
    infos = {f"public.m{t}": TableInfo(16400 + t, "public", f"m{t}", "d", ("id",)) for t in range(tables)}
    asm = ChangeAssembler(
        tables=infos, mapper=TypeMapper(None), committed={}, toast=RowCache(64 << 20), stats=SourceStats(),
        dead_letters=DeadLetterSink(None), fetch_current=lambda *a: None,
    )  # fmt: skip
    asm.change_blocks = blocks
    out: list[Any] = []
    for i, m in enumerate(msgs):
        if blocks and m[0] in b"IUD":  # a row change: kept for a block (source.py does the same)
            if not asm.keep_raw(m):
                out.extend(asm.change_raw(m))
        else:
            out.extend(asm.handle(decode(m), len(m)))
        if i % poll == poll - 1:
            out.extend(asm.flush_run())
    out.extend(asm.flush_run())
    return out


def reader(events: int = 200_000, repeat: int = 3, blocks: int = 0, bulk: bool = False, tables: int = 4) -> None:
    """The Postgres reader thread's per-event CPU without a server: pgoutput decode, the
    ChangeAssembler (conversion, positions, TOAST rules) and the ChangeEvents, kept in a list
    as a batch keeps them; the cyclic collector at CPython's default thresholds and as the
    engine's run sets them (``replicator.pipeline.gc_policy``). ``blocks``: the assembler's
    ``change_blocks`` (runs of changes as block events; then also with the blocks split by
    numpy instead of the compiled ``replicator.native.pgoutput_rows``, the baseline);
    ``bulk``: 500-insert transactions; ``tables``: the changes spread over that many tables."""
    import gc

    from replicator.events.block import row_count
    from replicator.pipeline.gc_policy import run_thresholds
    from replicator.sources.postgres import change_block

    msgs = _mixed_pgoutput(events, bulk=bulk, tables=tables)

    def run() -> int:
        return sum(map(row_count, _assembled(msgs, tables, blocks)))

    compiled = change_block._compiled
    labels = ["collector at CPython's defaults", "collector as the engine's run sets it"]
    if blocks:
        labels.append("collector as the engine's run sets it, blocks split by numpy")
    for label in labels:
        best, n = float("inf"), 0
        if "numpy" in label:
            change_block._compiled = lambda: None  # type: ignore[assignment]
        try:
            for _ in range(repeat):
                gc.collect()
                with run_thresholds() if "engine" in label else contextlib.nullcontext():
                    t0 = time.process_time()
                    n = run()
                    best = min(best, time.process_time() - t0)
        finally:
            change_block._compiled = compiled  # type: ignore[assignment]
        shape = "bulk inserts" if bulk else f"mixed over {tables} table(s)"
        print(f"reader path ({shape}, change_blocks={blocks}), {label}: {n:,} events, best of {repeat}: {best:.3f} CPU-s = "
              f"{n / best:,.0f} events per CPU-second")  # fmt: skip


def _describe_round(tables: list[Any], results: list[Any], kept: bool) -> float:
    import dataclasses

    from replicator.pipeline.written import describe

    todo = [r if kept else dataclasses.replace(r, files=[dataclasses.replace(f, footer=None) for f in r.files])
            for r in results]  # fmt: skip
    t0 = time.perf_counter()
    for t, r in zip(tables, todo, strict=True):
        describe(t, r)
    return time.perf_counter() - t0


def _stage_files(table: Any, io_properties: dict[str, str], batch_id: str, in_memory: bool = False) -> Any:
    """One table's part of a mixed batch as the stage writes it: a data file of 1,000 rows,
    an equality-delete file (100 keys) and a position-delete file (50 rows)."""
    import pyarrow as pa
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    from replicator.iceberg.files import equality_delete_arrow_schema, position_delete_arrow_schema
    from replicator.storage.file_writer import TableFileWriter, WriterSpec
    from spark.apply_stage import StageResult

    spec = WriterSpec(data_location=f"{table.location()}/data", batch_id=batch_id,
                      data_schema=schema_to_pyarrow(table.schema()),
                      equality_schema=equality_delete_arrow_schema(table.schema(), [1]),
                      position_schema=position_delete_arrow_schema(), io_properties=io_properties,
                      position_deletes_in_memory=in_memory)  # fmt: skip
    w = TableFileWriter(spec)
    w.write_data(0, pa.Table.from_pylist(
        [{"id": k, "name": f"name-{k}", "n": k * 7, "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)}
         for k in range(1000)], schema=spec.data_schema))  # fmt: skip
    w.write_equality_deletes(pa.table({"id": pa.array(range(5000, 5100), pa.int64())}))
    w.write_position_deletes(pa.table({"file_index": pa.array([0] * 50, pa.int32()),
                                       "pos": pa.array(range(0, 500, 10), pa.int64())}))  # fmt: skip
    return StageResult(files=w.close(), stats={})


def _commit_one(table: Any, result: Any) -> None:
    from replicator.iceberg.table_commit import commit_batch
    from replicator.pipeline.written import describe

    out = describe(table, result)
    commit_batch(table, data_files=out.data, delete_files=out.deletes, snapshot_properties={})


def describe_files(tables: int = 100, repeat: int = 5) -> None:
    """One batch over ``tables`` tables (per table a data file of 1,000 rows, an equality-delete
    and a position-delete file, as the mixed workload's batches write) described for the
    manifests, with the footers the writer kept and by reading each footer back; wall seconds,
    best of ``repeat``, alternated."""
    import shutil

    from pyiceberg.catalog import load_catalog
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    from sample_dbs.object_store import PrivateSeaweed, weed_binary

    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()),
                    NestedField(3, "n", LongType()), NestedField(4, "at", TimestamptzType()),
                    identifier_field_ids=[1])  # fmt: skip
    base = Path(tempfile.mkdtemp(prefix="micro-describe-", dir="/var/tmp"))
    stores: list[tuple[str, str, dict[str, str], Any]] = [("local disk", f"file://{base}/wh", {}, None)]
    try:
        weed_binary()
        server = PrivateSeaweed(base / "weed").start()
        stores.append(("SeaweedFS S3 + REST catalog (loopback)", "", server.catalog_properties(), server))
    except FileNotFoundError as exc:
        print(f"S3 left out: {exc}")
    try:
        for name, warehouse, props, _server in stores:
            cat = (SqlCatalog("micro", uri=f"sqlite:///{base}/{len(name)}.db", warehouse=warehouse) if warehouse
                   else load_catalog("micro", **props))  # fmt: skip
            cat.create_namespace("db")
            props = {k: v for k, v in props.items() if k.startswith("s3.")}
            made = [cat.create_table(f"db.t{i}", schema) for i in range(tables)]
            results = [_stage_files(t, props, "b1") for t in made]
            best = {True: float("inf"), False: float("inf")}
            for _ in range(repeat):
                for kept in (False, True):
                    best[kept] = min(best[kept], _describe_round(made, results, kept))
            files = sum(len(r.files) for r in results)
            print(f"{name}: {tables} tables, {files} files, best of {repeat}: footers read back "
                  f"{best[False]:.3f} s ({best[False] / files * 1e3:.2f} ms a file), kept by the writer "
                  f"{best[True]:.3f} s ({best[True] / files * 1e3:.2f} ms a file): {best[False] / best[True]:.1f}x")  # fmt: skip
            # Then each table's row delta, one after another (the engine on a local SQL
            # catalog), and a second batch's by 4 threads (iceberg.parallel_tables unset on a
            # remote catalog or object storage).
            t0 = time.perf_counter()
            for t, r in zip(made, results, strict=True):
                _commit_one(t, r)
            serial = time.perf_counter() - t0
            second = [_stage_files(t, props, "b2") for t in made]
            t0 = time.perf_counter()
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(_commit_one, made, second))
            threaded = time.perf_counter() - t0
            print(f"{name}: the {tables} tables' commits one after another {serial:.3f} s "
                  f"({serial / tables * 1e3:.1f} ms a table); by 4 threads {threaded:.3f} s")
        _v3_positions(base, schema, tables, repeat, stores[-1][3])
    finally:
        for *_rest, server in stores:
            if server is not None:
                server.stop()
        shutil.rmtree(base, ignore_errors=True)


def _v3_positions(base: Path, schema: Any, tables: int, repeat: int, server: Any) -> None:
    """Format v3: each table's position deletes written to a Parquet file, read back as a
    deletion vector and the file deleted (the Spark stage's way before), against kept as rows
    in the committing process (the driver's), and as rows handed over in a Spark task's result
    (the Spark stage's way now: an Arrow IPC stream); stage + describe, wall seconds, best of
    ``repeat``."""
    from pyarrow import fs as pafs
    from pyiceberg.catalog.sql import SqlCatalog

    from replicator.iceberg.v3_metadata import create_v3_table
    from replicator.pipeline.written import describe
    from spark.apply_stage import _ipc, _rows

    places: list[tuple[str, str, dict[str, str]]] = [("local disk", f"file://{base}/v3", {})]
    if server is not None:  # a general-purpose bucket: the REST catalog's refuses Puffin files
        bucket = "v3" + server.access_key[-6:]
        pafs.S3FileSystem(access_key=server.access_key, secret_key=server.secret_key, region="us-east-1",
                          endpoint_override=server.s3_endpoint, allow_bucket_creation=True).create_dir(bucket)  # fmt: skip
        places.append(("SeaweedFS S3, SQL catalog (loopback)", f"s3://{bucket}/wh", server.s3_properties()))
    for name, warehouse, props in places:
        cat = SqlCatalog("v3", uri=f"sqlite:///{base}/v3-{len(name)}.db", warehouse=warehouse, **props)
        cat.create_namespace("db")
        made = [create_v3_table(cat, f"db.t{i}", schema, location=f"{warehouse}/db/t{i}") for i in range(tables)]
        best = {"files": float("inf"), "rows": float("inf"), "ipc": float("inf")}
        for r in range(repeat):
            for way in best:
                t0 = time.perf_counter()
                for t in made:
                    result = _stage_files(t, props, f"r{r}{way}", in_memory=way != "files")
                    if way == "ipc":  # as a Spark task hands them over: in its result row
                        result = dataclasses.replace(result, files=[
                            dataclasses.replace(f, rows=_rows(_ipc(f.rows)) if f.rows is not None else None)
                            for f in result.files])  # fmt: skip
                    describe(t, result)
                best[way] = min(best[way], time.perf_counter() - t0)
        print(f"{name}, format v3: {tables} tables staged and described, best of {repeat}: position deletes "
              f"as files {best['files']:.3f} s, kept as rows {best['rows']:.3f} s "
              f"({(best['files'] - best['rows']) / tables * 1e3:.1f} ms a table saved), as rows in a Spark "
              f"task's result (Arrow IPC) {best['ipc']:.3f} s")  # fmt: skip


def _positions_by_scan(out: dict[str, Any], rows: Any) -> None:
    """``table_commit.add_positions`` before a45e824 (the baseline): one filter over every row
    per data file."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from replicator.iceberg.roaring import union

    for name in pc.unique(rows.column("file_path")).to_pylist():
        chosen = rows.filter(pc.equal(rows.column("file_path"), pa.scalar(name)))
        values = np.unique(chosen.column("pos").to_numpy().astype(np.uint64))
        out[str(name)] = union(out[str(name)], values) if str(name) in out else values


def positions(n: int = 100_000, repeat: int = 5) -> None:
    """Position-delete rows grouped into positions per data file (a v3 table's deletion
    vectors): one sort (``table_commit.add_positions``) against the per-file scan it replaced;
    ``n`` rows over 1 to 10,000 data files, wall seconds, best of ``repeat``."""
    import numpy as np
    import pyarrow as pa

    from replicator.iceberg.table_commit import add_positions

    rng = np.random.default_rng(1)
    for files in (1, 100, 1_000, 10_000):
        paths = np.array([f"s3://bucket/wh/db/t/data/00000-{i:05d}-0123456789abcdef.parquet" for i in range(files)])
        rows = pa.table({"file_path": pa.array(paths[np.sort(rng.integers(0, files, n))]),
                         "pos": pa.array(rng.integers(0, 1_000_000, n), pa.int64())})  # fmt: skip
        best = {}
        for label, fn in (("per-file scan", _positions_by_scan), ("one sort", add_positions)):
            times = []
            for _ in range(repeat if files < 10_000 or label == "one sort" else 1):
                t0 = time.perf_counter()
                fn({}, rows)
                times.append(time.perf_counter() - t0)
            best[label] = min(times)
        print(f"{n:,} position deletes over {files:,} data files: per-file scan {best['per-file scan']:.3f} s, "
              f"one sort {best['one sort']:.3f} s")  # fmt: skip


def file_creation(files: int = 1_000) -> None:
    """What creating a small file costs in a few directories of this machine (``open`` with
    O_CREAT, a 100-byte write, ``close``): ms a file. A batch over 100 tables creates ~800
    files (``benchmarks/README``, file creation under ``/tmp``)."""
    import os
    import shutil

    for root in ("/tmp", "/var/tmp", str(Path.cwd()), str(Path.home())):
        d = tempfile.mkdtemp(prefix="micro-files-", dir=root)
        try:
            t0 = time.perf_counter()
            for i in range(files):
                fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                os.write(fd, b"x" * 100)
                os.close(fd)
            print(f"{root}: {(time.perf_counter() - t0) / files * 1e3:.3f} ms a file ({files:,} files)")
        finally:
            shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["commits", "staging", "staging-tail", "compaction", "partitioned", "deleted-share", "reader",
                                     "describe", "positions", "files"])  # fmt: skip
    ap.add_argument("--change-blocks", type=int, default=0, help="reader: runs of inserts as blocks (0: off)")
    ap.add_argument("--bulk", action="store_true", help="reader: 500-insert transactions of one table")
    ap.add_argument("--tables", type=int, default=4, help="reader: the changes spread over this many tables")
    args = ap.parse_args(argv)
    if args.what == "commits":
        for before in (1, 20, 120):
            commits(before)
    elif args.what == "staging":
        staging()
    elif args.what == "staging-tail":
        staging_tail()
    elif args.what == "reader":
        reader(blocks=args.change_blocks, bulk=args.bulk, tables=args.tables)
    elif args.what == "partitioned":
        partitioned()
    elif args.what == "describe":
        describe_files()
    elif args.what == "deleted-share":
        deleted_share()
    elif args.what == "positions":
        positions()
    elif args.what == "files":
        file_creation()
    else:
        for size in (3.0, 1.0):
            compaction(file_mb=size, appends=300 if size == 3.0 else 1000)


if __name__ == "__main__":
    main()
