"""Throughput of BatchMapper on 1M events (not a test; run by hand).

    .venv/bin/python tests/ops_mapping/bench_mapper.py [--events N] [--chunk ROWS] [--memory]

Workloads: ``snapshot`` (only 'r' of distinct keys, upsert_reads: one equality delete per
row), ``stream`` (40% 'c' of new keys, 40% 'u', 20% 'd' of keys from earlier batches and of
this batch, so both delete kinds occur), ``composite`` (``stream`` with a two-column key).
Only map_chunk + finish are timed; building the input is not.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ops_mapping import BatchMapper, MappingPolicy, before_key_column  # noqa: E402

SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.float64()),
        ("qty", pa.int32()),
        ("updated_at", pa.timestamp("us", "UTC")),
    ]
)


def build(workload: str, n: int, chunk: int, keys: tuple[str, ...]) -> list[pa.RecordBatch]:
    rnd = random.Random(42)
    ops: list[str] = []
    ids: list[int] = []
    next_new = 10_000_000  # keys of earlier batches are 0..9_999_999
    written: list[int] = []
    for _ in range(n):
        x = rnd.random()
        if workload == "snapshot" or x < 0.4:
            ops.append("r" if workload == "snapshot" else "c")
            ids.append(next_new)
            written.append(next_new)
            next_new += 1
        else:
            ops.append("u" if x < 0.8 else "d")
            # half of the updates/deletes hit a key written in this batch
            use_batch = written and rnd.random() < 0.5
            ids.append(rnd.choice(written) if use_batch else rnd.randrange(10_000_000))
    tenants = [f"t{i % 7}" for i in ids]
    ts = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    after_ok = [op != "d" for op in ops]
    before_ok = [op in ("u", "d") for op in ops]
    cols: dict[str, pa.Array] = {
        "__rep_seq": pa.array(range(1, n + 1), pa.int64()),
        "__rep_op": pa.array(ops, pa.string()),
    }
    for k, values in (("tenant", tenants), ("id", ids)):
        if k in keys:
            cols[before_key_column(k)] = pa.array(
                [v if ok else None for v, ok in zip(values, before_ok, strict=True)],
                SCHEMA.field(k).type,
            )
    data: dict[str, list[Any]] = {
        "tenant": tenants,
        "id": ids,
        "name": [f"customer-{i:012d}" for i in ids],
        "amount": [i * 0.01 for i in range(n)],
        "qty": [i % 1000 for i in range(n)],
        "updated_at": [ts] * n,
    }
    for f in SCHEMA:
        cols[f.name] = pa.array(
            [v if ok else None for v, ok in zip(data[f.name], after_ok, strict=True)], f.type
        )
    table = pa.table(cols)
    return table.to_batches(max_chunksize=chunk)


def run(batches: list[pa.RecordBatch], keys: tuple[str, ...]) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds, stats); CPU time is the fair number on a shared machine."""
    mapper = BatchMapper(keys, SCHEMA, MappingPolicy(target_file_bytes=16 * 1024 * 1024))
    wall, cpu = time.perf_counter(), time.process_time()
    for b in batches:
        mapper.map_chunk(b)
    tail = mapper.finish()
    return time.perf_counter() - wall, time.process_time() - cpu, tail.stats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=65_536)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory", action="store_true", help="peak traced memory of the map")
    args = parser.parse_args()
    cases = [
        ("snapshot", ("id",)),
        ("stream", ("id",)),
        ("composite", ("tenant", "id")),
    ]
    for name, keys in cases:
        batches = build("stream" if name == "composite" else name, args.events, args.chunk, keys)
        runs = [run(batches, keys) for _ in range(args.repeat)]
        wall = min(r[0] for r in runs)
        cpu = min(r[1] for r in runs)
        print(
            f"{name:9s} {args.events / wall:11,.0f} events/s wall ({wall:.3f} s), "
            f"{args.events / cpu:11,.0f} events/s CPU ({cpu:.3f} s)  {runs[0][2]}"
        )
        if args.memory:
            tracemalloc.start()
            mapper = BatchMapper(keys, SCHEMA, MappingPolicy())
            for b in batches:
                mapper.map_chunk(b)
            peak = tracemalloc.get_traced_memory()[1]
            live = len(mapper.key_positions)
            tracemalloc.stop()
            mapper.finish()
            print(f"          peak traced {peak / 1e6:.1f} MB for {live:,} live keys")


if __name__ == "__main__":
    main()
