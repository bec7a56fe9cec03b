"""REPORT.md, the PNG charts and the short console table, from ``results.json``'s content.

.venv/bin/python -m benchmarks.report benchmarks/results/results.json   # re-render
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks import memflat, partitioned, position_mode, targets
from benchmarks.resources import (
    SOURCE_NAMES,
    WORKLOAD_ORDER,
    cpu_lines,
    memory_lines,
    resource_targets,
)
from benchmarks.resources import fmt as _f
from benchmarks.resources import table as _table


def _ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "n/a"
    return f"{a / b:.2f}x"


def _snapshot_paths(results: dict[str, Any]) -> list[str]:
    """The Postgres snapshot read by COPY into Arrow (the default) beside the same snapshot
    read row by row (``source.snapshot_copy: false``), same run, same table."""
    r = results.get("postgres", {}).get("snapshot")
    if not r or not r.get("snapshot") or not r.get("snapshot_rowwise"):
        return []
    fast, slow = r["snapshot"], r["snapshot_rowwise"]
    rows = [[name, _f(e["events"]), f"{e['seconds']:.2f}", f"**{_f(e['rate'])}**",
             _f(e.get("rate_after_startup")), f"{e['rate'] / slow['rate']:.2f}x", e["loadavg"]]
            for name, e in (("COPY chunks -> Arrow (default)", fast),
                            ("row by row (snapshot_copy: false)", slow))]  # fmt: skip
    for x in r.get("raw", []):
        rows.append([x["name"], _f(x["row_messages"]), f"{x['seconds']:.2f}", _f(x["rate"]),
                     "", f"{x['rate'] / slow['rate']:.2f}x", ""])  # fmt: skip
    split_fast = dict(time_split(fast, "postgres", snapshot=True))
    split_slow = dict(time_split(slow, "postgres", snapshot=True))
    parts = [k for k in split_slow if k in split_fast]
    split_rows = [[k, f"{split_fast[k]:.2f}", f"{split_slow[k]:.2f}"] for k in parts]
    split_rows.append(["**wall**", f"**{fast['seconds']:.2f}**", f"**{slow['seconds']:.2f}**"])
    return [
        "### Initial snapshot: COPY into Arrow vs row by row (PostgreSQL)", "",
        "The same table snapshotted twice in this run by two engines (own slots and "
        "warehouses): chunks read by `COPY (SELECT ... ORDER BY key LIMIT n) TO STDOUT` into "
        "Arrow, events carrying a view of the chunk and staging slicing its columns (the "
        "default), and the previous row-by-row path. The row-by-row engine reads second "
        "(table in the page cache). *After start-up*: from the start of the first poll that "
        "read rows to the last commit (engine, Spark table and slot set-up left out). The raw "
        "COPY of the whole table into /dev/null runs after both engines, best of two.", "",
        _table(["path", "rows", "seconds", "rows/s from engine start", "rows/s after start-up",
                "vs row by row", "load avg"], rows), "",
        _table(["part (seconds)", "COPY", "row by row"], split_rows), "",
    ]  # fmt: skip


def lag_label(key: str, x: dict[str, Any]) -> str:
    """A lag result's row name: its source, and the engine setting it ran with, if any."""
    name = SOURCE_NAMES.get(x.get("source", key), key)
    return f"{name} ({x['setting']})" if x.get("setting") else name


def time_split(e: dict[str, Any], kind: str, *, snapshot: bool = False) -> list[tuple[str, float]]:
    """The engine's wall time of a phase, split into parts that add up to it."""
    p = e["parts"]
    w = e.get("worker") or {}
    wall = e["seconds"]
    read = p.get("source_read", 0.0)
    stage = p.get("summary_stage_seconds", 0.0)
    commit = p.get("summary_commit_seconds", 0.0)
    spark_job = p.get("spark_job", 0.0)
    driver_stage = p.get("driver_stage", 0.0)  # small batches: the stage without a Spark job
    catalog = p.get("catalog_commit", 0.0)
    staging = p.get("staging", 0.0)
    apply_table = p.get("apply_table", 0.0)
    mapping = w.get("map", 0.0)
    writing = w.get("write", 0.0) + w.get("write_close", 0.0)
    parts: list[tuple[str, float]] = []
    # The source runs on the reader thread, overlapping the apply: its parts are shown with
    # a "(reader thread)" mark and are not among the parts that add up to the wall time.
    if snapshot:
        parts.append(("source: read (snapshot SELECT + convert)", read))
    elif kind == "postgres" and "pg_transport" in p:
        transport = p.get("pg_transport", 0.0)
        decode = p.get("pg_decode", 0.0)
        parts += [
            ("source: replication transport (libpq)", transport),
            ("source: pgoutput decode", decode),
            (
                "source: events (types, before/after, ChangeEvent)",
                max(read - transport - decode, 0),
            ),
        ]
    elif "binlog_fetch_parse" in p:
        fetch = p.get("binlog_fetch_parse", 0.0)
        parts += [
            ("source: binlog fetch + event parse (mysql-replication)", min(fetch, read)),
            ("source: rows, types, ChangeEvent", max(read - fetch, 0)),
        ]
    else:
        parts.append(("source: read (snapshot SELECT + convert)", read))
    parts += [
        ("staging: events -> Arrow columns (driver)", staging),
        ("staging: Arrow -> staged Parquet file", max(stage - spark_job - driver_stage, 0)),
    ]
    if driver_stage:
        parts.append(("stage in the driver (small batches: mapping + file writing)", driver_stage))
    if w:
        parts += [
            (
                "Spark job: scheduling, read, sort, Arrow transfer",
                max(spark_job - mapping - writing, 0),
            ),
            ("Spark worker: ops mapping", mapping),
            ("Spark worker: file writing (Parquet)", writing),
        ]
    else:
        parts.append(("Spark job (mapping + file writing included)", spark_job))
    parts += [
        ("commit: DataFiles from Parquet footers, refresh", max(commit - catalog, 0)),
        ("commit: row-delta snapshot (pyiceberg + SQLite catalog)", catalog),
        (
            "other apply (table ensure / schema check)",
            max(apply_table - staging - stage - commit, 0),
        ),
        ("source acknowledge", p.get("source_ack", 0.0)),
        ("maintenance between batches (conversion, compaction, expiry)", p.get("maintenance", 0.0)),
    ]
    parts = [(f"{k} {READER_MARK}" if k.startswith("source:") else k, v) for k, v in parts]
    accounted = sum(v for k, v in parts if not k.endswith(READER_MARK))
    parts.append(
        ("run loop: waiting for the reader, batching, unaccounted", max(wall - accounted, 0))
    )
    return parts


READER_MARK = "(reader thread)"


def _engine_rows(results: dict[str, Any], kind: str) -> list[list[str]]:
    rows = []
    for name in WORKLOAD_ORDER:
        r = results.get(kind, {}).get(name)
        if not r:
            continue
        e = r["engine"] or r["snapshot"]
        if not e:
            continue
        f = e["files"]["per_commit"]
        rows.append([
            name, _f(e["events"]), _f(e["seconds"], 2), f"**{_f(e['rate'])}**", _f(e["batches"]),
            _f(e["events_per_batch"]), _f(e["commits"]),
            f"{f['data']:.1f} / {f['position_deletes']:.1f} / {f['equality_deletes']:.1f}",
            "yes" if r["check"].get("equal") else "**NO**", e["loadavg"],
        ])  # fmt: skip
    return rows


def _first_index(splits: dict[str, list[tuple[str, float]]], key: str) -> int:
    for parts in splits.values():
        for i, (k, _) in enumerate(parts):
            if k == key:
                return i
    return 0


def closing(results: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The targets, for mixed CDC on Postgres."""
    r = results.get("postgres", {}).get("mixed")
    if not r or not r.get("engine"):
        return "Mixed CDC on PostgreSQL was not run: no verdict on the targets.\n", {}
    e = r["engine"]
    rate = e["rate"]
    bl = {b["name"]: b for b in r.get("baselines", [])}
    usable = [b for b in bl.values() if b.get("rate") and not b.get("error")]
    faster = max(usable, key=lambda b: b["rate"]) if usable else None
    raw = targets.best_raw(r)
    src_only = e["events"] / e["parts"]["source_read"] if e["parts"].get("source_read") else None
    verdict: dict[str, Any] = {"engine": rate}
    lines = [
        f"Measured in one run ({results['meta']['started']}, load average during the engine "
        f"phase {e['loadavg']}), {r['workload']['events']:,} changes of the mixed workload:",
        "",
    ]
    rows = [["this engine (default config: local Spark, batches applied in the driver)", f"**{_f(rate)}**", "1.00x"]]
    for b in bl.values():
        note = " (time cap hit: rate over the part done)" if b.get("capped") else ""
        note += f" (failed: {b['error']})" if b.get("error") else ""
        rows.append([b["name"] + note, _f(b.get("rate")), _ratio(rate, b.get("rate"))])
    for x in r.get("raw", []):
        rows.append([x["name"] + " - row messages/s", _f(x["rate"]), _ratio(rate, x["rate"])])
    if src_only:
        rows.append(["the engine's own source reader alone (read + decode + events)",
                     _f(src_only), _ratio(rate, src_only)])  # fmt: skip
    lines.append(_table(["", "events/s", "engine / this"], rows))
    lines.append("")
    # Target 1: a multiple of the faster baseline.
    if faster:
        x = rate / faster["rate"]
        verdict["vs_baseline"] = x
        ok = x >= targets.VS_MERGE
        lines.append(
            f"* **Engine >= {targets.VS_MERGE:.0f}x the faster baseline: {'MET' if ok else 'MISSED'}** - "
            f"{_f(rate)} vs {_f(faster['rate'])} events/s ({faster['name']}) = {x:.2f}x."
        )
    else:
        lines.append(
            f"* Engine >= {targets.VS_MERGE:.0f}x the faster baseline: no baseline result."
        )
    # Target 2: a share of the raw pgoutput read rate.
    if raw:
        x = rate / raw["rate"]
        verdict["vs_raw"] = x
        ok = x >= RAW_SHARE_TARGET
        lines.append(
            f"* **Engine >= {RAW_SHARE_TARGET:.0%} of the raw pgoutput read rate (stretch "
            f"{RAW_SHARE_STRETCH:.0%}): {'MET' if ok else 'MISSED'}** - "
            f"{_f(rate)} vs {_f(raw['rate'])} row messages/s ({raw['name']}) = {x:.1%}."
        )
    ok = rate >= MIXED_RATE_TARGET
    lines.append(
        f"* **Engine >= {_f(MIXED_RATE_TARGET)} events/s (stretch {_f(MIXED_RATE_STRETCH)}): "
        f"{'MET' if ok else 'MISSED'}** - {_f(rate)} events/s."
    )
    lines += resource_targets(r, e, verdict)
    # Target 4: the metrics endpoint (on, scraped every second) costs < 2% throughput.
    for m in [v for v in r.get("variants", []) if "scrapes" in v]:
        cost = 1 - m["rate"] / rate if rate else 0.0
        verdict["metrics_cost"] = cost
        # Two runs of the same engine differ by more than the target when the machine is
        # busy: a difference beyond 5% either way says nothing about the endpoint.
        state = "INCONCLUSIVE (noise)" if abs(cost) >= 0.05 else "MET" if cost < 0.02 else "MISSED"
        lines.append(
            f"* **Metrics endpoint costs < 2% throughput: {state}** - "
            f"{_f(m['rate'])} events/s with /metrics on and scraped {m['scrapes']} times vs "
            f"{_f(rate)} without = {cost:+.1%} (same backlog, same run; load {m['loadavg']} vs "
            f"{e['loadavg']})."
        )
    # Observations that explain the numbers.
    tb = max(e["table_batches"], 1)
    w = e.get("worker") or {}
    overhead = e["parts"].get("spark_job", 0) - w.get("map", 0) - w.get("write", 0) - w.get(
        "write_close", 0)  # fmt: skip
    lines.append(
        f"* **Spark job fixed cost**: {e['table_batches']} table-batches cost "
        f"{e['parts'].get('spark_job', 0):.2f} s in Spark jobs, of which the Python worker's "
        f"ops mapping and Parquet writing took {w.get('map', 0) + w.get('write', 0) + w.get('write_close', 0):.2f} s: "
        f"{overhead / tb:.2f} s per table-batch is scheduling, reading the staged file, the "
        "sort and the Arrow transfer, whatever the batch size."
    )
    snap = r.get("snapshot")
    if snap:
        lines.append(
            f"* **Batch size in practice**: a batch closes at `batch.max_events` (100,000), "
            f"when the source goes idle, or once everything read is in it and the reader got its "
            f"first event `batch.linger_seconds` (0.5 s) ago while the source is not reading a backlog; the initial snapshot ran as {snap['batches']} "
            f"batches of {_f(snap['events_per_batch'])} rows and this change phase as "
            f"{e['batches']} batches of {_f(e['events_per_batch'])} events on average."
        )
    # What dominates.
    split = sorted(time_split(e, "postgres"), key=lambda kv: -kv[1])
    top = ", ".join(f"{k} {v / e['seconds']:.0%}" for k, v in split[:4])
    lines.append(f"* **Where the time goes** (mixed, Postgres, {e['seconds']:.1f}s): {top}.")
    return "\n".join(lines) + "\n", verdict


def write(results: dict[str, Any], out: Path, *, charts: bool = True) -> tuple[str, str]:
    meta = results["meta"]
    pngs: list[str] = []
    chart_error = None
    if charts:
        try:
            from benchmarks import charts as C

            pngs = C.draw_all(results, out)
        except ImportError as exc:
            chart_error = f"charts skipped: {exc} (pip install matplotlib)"
    md: list[str] = ["# Replicator benchmark report", ""]
    m = meta["machine"]
    md += [
        f"Run {meta['started']}, size `{meta['size']}`, seed {meta['seed']}, "
        f"{meta.get('seconds', 0):.0f} s in all.",
        "",
        "Command (the `make bench` target runs the first line with the default size):",
        "",
        "```sh",
        ".venv/bin/python -m benchmarks.run",
        *([meta["command"]] if meta["command"].strip() != "python -m benchmarks.run" else []),
        "```",
        "",
        *(
            [
                f"Engine settings overridden for this run: `REPLICATOR_BENCH_ENGINE='{meta['engine_overrides']}'`.",
                "",
            ]
            if meta.get("engine_overrides")
            else []
        ),
        "## Machine",
        "",
        _table(
            ["", ""],
            [
                ["CPU", f"{m.get('cpu', '?')}, {m.get('nproc')} cores (nproc)"],
                ["memory", m.get("memory", "?")],
                ["kernel", m.get("kernel", "?")],
                ["load average at start (1/5/15 min)", m.get("loadavg", "?")],
                ["load average at end", meta.get("loadavg_end", "?")],
                *[[f"speed: {k.replace('_', ' ')}", m[k]] for k in ("python_loop", "file_create", "fsync") if k in m],
                [
                    "Spark start-up",
                    f"{meta.get('spark_start_seconds', 0):.1f} s (not measured below)",
                ],
            ]
            + [[k, str(v)] for k, v in meta.get("versions", {}).items()],
        ),  # fmt: skip
        "",
        "The machine is shared: other people run tests on it, so every measurement carries the "
        "load average read when it ended. Sizes: "
        + ", ".join(f"{k}={v}" for k, v in meta["sizes"].items())
        + ".",  # fmt: skip
        "",
    ]
    if chart_error:
        md += [f"_{chart_error}_", ""]
    # Workloads
    md += ["## Workloads", ""]
    seen = set()
    for kind in ("postgres", "mariadb"):
        for name in WORKLOAD_ORDER:
            r = results.get(kind, {}).get(name)
            if r and name not in seen:
                seen.add(name)
                wl = r["workload"]
                md.append(f"* **{name}** ({wl['title']}): {wl['description']}. "
                          f"{wl['events']:,} changes in {wl['transactions']:,} transactions "
                          f"(ops {wl['ops']}), {wl['initial_rows']:,} initial rows, seed "
                          f"{wl['seed']}.")  # fmt: skip
    lag_any = next(iter(results.get("lag", {}).values()), None)
    if lag_any and lag_any.get("workload"):
        md.append(f"* **lag**: {lag_any['workload']['description']}; offered at "
                  f"{lag_any['rate']:,.0f} events/s for {lag_any['seconds']:.0f} s by a writer "
                  "process while the engine runs continuously.")  # fmt: skip
    md.append("")
    # Throughput
    md += ["## End-to-end throughput of the engine", "",
           "Events/s from the first poll of the backlog to the Iceberg commit of its last batch "
           "(the changes were committed in the source before the engine read them; the "
           "snapshot workload measures the initial snapshot from engine start). Files per "
           "commit: data / position-delete / equality-delete files added by one table's "
           "snapshot.", ""]  # fmt: skip
    header = [
        "workload",
        "events",
        "seconds",
        "events/s",
        "batches",
        "events/batch",
        "commits",
        "files per commit (data/pos/eq)",
        "rows match source",
        "load avg",
    ]
    for kind in ("postgres", "mariadb"):
        rows = _engine_rows(results, kind)
        if rows:
            md += [f"### {SOURCE_NAMES[kind]}", "", _table(header, rows), ""]
    if "throughput.png" in pngs:
        md += ["![throughput](throughput.png)", ""]
    md += _snapshot_paths(results)
    # Time split
    md += ["## Where the time goes", "",
           "The engine runs two threads: the source reader (reading and decoding into a bounded "
           "queue) and the apply loop. The apply loop's parts add up to the wall time (seconds); "
           "the reader thread's parts, marked, overlap them, and the apply loop's wait for the "
           "reader is in the last row. Both threads share one Python interpreter (the GIL), so "
           "the reader's CPU time still slows the apply. Source "
           "and Spark-stage parts come from wrappers in the benchmark (the engine is unchanged), "
           "Spark-stage and commit totals from the engine's `RunSummary` per-table totals; the "
           "worker's mapping / file writing from timers in Spark's Python daemon "
           "(`benchmarks/spark_probe.py`).", ""]  # fmt: skip
    for kind in ("postgres", "mariadb"):
        cols = [(n, r) for n in WORKLOAD_ORDER if (r := results.get(kind, {}).get(n))
                and (r["engine"] or r["snapshot"])]  # fmt: skip
        if not cols:
            continue
        splits = {n: time_split(r["engine"] or r["snapshot"], kind, snapshot=r["engine"] is None)
                  for n, r in cols}  # fmt: skip
        order: list[str] = []
        for n, _ in cols:
            for k, _ in splits[n]:
                if k not in order:
                    order.append(k)
        # Source parts first, in time_split's order; the remainder last.
        names = sorted(order, key=lambda k: (not k.startswith("source:"), k.startswith("run loop"),
                                             _first_index(splits, k)))  # fmt: skip
        rows = []
        for k in names:
            row = [k]
            for n, r in cols:
                e = r["engine"] or r["snapshot"]
                v = dict(splits[n]).get(k)
                row.append("" if v is None else f"{v:.2f} ({v / e['seconds']:.0%})")
            rows.append(row)
        rows.append(["**wall**"] + [f"**{(r['engine'] or r['snapshot'])['seconds']:.2f}**"
                                    for _, r in cols])  # fmt: skip
        md += [f"### {SOURCE_NAMES[kind]}", "", _table(["part", *[n for n, _ in cols]], rows), ""]
    if "time_split.png" in pngs:
        md += ["![time split](time_split.png)", ""]
    # Baselines and raw reads
    md += ["## Baselines on the same change stream (PostgreSQL)", "",
           "Each baseline reads the same changes through the same `PostgresSource` (its own "
           "slot, created at the same point as the engine's) and the same `Batcher` limits, "
           "reduces each micro-batch to the latest change per key, and applies it. *sink "
           "events/s* leaves the source read out. Ratios are engine / baseline. The baselines "
           "work per distinct key of a batch (the hot-key workload reduces 10,000 changes to "
           "at most 100 rows) and their cost grows with the table: MERGE joins every batch with "
           "the table, upsert scans and rewrites the files holding the batch's keys; the "
           "engine's work does not depend on the table's size. The tables here are small "
           "(keyspace / tables rows at most): run with a larger `--keyspace` to see that "
           "effect.", ""]  # fmt: skip
    rows = []
    for name in WORKLOAD_ORDER:
        r = results.get("postgres", {}).get(name)
        if not r or not r.get("engine"):
            continue
        e = r["engine"]
        e_sink = e["events"] / max(e["seconds"] - e["parts"].get("source_read", 0), 1e-9)
        rows.append([name, "this engine", _f(e["events"]), _f(e["seconds"], 2),
                     f"**{_f(e['rate'])}**", _f(e_sink), _f(e["batches"]), "1.00x", ""])  # fmt: skip
        for b in r.get("baselines", []):
            sink = b["events"] / b["sink_seconds"] if b.get("sink_seconds") else None
            note = "time cap" if b.get("capped") else ""
            note += f" error: {b['error']}" if b.get("error") else ""
            if b.get("rows") and r["check"].get("source_rows"):
                src = {k.split(".", 1)[1]: v for k, v in r["check"]["source_rows"].items()}
                if not b.get("capped") and b["rows"] != src:
                    note += " rows differ from source!"
            rows.append([name, b["name"], _f(b["events"]), _f(b["seconds"], 2), _f(b["rate"]),
                         _f(sink), _f(b["batches"]), _ratio(e["rate"], b["rate"]), note])  # fmt: skip
        for x in r.get("raw", []):
            rows.append([name, x["name"], _f(x["row_messages"]), _f(x["seconds"], 2),
                         _f(x["rate"]), "", "", _ratio(e["rate"], x["rate"]),
                         f"{x['messages']:,} messages in all ({_f(x['message_rate'])}/s)"])  # fmt: skip
    if rows:
        md += [_table(["workload", "consumer", "events", "seconds", "events/s", "sink events/s",
                       "batches", "engine / this", "note"], rows), ""]  # fmt: skip
    mrows = []
    for name in WORKLOAD_ORDER:
        r = results.get("mariadb", {}).get(name)
        if r and r.get("engine"):
            for x in r.get("raw", []):
                mrows.append([name, x["name"], _f(x["row_messages"]), _f(x["seconds"], 2),
                              _f(x["rate"]), _ratio(r["engine"]["rate"], x["rate"])])  # fmt: skip
    if mrows:
        md += [
            "MariaDB raw read (the MySQL baselines of MERGE / pyiceberg are not run):",
            "",
            _table(["workload", "reader", "rows", "seconds", "rows/s", "engine / this"], mrows),
            "",
        ]
    if "comparison.png" in pngs:
        md += ["![comparison](comparison.png)", ""]
    # Lag
    lag = results.get("lag", {})
    if lag:
        md += ["## Commit-to-visible lag at a fixed offered rate", "",
               "A writer process commits the lag workload at a fixed rate while the engine runs "
               "continuously (default batch limits unless a setting is named). Lag of a row = wall time when the Iceberg "
               "snapshot holding it was committed (the catalog accepted it) minus the wall time "
               "when the source COMMIT returned to the writer. Deletes carry no row to map and "
               "are left out.", ""]  # fmt: skip
        rows = []
        for kind, x in lag.items():
            label = lag_label(kind, x)
            if x.get("error"):
                rows.append([label, x["error"], "", "", "", "", "", "", ""])
                continue
            e = x.get("engine") or {}
            rows.append([
                label, _f(x["rate"]), _f(x["achieved_rate"]), _f(x["samples"]),
                _f(x["p50"], 2), _f(x["p90"], 2), _f(x["p99"], 2), _f(x["max"], 2),
                f"{_f(e.get('batches'))} / {_f(e.get('events_per_batch'))}",
                e.get("loadavg", ""),
            ])  # fmt: skip
        md += [
            _table(
                [
                    "source",
                    "offered events/s",
                    "achieved",
                    "rows",
                    "p50 s",
                    "p90 s",
                    "p99 s",
                    "max s",
                    "batches / events per batch",
                    "load avg",
                ],
                rows,
            ),
            "",
        ]
        if "lag.png" in pngs:
            md += ["![lag](lag.png)", ""]
    md += memory_lines(results, pngs)
    md += cpu_lines(results)
    # Read cost
    rc_rows = []
    for name in WORKLOAD_ORDER:
        r = results.get("postgres", {}).get(name)
        rc = r.get("read_cost") if r else None
        if not rc:
            continue
        for k in ("replicated", "compacted", "plain"):
            t = rc[k]
            files = ", ".join(f"{v} {n}" for n, v in t["files"].items())
            rc_rows.append([f"{name} (`{rc['table']}`)", t["label"], _f(t["rows"]),
                            f"{t['count_first']:.2f} / {t['count_best']:.2f}",
                            f"{t['lookup_first']:.2f} / {t['lookup_best']:.2f}", files,
                            f"{t['bytes'] / 2**20:.1f}"])  # fmt: skip
    if rc_rows:
        md += ["## Read cost afterwards (Spark, Iceberg Java)", "",
               "`count(*)` and a point lookup by key on one replicated table, first run / best "
               "of 3, seconds; then the same rows compacted (read and written as a fresh "
               "Iceberg table) and a plain Parquet copy of the source table.", "",
               _table(["table", "version", "rows", "count s", "lookup s", "files", "MiB"],
                      rc_rows), ""]  # fmt: skip
    md += _many_tables(results)
    md += partitioned.report_lines(results)
    md += position_mode.report_lines(results)
    md += memflat.report_lines(results)
    # Errors
    errs = [f"{k}/{n}: {e}" for k in ("postgres", "mariadb")
            for n, r in results.get(k, {}).items() for e in r.get("errors", [])]  # fmt: skip
    if errs:
        md += ["## Errors during the run", ""] + [f"* {e}" for e in errs] + [""]
    # Closing
    text, _ = closing(results)
    md += targets.issue27_lines(results)
    md += ["## Mixed CDC on PostgreSQL in detail", "", text]
    md += ["See `benchmarks/README.md` for what each number means and how it is measured.", ""]
    report = "\n".join(md)
    (out / "REPORT.md").write_text(report)
    return report, console_table(results)


MANY_TABLES_TARGET = targets.MANY_TABLES
RAW_SHARE_TARGET, RAW_SHARE_STRETCH = targets.RAW_SHARE, targets.RAW_SHARE_STRETCH
MIXED_RATE_TARGET, MIXED_RATE_STRETCH = targets.PG_MIXED_RATE, targets.PG_MIXED_STRETCH


def _many_tables(results: dict[str, Any]) -> list[str]:
    """The same changes over 1 and over 100 tables, side by side (workloads tables1/100),
    every run of each on the same backlog; the ratio of the medians."""
    ratio, one, many = targets.many_tables_ratio(results)
    if ratio is None:
        return []
    rows = [[f"{name}{'' if i == 0 else f' (again, {i + 1})'}", _f(e["events"]), f"{e['seconds']:.2f}",
             _f(e["rate"]), _f(e.get("batches")), str(e.get("loadavg", ""))]
            for name, es in (("1 table", one), ("100 tables", many)) for i, e in enumerate(es)]  # fmt: skip
    verdict = "met" if ratio <= MANY_TABLES_TARGET else "missed"
    lo, hi = targets.median_seconds(one), targets.median_seconds(many)
    return ["## One table vs 100 tables (PostgreSQL)", "",
            "The same mixed change stream (same seed, events and key space) over 1 table and "
            "over 100 tables, one Spark job per batch either way. Each is read by the default "
            f"engine {len(many)} time(s) from slots of its own on the same backlog (`--tables-repeats`); "
            "the first listed reads last.", "",
            _table(["tables", "events", "seconds", "events/s", "batches", "load"], rows), "",
            f"100 tables / 1 table, medians ({hi:.2f} s / {lo:.2f} s): **{ratio:.2f}x** of the time "
            f"(target <= {MANY_TABLES_TARGET}x: {verdict}).", ""]  # fmt: skip


def console_table(results: dict[str, Any]) -> str:
    lines = [f"{'source':<10} {'workload':<9} {'events':>9} {'seconds':>8} {'events/s':>9}  load"]
    for kind in ("postgres", "mariadb"):
        for name in WORKLOAD_ORDER:
            r = results.get(kind, {}).get(name)
            e = r and (r["engine"] or r["snapshot"])
            if e:
                lines.append(f"{kind:<10} {name:<9} {e['events']:>9,} {e['seconds']:>8.2f} "
                             f"{e['rate']:>9,.0f}  {e['loadavg']}")  # fmt: skip
            for b in (r or {}).get("baselines", []):
                lines.append(f"{'':<10} {'':<9} {b['events']:>9,} {b['seconds']:>8.2f} "
                             f"{b['rate']:>9,.0f}  {b['name']}")  # fmt: skip
            for x in (r or {}).get("raw", []):
                lines.append(f"{'':<10} {'':<9} {x['row_messages']:>9,} {x['seconds']:>8.2f} "
                             f"{x['rate']:>9,.0f}  {x['name']}")  # fmt: skip
    for kind, x in results.get("lag", {}).items():
        if x.get("p50") is not None:
            lines.append(f"{kind:<10} {'lag':<9} offered {x['rate']:,.0f}/s: p50 {x['p50']:.2f}s "
                         f"p99 {x['p99']:.2f}s")  # fmt: skip
    _, verdict = closing(results)
    if verdict:
        lines.append("targets: " + ", ".join(
            f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in verdict.items()
            if not isinstance(v, dict)))  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/results.json")
    res = json.loads(path.read_text())
    _, tbl = write(res, path.parent, charts="--no-charts" not in sys.argv)
    print(tbl)
