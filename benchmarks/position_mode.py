"""``iceberg.delete_mode`` in ``make bench`` (issue 26): the same backlog replicated by the
default engine (``equality``) and by a second engine with ``delete_mode: position``, in the
same run, on the Postgres workloads given by ``--delete-mode-workloads`` (default mixed, hot
and wide); for each: events/s, files per commit and what reading the table costs afterwards
(Spark ``count(*)`` and a point lookup by ``id``, first run / best of 3, and the table's files).
And the primary-key index's memory per key at ``--index-keys`` keys (default 10M), through
``benchmarks/pk_index.py``'s measurement in a process of its own (clean RSS).

``benchmarks/delete_mode.py`` is the older A/B of the two modes on one Debezium workload with
the local engine; this one runs the real sources and Spark, beside every other number.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from typing import Any

from replicator.config import RunConfig

MODES = ("equality", "position")
DEFAULT_MODE = "equality"  # IcebergConfig.delete_mode's default: the default engine's mode
SLOT_PREFIX = "eng_dm_"


def parse_modes(text: str | None) -> tuple[str, ...]:
    """``"equality,position"`` -> the modes (validated)."""
    modes = tuple(m.strip() for m in (text or "").split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"--delete-modes: unknown mode(s) {bad}; expected any of {list(MODES)}")
    return modes


def extra_modes(modes: tuple[str, ...]) -> tuple[str, ...]:
    """The modes that need an engine beside the default one (which runs ``equality``)."""
    return tuple(m for m in modes if m != DEFAULT_MODE) if len(modes) > 1 else ()


def label(mode: str) -> str:
    return f"delete_mode={mode}"


def mode_of(variant_label: str) -> str | None:
    prefix = label("")
    return variant_label[len(prefix):] if variant_label.startswith(prefix) else None


def with_delete_mode(cfg: RunConfig, mode: str) -> RunConfig:
    """``cfg`` with ``iceberg.delete_mode`` set (validated as a config file would be)."""
    data = cfg.model_dump()
    data["iceberg"]["delete_mode"] = mode
    return RunConfig.model_validate(data)


def read_after(spark: Any, metadata_location: str, key: int, mode: str) -> dict[str, Any]:
    """Reading one replicated table after the run: count and point lookup, and its files."""
    from dataclasses import asdict

    from benchmarks.readcost import file_counts, measure

    def load() -> Any:
        return spark.read.format("iceberg").load(metadata_location)

    t = measure(spark, mode, load, key)
    t.files, t.bytes = file_counts(spark, metadata_location)
    return {"mode": mode, **asdict(t)}


# -- the index's memory per key -----------------------------------------------------------------


def index_memory(keys: int, lookup_batches: int = 3) -> dict[str, Any]:
    """``benchmarks.pk_index.measure`` at ``keys`` long keys in a spawned process (its RSS is
    the index's alone); no apply batches (the figure asked for is memory per key)."""
    from benchmarks import pk_index

    # As pk_index's main: large arrays from mmap, so freed ones go back to the OS.
    old = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    try:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        proc = ctx.Process(target=pk_index._child, args=(keys, "long", lookup_batches, 0, queue))
        proc.start()
        try:
            result: dict[str, Any] = queue.get(timeout=1800)
        finally:
            proc.join(timeout=60)
            with contextlib.suppress(Exception):
                proc.kill()
        return result
    finally:
        if old is None:
            os.environ.pop("MALLOC_MMAP_THRESHOLD_", None)


# -- report -----------------------------------------------------------------------------------


def report_lines(results: dict[str, Any]) -> list[str]:
    """The REPORT.md section: both modes on each workload that ran both; the index's memory."""
    md: list[str] = []
    rows, reads = [], []
    for name, r in results.get("postgres", {}).items():
        e = r.get("engine")
        others = [v for v in r.get("variants", []) if v.get("delete_mode")]
        if not e or not others:
            continue
        for x in [{**e, "delete_mode": DEFAULT_MODE}, *others]:
            f = x["files"]
            pc = f["per_commit"]
            rows.append([name, x["delete_mode"], f"{x['events']:,}", f"{x['seconds']:.1f}",
                         f"**{x['rate']:,.0f}**", f"{x['rate'] / e['rate']:.2f}x" if e["rate"] else "-",
                         str(x["commits"]),
                         f"{pc['data']:.1f} / {pc['position_deletes']:.1f} / {pc['equality_deletes']:.1f}",
                         str(f["max_per_commit"]), str(x["loadavg"])])  # fmt: skip
        for t in r.get("delete_mode_reads") or []:
            fc = t.get("files") or {}
            reads.append([name, t["mode"], f"{t['rows']:,}", f"{t['count_first']:.2f} / {t['count_best']:.2f}",
                          f"{t['lookup_first']:.2f} / {t['lookup_best']:.2f}",
                          " / ".join(str(fc.get(k, 0)) for k in ("data", "position deletes", "equality deletes")),
                          f"{t['bytes'] / 2**20:.1f}"])  # fmt: skip
    if rows:
        md += ["## Delete modes: equality vs position (PostgreSQL)", "",
               "The same backlog, same run: the default engine writes equality deletes "
               "(`iceberg.delete_mode: equality`), a second engine position deletes found "
               "through its primary-key index (`position`). Ratio: events/s over the default "
               "engine's. Files per commit: data / position-delete / equality-delete files in "
               "one table's snapshot, mean and largest.", "",
               _table(["workload", "delete_mode", "events", "seconds", "events/s", "vs equality",
                       "commits", "files per commit (data/pos/eq)", "max files in a commit", "load"], rows),
               ""]  # fmt: skip
    if reads:
        md += ["Reading the first table of each workload after the run (Spark, merge-on-read, no "
               "maintenance in between beyond the engine's own): `count(*)` and a point lookup "
               "by `id`, first run / best of 3, seconds; live files data / position deletes / "
               "equality deletes.", "",
               _table(["workload", "delete_mode", "rows", "count s", "lookup s", "files (data/pos/eq)", "MiB"],
                      reads), ""]  # fmt: skip
    ix = results.get("pk_index")
    if ix:
        md += ["## Primary-key index memory per key", "",
               f"`benchmarks/pk_index.py`'s measurement at {ix['keys']:,} `bigint` keys, in a process "
               "of its own: resident bytes per key (RSS after the build minus before, freed memory "
               "returned to the OS; untrimmed beside it), the index's own count (bloom filters, "
               "sparse samples, file registry), disk bytes per key, build rate, point lookups of "
               "10k-key batches (1% present).", "",
               _table(["keys", "RSS B/key", "untrimmed B/key", "index's count B/key", "disk B/key",
                       "build keys/s", "peak RSS MiB", "lookup keys/s (1%)"],
                      [[f"{ix['keys']:,}", str(ix["resident_bytes_per_key_rss"]),
                        str(ix["resident_bytes_per_key_rss_untrimmed"]),
                        str(ix["resident_bytes_per_key_index"]), str(ix["disk_bytes_per_key"]),
                        f"{ix['build_keys_per_s']:,}", str(ix["peak_rss_mb"]),
                        f"{ix.get('lookup_1pct_keys_per_s_median', 0):,}"]]), ""]  # fmt: skip
    return md


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
