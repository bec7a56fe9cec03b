"""PNG charts for the report (matplotlib, Agg backend; imported only when charts are wanted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.report import READER_MARK, SOURCE_NAMES, WORKLOAD_ORDER, lag_label, time_split  # noqa: E402


def _short(kind: str) -> str:
    return {"postgres": "pg", "mariadb": "maria"}.get(kind, kind)


def _save(fig: Any, out: Path, name: str, done: list[str]) -> None:
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    done.append(name)


def throughput(results: dict[str, Any], out: Path, done: list[str]) -> None:
    kinds = [k for k in ("postgres", "mariadb") if results.get(k)]
    names = [n for n in WORKLOAD_ORDER if any(results.get(k, {}).get(n) for k in kinds)]
    if not names:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(len(kinds), 1)
    for i, k in enumerate(kinds):
        vals = []
        for n in names:
            r = results[k].get(n)
            e = r and (r["engine"] or r["snapshot"])
            vals.append(e["rate"] if e else 0)
        xs = [j + i * width for j in range(len(names))]
        bars = ax.bar(xs, vals, width, label=SOURCE_NAMES[k])
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in vals], fontsize=8)
    ax.set_xticks([j + width * (len(kinds) - 1) / 2 for j in range(len(names))], names)
    ax.set_ylabel("events/s (source commit -> Iceberg commit)")
    ax.set_title("Engine throughput per workload")
    ax.legend()
    _save(fig, out, "throughput.png", done)


def comparison(results: dict[str, Any], out: Path, done: list[str]) -> None:
    r = results.get("postgres", {}).get("mixed")
    if not r or not r.get("engine"):
        return
    labels = ["this engine"]
    vals = [r["engine"]["rate"]]
    for b in r.get("baselines", []):
        labels.append(b["name"].replace(" (", "\n("))
        vals.append(b.get("rate") or 0)
    for x in r.get("raw", []):
        labels.append(x["name"].replace(" (", "\n("))
        vals.append(x["rate"])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    colors = ["tab:blue"] + ["tab:orange"] * len(r.get("baselines", [])) + ["tab:gray"] * len(
        r.get("raw", []))  # fmt: skip
    bars = ax.barh(labels[::-1], vals[::-1], color=colors[::-1])
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in vals[::-1]], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("events/s (row changes), log scale")
    ax.set_title("Mixed CDC on PostgreSQL: engine, baselines, raw source read")
    _save(fig, out, "comparison.png", done)


def lag(results: dict[str, Any], out: Path, done: list[str]) -> None:
    lags = {k: v for k, v in results.get("lag", {}).items() if v.get("series")}
    if not lags:
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    for k, v in lags.items():
        xs = [s[0] for s in v["series"]]
        ys = [s[1] for s in v["series"]]
        ax.plot(xs, ys, ".", markersize=2, alpha=0.6,
                label=f"{lag_label(k, v)} (p50 {v['p50']:.2f}s, p99 {v['p99']:.2f}s)")  # fmt: skip
    ax.set_xlabel("source commit time (s since the writer started)")
    ax.set_ylabel("commit-to-visible lag (s)")
    ax.set_title(f"Lag at a fixed offered rate ({next(iter(lags.values()))['rate']:,.0f} events/s)")
    ax.legend(markerscale=5)
    _save(fig, out, "lag.png", done)


def memory(results: dict[str, Any], out: Path, done: list[str]) -> None:
    classes = ("driver (Python)", "Spark JVM", "Spark Python workers")
    rows: list[tuple[str, dict[str, int]]] = []
    for k in ("postgres", "mariadb"):
        for n in WORKLOAD_ORDER:
            r = results.get(k, {}).get(n)
            e = r and (r["engine"] or r["snapshot"])
            if e:
                rows.append((f"{_short(k)}/{n}", e["memory_peaks_kib"]))
    r = results.get("postgres", {}).get("mixed")
    sweep = []
    if r and r.get("engine"):
        sweep = sorted([*[v for v in r.get("variants", []) if not v.get("partition_by") and not v.get("delete_mode")],
                        r["engine"]],
                       key=lambda v: v["events_per_batch"])  # fmt: skip
    if not rows:
        return
    fig, axes = plt.subplots(1, 2 if len(sweep) >= 2 else 1, figsize=(11, 4), squeeze=False)
    ax = axes[0][0]
    width = 0.8 / len(classes)
    for i, c in enumerate(classes):
        ax.bar([j + i * width for j in range(len(rows))],
               [p.get(c, 0) / 1024 for _, p in rows], width, label=c)  # fmt: skip
    ax.set_xticks([j + width for j in range(len(rows))], [n for n, _ in rows], rotation=30)
    ax.set_ylabel("peak RSS (MiB)")
    ax.set_title("Peak RSS per process, per workload")
    ax.legend(fontsize=8)
    if len(sweep) >= 2:
        ax2 = axes[0][1]
        xs = [v["events_per_batch"] for v in sweep]
        for c in classes:
            ax2.plot(xs, [v["memory_peaks_kib"].get(c, 0) / 1024 for v in sweep], "o-", label=c)
        ax2.set_xscale("log")
        ax2.set_xlabel("events per batch (mixed, PostgreSQL)")
        ax2.set_ylabel("peak RSS (MiB)")
        ax2.set_title("Peak RSS vs batch size")
        ax2.legend(fontsize=8)
    _save(fig, out, "memory.png", done)


def split(results: dict[str, Any], out: Path, done: list[str]) -> None:
    bars: list[tuple[str, list[tuple[str, float]], float]] = []
    for k in ("postgres", "mariadb"):
        for n in WORKLOAD_ORDER:
            r = results.get(k, {}).get(n)
            e = r and (r["engine"] or r["snapshot"])
            if e:
                split_ = [(name, sec) for name, sec in time_split(e, k, snapshot=r["engine"] is None)
                          if not name.endswith(READER_MARK)]  # fmt: skip
                bars.append((f"{_short(k)}/{n}", split_, e["seconds"]))
    if not bars:
        return
    groups = {
        "waiting for the source reader": lambda s: s.startswith("run loop"),
        "staging (driver)": lambda s: s.startswith("staging"),
        "Spark job overhead": lambda s: s.startswith("Spark job"),
        "mapping (worker)": lambda s: s == "Spark worker: ops mapping",
        "file writing (worker)": lambda s: s.startswith("Spark worker: file"),
        "commit": lambda s: s.startswith("commit"),
        "maintenance": lambda s: s.startswith("maintenance"),
        "other": lambda s: True,
    }
    fig, ax = plt.subplots(figsize=(9, 4))
    bottoms = [0.0] * len(bars)
    for g, match in groups.items():
        vals = []
        for _, parts, wall in bars:
            v = 0.0
            for name, sec in parts:
                if match(name) and next(gg for gg, m in groups.items() if m(name)) == g:
                    v += sec
            vals.append(100 * v / wall)
        ax.bar([b[0] for b in bars], vals, bottom=bottoms, label=g)
        bottoms = [a + b for a, b in zip(bottoms, vals, strict=True)]
    ax.tick_params(axis="x", labelrotation=30)
    ax.set_ylabel("% of the engine's wall time")
    ax.set_title("Where the apply loop's time goes (the source reader thread overlaps it)")
    ax.legend(fontsize=8, bbox_to_anchor=(1.01, 1), loc="upper left")
    _save(fig, out, "time_split.png", done)


def draw_all(results: dict[str, Any], out: Path) -> list[str]:
    done: list[str] = []
    for fn in (throughput, comparison, lag, memory, split):
        fn(results, out, done)
    return done
