"""Two ``make bench`` results side by side: engine events/s, lag, driver memory.

    .venv/bin/python -m benchmarks.compare BEFORE.json AFTER.json [--out FILE.md]

Each run carries its own load average: runs on a shared machine differ by load as well as by
code, so the table shows it next to every figure.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.report import SOURCE_NAMES, WORKLOAD_ORDER, lag_label


def _engine(r: dict[str, Any], kind: str, name: str) -> dict[str, Any] | None:
    w = r.get(kind, {}).get(name)
    return (w.get("engine") or w.get("snapshot")) if w else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{b / a:.2f}x" if a and b else ""


def compare(before: dict[str, Any], after: dict[str, Any], names: tuple[str, str]) -> str:
    b_name, a_name = names
    lines = [
        f"# Benchmarks: {b_name} vs {a_name}", "",
        f"* {b_name}: run {before['meta'].get('started')}, `{before['meta'].get('command')}`",
        f"* {a_name}: run {after['meta'].get('started')}, `{after['meta'].get('command')}`", "",
        "## Engine events/s", "",
        f"| source | workload | {b_name} | load | {a_name} | load | after / before |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    for kind in ("postgres", "mariadb"):
        for name in WORKLOAD_ORDER:
            eb, ea = _engine(before, kind, name), _engine(after, kind, name)
            if not eb and not ea:
                continue
            rb, ra = (eb or {}).get("rate"), (ea or {}).get("rate")
            lines.append(
                f"| {SOURCE_NAMES[kind]} | {name} | {f'{rb:,.0f}' if rb else 'not run'} "
                f"| {(eb or {}).get('loadavg', '')} | {f'{ra:,.0f}' if ra else 'not run'} "
                f"| {(ea or {}).get('loadavg', '')} | {_ratio(rb, ra)} |"
            )
    lines += ["", "## Commit-to-visible lag", "",
              "| run | source (setting) | offered/s | achieved/s | p50 s | p99 s | batches |",
              "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for run, r in ((b_name, before), (a_name, after)):
        for key, x in r.get("lag", {}).items():
            if x.get("error"):
                continue
            e = x.get("engine") or {}
            lines.append(
                f"| {run} | {lag_label(key, x)} | {x['rate']:,.0f} | {x['achieved_rate']:,.0f} "
                f"| {x['p50']:.2f} | {x['p99']:.2f} | {e.get('batches', '')} |"
            )
    lines += ["", "## Driver peak RSS, mixed on PostgreSQL, by batch size (MiB)", "",
              "| run | engine | events/batch | driver MiB |", "| --- | --- | --- | --- |"]  # fmt: skip
    for run, r in ((b_name, before), (a_name, after)):
        w = r.get("postgres", {}).get("mixed") or {}
        for e in [w.get("engine"), *(w.get("variants") or [])]:
            if e and e.get("memory_peaks_kib"):
                mib = e["memory_peaks_kib"].get("driver (Python)", 0) / 1024
                lines.append(f"| {run} | {e.get('label') or 'default'} | "
                             f"{e.get('events_per_batch', 0):,.0f} | {mib:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--names", default="before,after", help="column names, comma-separated")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    b, a = (json.loads(p.read_text()) for p in (args.before, args.after))
    b_name, a_name = args.names.split(",", 1)
    text = compare(b, a, (b_name, a_name))
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
