"""Soak benchmark: steady mixed Postgres changes at a fixed rate for a long time, with the
engine's default settings (maintenance on), to show the tables stay healthy.

    .venv/bin/python -m benchmarks.soak [--minutes 30] [--rate 1000] [--out DIR]

A private Postgres gets 2 tables (mixed workload: inserts, updates, deletes, transactions of
1-500 rows) from a writer process at ``--rate`` events/s (benchmarks/lagwriter.py); the
engine (``replicator run``, default config, its own Spark) replicates them. Every
``--sample-seconds`` the parent records, per table: snapshots, manifests of the head,
metadata.json size, data/delete files. Batch wall times come from the engine's log lines.
At the end (engine caught up, then stopped): ``replicator diff`` (must say equal). Every
``--read-every`` minutes and at the end: Spark ``count(*)`` and a point lookup on the
replicated tables vs a compacted copy of the same snapshot (``ReadProbe``: warmed, alternating,
medians), reported as the worst and the end ratio.

Writes ``soak.json``, ``SOAK.md`` and ``soak.png`` (needs matplotlib) into ``--out``.
The verdict follows issue 9: batch wall time in the last window <= 1.2x the first window
(window: 5 minutes, or a third of a shorter run); manifests per snapshot and metadata.json
size flat after warm-up; count(*) and point lookup <= 1.2x the compacted copy.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
KEYSPACE = 20_000
SEED = 7
BATCH_LINE = re.compile(r"batch (\d+): (\d+) events, .*, ([0-9.]+)s$")


def _engine_config(root: Path, dsn: str, delete_mode: str | None = None,
                   format_version: int | None = None, overrides: dict[str, Any] | None = None) -> Path:
    """The engine's config: defaults, plus the delete mode and format version when given, and
    ``overrides`` (config sections merged in, like REPLICATOR_BENCH_ENGINE for benchmarks.run)."""
    iceberg: dict[str, Any] = {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"}
    if delete_mode:
        iceberg["delete_mode"] = delete_mode
    if format_version:
        iceberg["format_version"] = format_version
    cfg: dict[str, Any] = {"source": {"type": "postgres", "dsn": dsn}, "iceberg": iceberg, "state_dir": "state"}
    for section, values in (overrides or {}).items():
        if isinstance(values, dict) and isinstance(cfg.get(section), dict):
            cfg[section].update(values)
        else:
            cfg[section] = values
    path = root / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class EngineLog(threading.Thread):
    """Reads the engine's stderr: (seconds since start, events, batch wall seconds)."""

    def __init__(self, proc: subprocess.Popen[str], t0: float, path: Path) -> None:
        super().__init__(daemon=True)
        self.proc, self.t0, self.path = proc, t0, path
        self.batches: list[tuple[float, int, float]] = []

    def run(self) -> None:
        assert self.proc.stderr is not None
        with self.path.open("w") as out:
            for line in self.proc.stderr:
                out.write(line)
                out.flush()
                m = BATCH_LINE.search(line.rstrip())
                if m:
                    self.batches.append((time.time() - self.t0, int(m.group(2)), float(m.group(3))))


def _sample(cfg_path: Path, t0: float) -> list[dict[str, Any]]:
    from replicator.config import load_config
    from replicator.iceberg.cuts import replicated_tables
    from replicator.iceberg.tables import open_catalog
    from replicator.maintenance.status import table_health

    cfg = load_config(cfg_path)
    out = []
    for t in replicated_tables(open_catalog(cfg.iceberg), cfg.iceberg.namespace):
        h = table_health(t)
        meta = t.metadata_location.removeprefix("file://")
        out.append({
            "t": time.time() - t0, "table": h.identifier, "snapshots": h.snapshots,
            "manifests": h.manifests, "metadata_bytes": os.path.getsize(meta),
            "data_files": h.data_files, "avg_data_file_bytes": h.average_data_file_bytes,
            "position_delete_files": h.position_delete_files,
            "equality_delete_files": h.equality_delete_files,
        })  # fmt: skip
    return out


class ReadProbe:
    """Spark ``count(*)`` and a point lookup on each replicated table (its current snapshot at
    each run: the engine keeps committing) vs a compacted copy of the same rows (the snapshot
    current at the point's start, rewritten as one fresh Iceberg table), measured fairly:
    both tables warmed first, then ``rounds`` alternating runs (replicated, copy, replicated,
    ...), the median of each. Both are read the same way, by Iceberg Java from a metadata
    file (the live table's is resolved just before each run, outside the timing). One Spark
    session (its own JVM) for the whole soak, so every point sees an equally warm JVM. Each
    point also records the table's files at that moment.
    """

    def __init__(self, cfg_path: Path, root: Path, rounds: int = 5, dsn: str | None = None) -> None:
        from spark.session import configure_iceberg_catalog, get_spark

        self.cfg_path, self.rounds, self.dsn = cfg_path, rounds, dsn
        self.spark = get_spark("soak-reader")
        configure_iceberg_catalog(self.spark, "soakcopy", {"type": "hadoop",
                                                           "warehouse": (root / "copy").as_uri()})
        self.spark.sql("CREATE NAMESPACE IF NOT EXISTS soakcopy.db")

    def measure(self, t: float) -> list[dict[str, Any]]:
        from replicator.config import load_config
        from replicator.iceberg.cuts import replicated_tables
        from replicator.iceberg.tables import open_catalog
        from replicator.maintenance.status import table_health

        spark = self.spark
        cfg = load_config(self.cfg_path)
        out = []
        for table in replicated_tables(open_catalog(cfg.iceberg), cfg.iceberg.namespace):
            head = table.current_snapshot()
            if head is None:
                continue
            h = table_health(table)
            name = table.name()[-1]

            def live_location(table: Any = table) -> str:
                """Where the live table is now (the engine goes on committing, and cleaning
                old metadata files and expired snapshots, meanwhile). Resolved BEFORE a timed
                run: a pyiceberg refresh in the driver is not part of what a reader pays."""
                return str(table.refresh().metadata_location)

            def copy_location(name: str = name) -> str:
                row = spark.sql(f"SELECT file FROM soakcopy.db.{name}.metadata_log_entries "
                                "ORDER BY timestamp DESC LIMIT 1").first()
                return str(row[0])

            # The snapshot the copy is made of, read by pyiceberg first (at once: the engine
            # deletes old metadata files) so its row count can be checked against the copy's.
            def copy_of_head(name: str = name, live_location: Any = live_location) -> int:
                src, py_rows = self._py_rows(live_location())
                (spark.read.format("iceberg").load(src).writeTo(f"soakcopy.db.{name}").using("iceberg")
                 .tableProperty("format-version", "2").createOrReplace())
                return py_rows

            py_rows = self._retry(copy_of_head)
            spark.sql(f"REFRESH TABLE soakcopy.db.{name}")
            copy_at = copy_location()
            key_row = spark.read.format("iceberg").load(copy_at).selectExpr("min(id)").first()
            key = int(key_row[0]) if key_row and key_row[0] is not None else 1
            med, rows = self._spark_times(live_location, copy_at, key)
            py = self._pyiceberg_times(live_location, py_rows, copy_at)
            source_rows = self._source_rows(name)
            out.append({
                "t": t, "table": ".".join(table.name()), "rows": rows,
                "count_seconds": med["count"], "copy_count_seconds": med["copy_count"],
                "lookup_seconds": med["lookup"], "copy_lookup_seconds": med["copy_lookup"],
                "count_ratio": med["count"] / max(med["copy_count"], 1e-9),
                "lookup_ratio": med["lookup"] / max(med["copy_lookup"], 1e-9),
                "data_files": h.data_files, "position_delete_files": h.position_delete_files,
                "equality_delete_files": h.equality_delete_files, "source_rows": source_rows, **py,
            })  # fmt: skip
        return out

    def _spark_times(self, live_location: Any, copy_at: str, key: int) -> tuple[dict[str, float], int]:
        """Medians of Spark count(*) and point lookup, live table vs the copy, and the live
        table's row count (its last run)."""
        spark = self.spark
        times: dict[str, list[float]] = {k: [] for k in ("count", "copy_count", "lookup", "copy_lookup")}
        rows = 0
        for i in range(self.rounds + 1):  # round 0 warms both and is not counted
            # Both read the same way: Iceberg Java loads the table from its metadata file
            # (the live one as of just before the run), plans and scans.
            for label, where in (("", self._retry(live_location)), ("copy_", copy_at)):
                def load(where: str = where) -> Any:
                    return spark.read.format("iceberg").load(where)

                t0 = time.perf_counter()
                n = self._retry(lambda load=load: load().count())
                t1 = time.perf_counter()
                self._retry(lambda load=load, key=key: load().where(f"id = {key}").collect())
                t2 = time.perf_counter()
                if i:
                    times[label + "count"].append(t1 - t0)
                    times[label + "lookup"].append(t2 - t1)
                if not label:
                    rows = n
        return {k: statistics.median(v) for k, v in times.items()}, rows

    @staticmethod
    def _py_rows(where: str) -> tuple[str, int]:
        from pyiceberg.table import StaticTable

        return where, StaticTable.from_metadata(where).scan().to_arrow().num_rows

    def _pyiceberg_times(self, live_location: Any, snap_rows: int, copy_at: str) -> dict[str, Any]:
        """pyiceberg (an independent reader) scans the whole table into Arrow: ``snap_rows``
        (its rows of the snapshot the copy was made of) must equal the copy's, read by Spark;
        then the same warm-up + alternating rounds as Spark (live head vs the copy), medians."""

        def scan(where: str) -> tuple[int, float]:
            t0 = time.perf_counter()
            n = self._py_rows(where)[1]
            return n, time.perf_counter() - t0

        copy_rows = self.spark.read.format("iceberg").load(copy_at).count()
        live: list[float] = []
        copy: list[float] = []
        for i in range(self.rounds + 1):
            live_s = self._retry(lambda: scan(self._retry(live_location)))[1]
            copy_s = self._retry(lambda: scan(copy_at))[1]
            if i:
                live.append(live_s)
                copy.append(copy_s)
        pl, pc = statistics.median(live), statistics.median(copy)
        return {"py_rows": snap_rows, "copy_rows": copy_rows, "py_rows_match": snap_rows == copy_rows,
                "py_scan_seconds": pl, "py_copy_scan_seconds": pc, "py_scan_ratio": pl / max(pc, 1e-9)}

    def _source_rows(self, name: str) -> int | None:
        """The source table's row count now (the engine may be a few batches behind)."""
        if not self.dsn:
            return None
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(f"SELECT count(*) FROM {name}").fetchone()
        return int(row[0]) if row else None

    @staticmethod
    def _retry(fn: Any) -> Any:
        """A query of the live table can lose a race with the engine's expiry (a file of the
        snapshot it planned is gone): run it again (rare; the failed run's time counts too)."""
        for attempt in range(5):
            try:
                return fn()
            except Exception:
                if attempt == 4:
                    raise
        return None

    def stop(self) -> None:
        self.spark.stop()


def _window(values: list[tuple[float, float]], start: float, end: float) -> float | None:
    xs = [v for t, v in values if start <= t < end]
    return statistics.mean(xs) if xs else None


def _verdict(res: dict[str, Any]) -> dict[str, Any]:
    secs = res["seconds"]
    win = min(300.0, secs / 3)
    batches = [(t, w) for t, _, w in res["batches"]]
    first = _window(batches, 0, win)
    last = _window(batches, secs - win, secs + 1)
    thirds = [[w for t, w in batches if k * secs / 3 <= t < (k + 1) * secs / 3 + (k == 2)] for k in range(3)]
    medians = [statistics.median(x) if x else None for x in thirds]
    per_table: dict[str, list[dict[str, Any]]] = {}
    for s in res["samples"]:
        per_table.setdefault(s["table"], []).append(s)
    flat = {}
    for table, ss in per_table.items():
        warm = [s for s in ss if s["t"] >= win]  # after warm-up
        if len(warm) >= 2:
            mid = warm[len(warm) // 2:]
            flat[table] = {
                "manifests_max_after_warmup": max(s["manifests"] for s in warm),
                "manifests_last": warm[-1]["manifests"],
                "metadata_bytes_after_warmup": warm[0]["metadata_bytes"],
                "metadata_bytes_max_second_half": max(s["metadata_bytes"] for s in mid),
                "metadata_bytes_last": warm[-1]["metadata_bytes"],
            }
    reads: dict[str, dict[str, float]] = {}
    for r in res.get("reads", []):
        worst = reads.setdefault(r["table"], {"count_worst": 0.0, "lookup_worst": 0.0, "py_worst": 0.0})
        worst["count_worst"] = max(worst["count_worst"], r["count_ratio"])
        worst["lookup_worst"] = max(worst["lookup_worst"], r["lookup_ratio"])
        worst["py_worst"] = max(worst["py_worst"], r.get("py_scan_ratio", 0.0))
        worst["count_end"], worst["lookup_end"] = r["count_ratio"], r["lookup_ratio"]
        worst["py_end"] = r.get("py_scan_ratio", 0.0)
    return {"window_seconds": win, "batch_seconds_first": first, "batch_seconds_last": last,
            "batch_ratio": (last / first) if first and last else None, "flat": flat, "reads": reads,
            "batch_median_thirds": medians,
            "batch_median_ratio": (medians[2] / medians[0]) if medians[0] and medians[2] else None,
            "py_rows_all_match": all(r.get("py_rows_match", True) for r in res.get("reads", []))}


def _chart(res: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    minutes = [(t / 60, w) for t, _, w in res["batches"]]
    axes[0].plot([m for m, _ in minutes], [w for _, w in minutes], ".", ms=3, alpha=0.5, label="batch")
    per_min: dict[int, list[float]] = {}
    for m, w in minutes:
        per_min.setdefault(int(m), []).append(w)
    xs = sorted(per_min)
    axes[0].plot([x + 0.5 for x in xs], [statistics.mean(per_min[x]) for x in xs], "-o", label="mean per minute")
    axes[0].set_ylabel("batch wall time (s)")
    axes[0].legend()
    tables = sorted({s["table"] for s in res["samples"]})
    for table in tables:
        ss = [s for s in res["samples"] if s["table"] == table]
        axes[1].plot([s["t"] / 60 for s in ss], [s["manifests"] for s in ss], "-", label=table)
        axes[2].plot([s["t"] / 60 for s in ss], [s["metadata_bytes"] / 1024 for s in ss], "-", label=table)
    axes[1].set_ylabel("manifests in head snapshot")
    axes[2].set_ylabel("metadata.json (KiB)")
    axes[2].set_xlabel("minutes")
    for ax in axes[1:]:
        ax.legend()
    fig.suptitle(f"soak: {res['rate']:.0f} events/s for {res['seconds'] / 60:.1f} min "
                 f"(Postgres, {res.get('mode', 'defaults')})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def _read_lines(res: dict[str, Any]) -> list[str]:
    """The report's read-cost part: worst and end ratios, then every read point."""
    v = res["verdict"]
    lines = ["", "Reads: Spark (Iceberg Java) count(*) and a point lookup, and pyiceberg full scan to Arrow, "
             "replicated table vs a compacted copy of the same snapshot; both warmed, then "
             f"{res.get('read_rounds', '?')} alternating runs, medians; target <= 1.2. Worst and end ratio:", "",
             "| table | count(*) worst | count(*) end | lookup worst | lookup end | pyiceberg worst | pyiceberg end |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for t, rr in v["reads"].items():
        lines.append(f"| {t} | {rr['count_worst']:.2f} | {rr['count_end']:.2f} | {rr['lookup_worst']:.2f} | "
                     f"{rr['lookup_end']:.2f} | {rr.get('py_worst', 0):.2f} | {rr.get('py_end', 0):.2f} |")
    lines += ["", "Every read point (min: minutes into the soak; files: data / position-or-DV / equality "
              "deletes; rows: Spark on the live head; py rows: pyiceberg on the snapshot the copy was made "
              "of, = the copy's rows read by Spark; source: Postgres count(*) at that moment, the engine "
              "may be a batch behind):", "",
              "| min | table | rows | py rows | copy rows | source | files | count(*) s | copy s | ratio | "
              "lookup s | copy s | ratio | pyiceberg s | copy s | ratio |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in res.get("reads", []):
        lines.append(f"| {r['t'] / 60:.1f} | {r['table']} | {r['rows']:,} | {r.get('py_rows', 0):,} | "
                     f"{r.get('copy_rows', 0):,} | {r.get('source_rows') or 0:,} | {r['data_files']}/"
                     f"{r['position_delete_files']}/{r['equality_delete_files']} | {r['count_seconds']:.3f} | "
                     f"{r['copy_count_seconds']:.3f} | {r['count_ratio']:.2f} | {r['lookup_seconds']:.3f} | "
                     f"{r['copy_lookup_seconds']:.3f} | {r['lookup_ratio']:.2f} | "
                     f"{r.get('py_scan_seconds', 0):.3f} | {r.get('py_copy_scan_seconds', 0):.3f} | "
                     f"{r.get('py_scan_ratio', 0):.2f} |")
    return lines


def _report(res: dict[str, Any], out: Path, stem: str) -> str:
    v = res["verdict"]
    med = [m or 0 for m in v.get("batch_median_thirds", [0, 0, 0])]
    lines = [
        f"# Soak benchmark ({res.get('mode', 'engine defaults')})", "",
        f"Command: `{res['command']}`", "",
        f"{res['events']:,} events offered at {res['rate']:.0f}/s for {res['seconds'] / 60:.1f} min "
        f"({res['writer'].get('late_transactions', '?')} late transactions); "
        f"{len(res['batches'])} batches; diff exit code {res['diff_exit']}; "
        f"load average at the start {res.get('load_start', '?')}, at the end {res['load']}.", "",
        f"Batch wall time: first {v['window_seconds'] / 60:.1f} min mean "
        f"{(v['batch_seconds_first'] or 0):.2f}s, last {(v['batch_seconds_last'] or 0):.2f}s, "
        f"ratio {(v['batch_ratio'] or 0):.2f} (target <= 1.2). Medians per third of the run: "
        f"{med[0]:.2f}s / {med[1]:.2f}s / {med[2]:.2f}s, last / first {(v.get('batch_median_ratio') or 0):.2f}. "
        f"pyiceberg row counts equal the copy's at every point: {v.get('py_rows_all_match')}.", "",
        "| table | manifests max after warm-up | manifests at end | metadata.json after warm-up | "
        "max in second half | at end |", "| --- | --- | --- | --- | --- | --- |",
    ]
    for t, f in v["flat"].items():
        lines.append(f"| {t} | {f['manifests_max_after_warmup']} | {f['manifests_last']} | "
                     f"{f['metadata_bytes_after_warmup']:,} | {f['metadata_bytes_max_second_half']:,} | "
                     f"{f['metadata_bytes_last']:,} |")
    lines += _read_lines(res)
    lines += ["", "Health at the end (per table):", ""]
    for s in res["final"]:
        lines.append(f"- {s['table']}: {s['snapshots']} snapshots, {s['manifests']} manifests, "
                     f"{s['data_files']} data files (avg {s['avg_data_file_bytes']:,} B), "
                     f"{s['position_delete_files']} position / {s['equality_delete_files']} equality delete files")
    if (out / f"{stem.lower()}.png").exists():
        lines += ["", f"![soak]({stem.lower()}.png)"]
    text = "\n".join(lines) + "\n"
    (out / f"{stem}.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=1000.0, help="offered events/s")
    p.add_argument("--sample-seconds", type=float, default=15.0)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/soak"))
    p.add_argument("--read-every", type=float, default=5.0,
                   help="minutes between read-cost points during the soak (0: only at the end); points "
                   "fall outside the first and last batch-time windows")
    p.add_argument("--read-rounds", type=int, default=5, help="alternating timed runs per read point")
    p.add_argument("--keep", action="store_true", help="keep the temp directory")
    p.add_argument("--delete-mode", choices=("equality", "position"), default=None,
                   help="iceberg.delete_mode for the engine (default: the engine's default)")
    p.add_argument("--format-version", type=int, choices=(2, 3), default=None,
                   help="iceberg.format_version for the tables the engine creates")
    p.add_argument("--keyspace", type=int, default=KEYSPACE,
                   help="keys per table (half of them exist at the start: rows per table ~ keyspace / 2)")
    p.add_argument("--name", default=None, help="report file stem (default: SOAK, or SOAK-<mode>-v<N>)")
    args = p.parse_args(argv)

    from benchmarks import lagwriter
    from benchmarks import workloads as W
    from benchmarks.procs import load_average
    from sample_dbs.postgres.server import PrivatePostgres

    args.out.mkdir(parents=True, exist_ok=True)
    seconds = args.minutes * 60
    events = int(args.rate * seconds)
    root = Path(tempfile.mkdtemp(prefix="soak-", dir="/tmp"))
    root.chmod(0o755)  # the Postgres server runs as user postgres
    print(f"soak: {events:,} events at {args.rate:.0f}/s for {args.minutes} min in {root}", flush=True)
    # The engine runs in the temp dir: it must import this checkout, not an installed copy.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    stem = "SOAK"
    if args.delete_mode or args.format_version:
        stem = f"SOAK-{args.delete_mode or 'equality'}-v{args.format_version or 2}"
    stem = args.name or stem
    overrides = json.loads(os.environ.get("REPLICATOR_BENCH_ENGINE") or "{}")
    mode = (f"delete_mode {args.delete_mode or 'default (equality)'}, "
            f"format_version {args.format_version or 'default (2)'}"
            + (f", REPLICATOR_BENCH_ENGINE='{json.dumps(overrides)}'" if overrides else ""))
    res: dict[str, Any] = {"rate": args.rate, "events": events, "mode": mode, "load_start": load_average(),
                           "command": "python -m benchmarks.soak " + " ".join(argv or sys.argv[1:])}
    with PrivatePostgres(root / "pg", dbname="soak", settings={"wal_sender_timeout": "0"}) as pg:
        import psycopg

        w = lagwriter.lag_workload(events, SEED, args.keyspace)
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            W.PgApplier(conn, w).create()
        cfg = _engine_config(root, pg.dsn, args.delete_mode, args.format_version, overrides)
        # The reader's Spark starts before the soak's clock (its start-up must not load the
        # first batch-time window).
        probe = ReadProbe(cfg, root, args.read_rounds, pg.dsn)
        res["read_rounds"] = args.read_rounds
        win = min(300.0, seconds / 3)
        every = args.read_every * 60
        read_at = [k * every for k in range(1, int(seconds / every) + 1)
                   if win <= k * every < seconds - win] if every else []
        reads: list[dict[str, Any]] = []
        t0 = time.time()
        engine = subprocess.Popen(
            [sys.executable, "-m", "replicator.cli.main", "run", "--config", str(cfg)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=root, env=env,
        )
        reader = EngineLog(engine, t0, args.out / f"{stem.lower()}-engine.log")
        reader.start()
        # The engine takes its initial snapshot first; the writer starts once it is streaming.
        while not reader.batches and engine.poll() is None and time.time() - t0 < 300:
            time.sleep(1)
        t0 = reader.t0 = time.time()
        reader.batches.clear()
        writer_out = root / "writer.json"
        ctx = multiprocessing.get_context("spawn")
        writer = ctx.Process(target=lagwriter.write, args=("postgres", pg.dsn, events, SEED, args.keyspace,
                                                           args.rate, str(writer_out)))
        writer.start()
        samples: list[dict[str, Any]] = []
        next_sample = t0
        while writer.is_alive():
            if engine.poll() is not None:
                writer.terminate()
                log = args.out / f"{stem.lower()}-engine.log"
                raise SystemExit(f"the engine died (exit {engine.returncode}); see {log}")
            if time.time() >= next_sample:
                samples += _sample(cfg, t0)
                next_sample = max(next_sample + args.sample_seconds, time.time())  # none to catch up
                last = samples[-1]
                print(f"  {last['t'] / 60:5.1f} min: {len(reader.batches)} batches, "
                      f"{last['manifests']} manifests, {last['metadata_bytes']:,} B metadata "
                      f"({last['table']})", flush=True)
            if read_at and time.time() - t0 >= read_at[0]:
                read_at.pop(0)
                reads += probe.measure(time.time() - t0)
                print("  reads: " + ", ".join(f"{r['table']} count x{r['count_ratio']:.2f} lookup "
                                              f"x{r['lookup_ratio']:.2f}" for r in reads[-2:]), flush=True)
            time.sleep(1)
        writer.join()
        res["seconds"] = time.time() - t0
        res["writer"] = json.loads(writer_out.read_text()) if writer_out.exists() else {}
        res["writer"].pop("commits", None)
        # Caught up: diff waits for the engine to reach the source's position.
        diff = subprocess.run([sys.executable, "-m", "replicator.cli.main", "diff", "--config", str(cfg),
                               "--wait", "600"], capture_output=True, text=True, cwd=root, env=env)
        res["diff_exit"] = diff.returncode
        (args.out / f"{stem.lower()}-diff.txt").write_text(diff.stdout + diff.stderr)
        engine.send_signal(signal.SIGINT)
        try:
            engine.wait(timeout=120)
        except subprocess.TimeoutExpired:
            engine.kill()
        reader.join(timeout=10)
        res["batches"] = reader.batches
        res["samples"] = samples
        res["final"] = _sample(cfg, t0)
        res["reads"] = reads + probe.measure(time.time() - t0)
        probe.stop()
        res["load"] = load_average()
    res["verdict"] = _verdict(res)
    (args.out / f"{stem.lower()}.json").write_text(json.dumps(res, indent=1, default=str))
    _chart(res, args.out / f"{stem.lower()}.png")
    print(_report(res, args.out, stem))
    if not args.keep:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
