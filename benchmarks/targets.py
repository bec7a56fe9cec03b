"""The done-when of issue 27 as one table of REPORT.md: each figure of ``make bench`` beside
its target and, where the issue names one, its baseline from the same run.

Figures a run did not produce (a workload or source left out) show as "not run", never as
met. The 50M-row kill/resume and the cluster's chunk reads are separate benchmarks
(``bigsnapshot.py``, ``cluster_chunks.py``): named here with where their results live.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.resources import DRIVER, RSS_FLAT_TOLERANCE, sweep_points
from benchmarks.resources import fmt as _f
from benchmarks.resources import table as _table

# Issue 27's done-when, each declared once.
PG_MIXED_RATE, PG_MIXED_STRETCH = 80_000, 120_000  # events/s
RAW_SHARE, RAW_SHARE_STRETCH = 0.2, 0.4  # engine / raw pgoutput read
VS_MERGE = 3.0  # engine / Spark MERGE INTO
SNAPSHOT_RATE = 250_000  # rows/s after start-up, 8-column table
SNAPSHOT_RAW_SHARE = 0.25  # snapshot after start-up / raw COPY TO STDOUT
MARIADB_MIXED_RATE = 60_000  # events/s
MARIADB_SNAPSHOT_RATE = 150_000  # rows/s
MANY_TABLES = 1.5  # 100 tables' time / one table's
LAG_P99_SECONDS = 1.0  # at 5,000 events/s

NOT_RUN = "not run"
# The label of the default engine's repeats on the same backlog (``pg_scenario``, tablesN).
REPEAT_LABEL = "default again"


def _verdict(ok: bool | None) -> str:
    return NOT_RUN if ok is None else "**met**" if ok else "missed"


def _engine(results: dict[str, Any], kind: str, workload: str, phase: str = "engine") -> Any:
    return (results.get(kind, {}).get(workload) or {}).get(phase)


def engine_runs(results: dict[str, Any], workload: str) -> list[dict[str, Any]]:
    """A Postgres workload's default engine run and its repeats on the same backlog."""
    r = results.get("postgres", {}).get(workload) or {}
    first = [r["engine"]] if r.get("engine") else []
    return first + [v for v in r.get("variants", []) if v.get("repeat") and v.get("seconds")]


def median_seconds(runs: list[dict[str, Any]]) -> float | None:
    return statistics.median(e["seconds"] for e in runs) if runs else None


def many_tables_ratio(results: dict[str, Any]) -> tuple[float | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """100 tables' median time over one table's, and the runs of each."""
    one, many = engine_runs(results, "tables1"), engine_runs(results, "tables100")
    lo, hi = median_seconds(one), median_seconds(many)
    return (hi / lo if lo and hi else None), one, many


def _baseline(results: dict[str, Any], name_start: str) -> dict[str, Any] | None:
    r = results.get("postgres", {}).get("mixed") or {}
    found = [b for b in r.get("baselines", []) if b["name"].startswith(name_start)
             and b.get("rate") and not b.get("error")]  # fmt: skip
    return found[0] if found else None


def best_raw(r: dict[str, Any] | None, prefix: str = "") -> dict[str, Any] | None:
    """The fastest raw read of a workload's result whose name starts with ``prefix``."""
    raws = [x for x in (r or {}).get("raw", []) if x.get("rate") and x["name"].startswith(prefix)]
    return max(raws, key=lambda x: x["rate"]) if raws else None


def _ratio_row(
    figure: str,
    target: str,
    value: float | None,
    base: dict[str, Any] | None,
    unit: str,
    at_least: float,
    suffix: str = "",
) -> list[str]:
    """A figure that is a multiple of a same-run baseline (``base``: its name and rate)."""
    if not value or not base:
        return [figure, target, NOT_RUN, "", NOT_RUN]
    x = value / base["rate"]
    return [figure, target, f"{x:.2f}{suffix}", f"{base['name']}: {_f(base['rate'])} {unit}",
            _verdict(x >= at_least)]  # fmt: skip


def _pg_mixed_rows(results: dict[str, Any]) -> list[list[str]]:
    e = _engine(results, "postgres", "mixed")
    rate = e["rate"] if e else None
    rows = [
        ["Postgres mixed CDC, events/s", f">= {_f(PG_MIXED_RATE)} (stretch {_f(PG_MIXED_STRETCH)})",
         _f(rate) if rate else NOT_RUN, "", _verdict(None if rate is None else rate >= PG_MIXED_RATE)],
        _ratio_row("Postgres mixed / raw pgoutput read", f">= {RAW_SHARE} (stretch {RAW_SHARE_STRETCH})",
                   rate, best_raw(results.get("postgres", {}).get("mixed"), "pgoutput"),
                   "row messages/s", RAW_SHARE),
        _ratio_row("Postgres mixed / Spark MERGE INTO", f">= {VS_MERGE:.0f}x", rate,
                   _baseline(results, "Spark MERGE"), "events/s", VS_MERGE, "x"),
    ]  # fmt: skip
    if e and e.get("events_per_cpu_second"):
        rows.append(["Postgres mixed, events per CPU-second (all processes)", "reported",
                     _f(e["events_per_cpu_second"]), "anchors: filament ~574k (full load), OLake ~38k",
                     "reported"])  # fmt: skip
    return rows


def _snapshot_rows(results: dict[str, Any]) -> list[list[str]]:
    r = results.get("postgres", {}).get("snapshot")
    s = (r or {}).get("snapshot")
    after = s.get("rate_after_startup") if s else None
    return [
        ["Postgres snapshot (8 columns), rows/s after start-up", f">= {_f(SNAPSHOT_RATE)}",
         f"{_f(after)} ({_f(s['rate'])} from engine start)" if s and after else NOT_RUN, "",
         _verdict(None if after is None else after >= SNAPSHOT_RATE)],
        _ratio_row("Postgres snapshot / raw COPY TO STDOUT", f">= {SNAPSHOT_RAW_SHARE}", after,
                   best_raw(r, "raw COPY"), "rows/s", SNAPSHOT_RAW_SHARE),
    ]  # fmt: skip


def _mariadb_rows(results: dict[str, Any]) -> list[list[str]]:
    mixed = _engine(results, "mariadb", "mixed")
    snap = _engine(results, "mariadb", "snapshot", "snapshot")
    raw = best_raw(results.get("mariadb", {}).get("mixed"), "binlog")
    snap_after = snap.get("rate_after_startup", snap["rate"]) if snap else None
    return [
        ["MariaDB mixed CDC, events/s", f">= {_f(MARIADB_MIXED_RATE)}",
         _f(mixed["rate"]) if mixed else NOT_RUN,
         f"{raw['name']}: {_f(raw['rate'])} rows/s" if raw else "",
         _verdict(None if not mixed else mixed["rate"] >= MARIADB_MIXED_RATE)],
        ["MariaDB snapshot, rows/s after start-up", f">= {_f(MARIADB_SNAPSHOT_RATE)}",
         f"{_f(snap_after)} ({_f(snap['rate'])} from engine start)" if snap else NOT_RUN, "",
         _verdict(None if snap_after is None else snap_after >= MARIADB_SNAPSHOT_RATE)],
    ]  # fmt: skip


def _steady_rows(results: dict[str, Any]) -> list[list[str]]:
    x, one, many = many_tables_ratio(results)

    def runs(es: list[dict[str, Any]]) -> str:
        return " / ".join(f"{e['seconds']:.2f}" for e in es)

    each = f"median of {len(many)} / {len(one)} runs; " if len(one) > 1 or len(many) > 1 else ""
    rows = [["100 tables / 1 table, time for the same changes", f"<= {MANY_TABLES}x",
             f"{x:.2f}x ({each}100 tables: {runs(many)} s, {many[0]['batches']} batch(es))" if x else NOT_RUN,
             f"1 table: {runs(one)} s" if one else "", _verdict(None if x is None else x <= MANY_TABLES)]]  # fmt: skip
    for kind, name in (("postgres", "Postgres"), ("mariadb", "MariaDB")):
        lag = results.get("lag", {}).get(kind) or {}
        p99 = lag.get("p99")
        rows.append([f"{name} commit-to-visible lag p99 at {_f(lag.get('rate', 5_000))} events/s",
                     f"<= {LAG_P99_SECONDS:.0f} s", f"{p99:.2f} s (p50 {lag['p50']:.2f} s)" if p99 is not None else NOT_RUN,
                     "", _verdict(None if p99 is None else p99 <= LAG_P99_SECONDS)])  # fmt: skip
    rows.append(_rss_row(results))
    return rows


def _rss_row(results: dict[str, Any]) -> list[str]:
    """One engine per process (``benchmarks.memflat``) when run, else the in-process sweep."""
    mf = results.get("memflat") or {}
    if "error" in mf:
        return ["Driver RSS peak, one engine per process", f"<= {1 + RSS_FLAT_TOLERANCE:.2f}x",
                f"failed: {mf['error'][:200]}", "", NOT_RUN]  # fmt: skip
    if "ratio" in mf:
        lo, hi, x = mf["lo"], mf["hi"], mf["ratio"]
        runs = min(sum(1 for p in mf["points"] if p["max_events"] == s["max_events"]) for s in (lo, hi))
        return [f"Driver RSS peak, {_f(hi['events_per_batch'])} vs {_f(lo['events_per_batch'])} events per batch "
                f"(one engine per process, median of {runs})", f"<= {1 + RSS_FLAT_TOLERANCE:.2f}x",
                f"{x:.3f}x ({hi['peak_kib'] // 1024:,.0f} / {lo['peak_kib'] // 1024:,.0f} MiB)", "",
                _verdict(x <= 1 + RSS_FLAT_TOLERANCE)]  # fmt: skip
    r = results.get("postgres", {}).get("mixed") or {}
    e = r.get("engine")
    sweep = sweep_points(r, e) if e else []
    peaks = [(v["events_per_batch"], (v.get("memory_peaks_kib") or {}).get(DRIVER)) for v in sweep]
    peaks = [(n, p) for n, p in peaks if p]
    if len(peaks) >= 2:
        (lo_n, lo), (hi_n, hi) = peaks[0], peaks[-1]
        return [f"Driver RSS peak, {_f(hi_n)} vs {_f(lo_n)} events per batch (one process, after other phases)",
                f"<= {1 + RSS_FLAT_TOLERANCE:.2f}x", f"{hi / lo:.3f}x ({hi // 1024:,} / {lo // 1024:,} MiB)",
                "", _verdict(hi / lo <= 1 + RSS_FLAT_TOLERANCE)]  # fmt: skip
    return ["Driver RSS peak, largest vs smallest batch", f"<= {1 + RSS_FLAT_TOLERANCE:.2f}x",
            NOT_RUN, "", NOT_RUN]  # fmt: skip


def issue27_lines(results: dict[str, Any]) -> list[str]:
    """The section of REPORT.md: every done-when figure of issue 27 this run measured."""
    rows = _pg_mixed_rows(results) + _snapshot_rows(results) + _mariadb_rows(results)
    rows += _steady_rows(results)
    met = sum(1 for r in rows if r[-1] == "**met**")
    judged = sum(1 for r in rows if r[-1] in ("**met**", "missed"))
    return [
        "## Targets of issue 27 (this run)", "",
        f"Every figure below comes from this one run; a baseline beside it ran in the same run. "
        f"{met} of {judged} judged targets met.", "",
        _table(["figure", "target", "this run", "baseline (same run)", "verdict"], rows), "",
        "Not part of `make bench`: the 50M-row snapshot killed and resumed (`python -m "
        "benchmarks.bigsnapshot`, results in `benchmarks/results/bigsnapshot/`) and the "
        "snapshot's chunks read by both executors of the 2-worker cluster (`python -m "
        "benchmarks.cluster_chunks`, `benchmarks/results/cluster-chunks/`).", "",
    ]  # fmt: skip
