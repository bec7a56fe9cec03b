"""REPORT.md's resource sections: peak memory and CPU time per process class, per phase, and
the two targets on them (driver RSS flat in batch size; rows per CPU-second).

CPU is user + system seconds over the phase (``benchmarks/procs.py``), per process class:
this Python process (the engine's driver), Spark's JVM, Spark's Python workers and the
database server (every backend, so the walsender's decoding counts). Per event it is the
whole machine's work for one change, whatever the wall clock did; under load the wall clock
stretches while CPU-seconds barely move, so this is the figure to compare across runs.
"""

from __future__ import annotations

from typing import Any

KEY_MAP_BYTES_PER_KEY = 116  # ops_mapping.KeyPositionMap, int keys (tracemalloc, this machine)
SOURCE_NAMES = {"postgres": "PostgreSQL", "mariadb": "MariaDB"}
WORKLOAD_ORDER = ("snapshot", "mixed", "hot", "wide", "tables1", "tables100")
DRIVER, JVM, WORKERS = "driver (Python)", "Spark JVM", "Spark Python workers"
RSS_FLAT_TOLERANCE = 0.10  # issue 27: driver RSS at 100k events per batch within 10% of 10k
# Published rows per CPU-second, for scale (issue 27): filament's full loads, OLake's CDC.
CPU_ANCHORS = (("filament (full load)", 574_000), ("OLake", 38_000))


def fmt(x: Any, digits: int = 0) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, int | float):
        return f"{x:,.{digits}f}"
    return str(x)


def mib(kib: Any) -> str:
    return "n/a" if kib is None else f"{kib / 1024:,.0f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def growth(e: dict[str, Any], cls: str) -> int | None:
    """KiB the class's peak rose above its RSS at the phase's start."""
    peak = e.get("memory_peaks_kib", {}).get(cls)
    start = e.get("memory_start_kib", {}).get(cls)
    if peak is None or start is None:
        return None
    return max(peak - start, 0)


def _peak_growth(e: dict[str, Any], cls: str) -> str:
    """Peak MiB (growth during the phase)."""
    peak = e.get("memory_peaks_kib", {}).get(cls)
    g = growth(e, cls)
    return mib(peak) + (f" (+{mib(g) if g else 0})" if g is not None else "")


def _phases(results: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(source, workload, phase label, phase) of every engine phase, in report order."""
    out = []
    for kind in ("postgres", "mariadb"):
        for name in WORKLOAD_ORDER:
            r = results.get(kind, {}).get(name)
            if not r:
                continue
            for e in [x for x in (r["snapshot"], r["engine"]) if x] + r.get("variants", []):
                phase = "snapshot" if e is r["snapshot"] else f"changes ({e['label']})"
                out.append((SOURCE_NAMES[kind], name, phase, e))
    return out


def memory_lines(results: dict[str, Any], pngs: list[str]) -> list[str]:
    md = ["## Peak memory (RSS high-water mark) per process", "",
          "`VmHWM` of each process, reset at the start of each phase; MiB, with the growth "
          "during the phase (peak minus RSS at its start) in brackets. *driver* is this "
          "Python process (the engine's run loop, source reader, batcher, pyiceberg); the JVM "
          "is Spark's driver (a child process); *workers* is the largest Spark Python worker "
          "(the apply stage's mapper and file writer run there); Postgres/MariaDB are the sum "
          "over the server's processes.", ""]  # fmt: skip
    rows = []
    for src, name, phase, e in _phases(results):
        sm = e["memory_sum_peaks_kib"]
        rows.append([src, name, phase, fmt(e["events_per_batch"]), _peak_growth(e, DRIVER),
                     _peak_growth(e, JVM), _peak_growth(e, WORKERS),
                     mib(sm.get("Postgres") or sm.get("MariaDB"))])  # fmt: skip
    if rows:
        md += [table(["source", "workload", "phase", "events/batch", "driver", "Spark JVM",
                      "workers (max)", "DB server (sum of peaks)"], rows), ""]  # fmt: skip
    if "memory.png" in pngs:
        md += ["![memory](memory.png)", ""]
    return md


def _cpu(e: dict[str, Any], *classes: str) -> float | None:
    cpu = e.get("cpu_seconds")
    if not cpu:
        return None
    return sum(cpu.get(c, 0.0) for c in classes)


def cpu_lines(results: dict[str, Any]) -> list[str]:
    rows = []
    for src, name, phase, e in _phases(results):
        if not e.get("cpu_seconds_total"):
            continue
        rows.append([src, name, phase, fmt(e["events"]), fmt(e["seconds"], 1), fmt(e["rate"]),
                     fmt(_cpu(e, DRIVER), 1), fmt(_cpu(e, JVM), 1), fmt(_cpu(e, WORKERS), 1),
                     fmt(_cpu(e, "Postgres", "MariaDB"), 1), fmt(e["cpu_seconds_total"], 1),
                     fmt(e["cpu_us_per_event"], 1), f"**{fmt(e['events_per_cpu_second'])}**",
                     e["loadavg"]])  # fmt: skip
    if not rows:
        return []
    anchors = ", ".join(f"{n} ~{fmt(v)}" for n, v in CPU_ANCHORS)
    return ["## CPU time per process", "",
            "User + system CPU seconds over each phase, per process class (`/proc/<pid>/stat`, "
            "sampled every 0.5 s; the sampler's own thread is left out). *events per "
            "CPU-second* is events (rows, for a snapshot) over the sum of every class: the "
            "whole machine's work per change, which load stretches far less than the wall "
            f"clock. Published rows per CPU-second for scale: {anchors}.", "",
            table(["source", "workload", "phase", "events", "wall s", "events/s", "driver s",
                   "Spark JVM s", "workers s", "DB server s", "CPU s", "CPU us/event",
                   "events per CPU-second", "load avg"], rows), ""]  # fmt: skip


def sweep_points(r: dict[str, Any], e: dict[str, Any]) -> list[dict[str, Any]]:
    """The batch-size sweep's phases and the default engine's, smallest batches first."""
    return sorted([*[v for v in r.get("variants", []) if "max_events" in v and "scrapes" not in v],
                   {**e, "label": "default"}],
                  key=lambda v: v["events_per_batch"])  # fmt: skip


def resource_targets(r: dict[str, Any], e: dict[str, Any], verdict: dict[str, Any]) -> list[str]:
    """The closing's lines on memory and CPU (mixed CDC on Postgres); fills ``verdict``."""
    lines = []
    sweep = sweep_points(r, e)
    if len(sweep) >= 2:
        lo, hi = sweep[0], sweep[-1]
        lo_peak = lo.get("memory_peaks_kib", {}).get(DRIVER)
        hi_peak = hi.get("memory_peaks_kib", {}).get(DRIVER)
        if lo_peak and hi_peak:
            x = hi_peak / lo_peak
            verdict["driver_rss_ratio"] = x
            state = "MET" if x <= 1 + RSS_FLAT_TOLERANCE else "MISSED"
            pts = ", ".join(
                f"{fmt(v['events_per_batch'])} events/batch ({v['label']}): {mib(v['memory_peaks_kib'].get(DRIVER))}"
                f" MiB (+{mib(growth(v, DRIVER))})" for v in sweep)
            lines.append(
                f"* **Driver peak RSS at the largest batch within {RSS_FLAT_TOLERANCE:.0%} of the "
                f"smallest: {state}** - {x:.3f}x; driver VmHWM (growth in the phase) at {pts}. "
                f"The key map costs about {KEY_MAP_BYTES_PER_KEY} B per key. Caveat: these "
                "engines run in one process, which keeps the memory an earlier phase filled, so a "
                "later phase's growth can hide under it; one engine per process: results/memflat.md.")
    if e.get("events_per_cpu_second"):
        verdict["events_per_cpu_second"] = e["events_per_cpu_second"]
        anchors = ", ".join(f"{n} ~{fmt(v)}" for n, v in CPU_ANCHORS)
        lines.append(
            f"* **Rows per CPU-second**: {fmt(e['events_per_cpu_second'])} "
            f"({fmt(e['cpu_seconds_total'], 1)} CPU s for {fmt(e['events'])} events, "
            f"{fmt(e['cpu_us_per_event'], 1)} us each: driver {fmt(_cpu(e, DRIVER), 1)}, "
            f"JVM {fmt(_cpu(e, JVM), 1)}, workers {fmt(_cpu(e, WORKERS), 1)}, Postgres "
            f"{fmt(_cpu(e, 'Postgres'), 1)}); published anchors: {anchors}.")
    return lines
