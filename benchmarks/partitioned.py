"""The partitioned case of ``make bench`` (issue 24): the same backlog replicated by a second
engine whose tables the engine creates partitioned (``iceberg.partition_by``, default
``month(d)``, ``bucket(8, id)``), in the same run as the default (unpartitioned) engine;
then a read of one month of each table by Spark, with Iceberg's scan metrics.

Why ``month`` and not ``day``: the workloads' ``d`` is uniform over a year, so ``day(d)`` would
give 365 x 8 partitions, each touched by almost every batch (a file per partition per
commit): a worst case, not a CDC table's shape, where changes cluster on recent days. Pass
``--partition-by 'day(d),bucket(8,id)'`` to measure that one.

The read: ``SELECT id FROM t WHERE d >= <first day of the month> AND d < <next month>``
through ``spark.read.format("iceberg").load(<metadata.json>)``; the numbers come from the
metrics Iceberg's Spark scan reports on its ``BatchScanExec`` node (``resultDataFiles``:
data files planned, ``skippedDataFiles``: pruned within the manifests read,
``scannedDataManifests`` / ``skippedDataManifests``), read from the executed plan through
py4j. Beside them, from the ``files`` metadata table: live data files, and those whose
partition is that month (what a perfect pruning plans).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from replicator.config import RunConfig

LABEL = "partitioned"
DEFAULT_SPEC = ("month(d)", "bucket(8, id)")
READ_MONTH = dt.date(2026, 1, 1)  # workloads.py: d is uniform over the year from 2026-01-01

# Iceberg's Spark scan metrics (org.apache.iceberg.spark.source.metrics) we report.
SCAN_METRICS = ("resultDataFiles", "skippedDataFiles", "resultDeleteFiles",
                "scannedDataManifests", "skippedDataManifests", "totalDataManifest")  # fmt: skip


def parse_spec(text: str | None) -> tuple[str, ...]:
    """``"month(d),bucket(8,id)"`` -> its transforms (commas inside brackets kept)."""
    if not text:
        return DEFAULT_SPEC
    return tuple(p.strip() for p in re.split(r",(?![^()]*\))", text) if p.strip())


def with_partitions(cfg: RunConfig, source_tables: list[str], spec: tuple[str, ...]) -> RunConfig:
    """``cfg`` with every table of the workload created partitioned by ``spec`` (validated
    as a config file would be)."""
    data = cfg.model_dump()
    data["iceberg"]["partition_by"] = {t: list(spec) for t in source_tables}
    return RunConfig.model_validate(data)


def _time_field(spec: tuple[str, ...]) -> tuple[str, str]:
    """The spec's time transform on ``d``: (transform, partition field name)."""
    for p in spec:
        m = re.fullmatch(r"(day|month)\(\s*d\s*\)", p)
        if m:
            return m.group(1), f"d_{m.group(1)}"
    raise ValueError(f"the partitioned read needs day(d) or month(d) in the spec, got {spec}")


def month_filter(spec: tuple[str, ...]) -> tuple[str, str]:
    """(the read's row filter, the ``files`` table's filter for the partitions it needs)."""
    transform, field = _time_field(spec)
    start = READ_MONTH
    end = (start + dt.timedelta(days=32)).replace(day=1)
    rows = f"d >= TIMESTAMP '{start} 00:00:00' AND d < TIMESTAMP '{end} 00:00:00'"  # session zone: UTC
    if transform == "month":
        months = (start.year - 1970) * 12 + start.month - 1
        return rows, f"partition.{field} = {months}"
    return rows, f"partition.{field} >= DATE '{start}' AND partition.{field} < DATE '{end}'"


def _seq(s: Any) -> list[Any]:
    return [s.apply(i) for i in range(s.size())]


def _scan_nodes(node: Any) -> list[Any]:
    """BatchScanExec nodes of an executed plan, through adaptive plans and query stages."""
    name = node.getClass().getSimpleName()
    if name == "AdaptiveSparkPlanExec":
        return _scan_nodes(node.executedPlan())
    if name.endswith("QueryStageExec"):
        return _scan_nodes(node.plan())
    if name == "BatchScanExec":
        return [node]
    return [n for c in _seq(node.children()) for n in _scan_nodes(c)]


def scan_metrics(df: Any) -> tuple[int, dict[str, int]]:
    """Run ``df``; (its row count, Iceberg's scan metrics summed over its scans)."""
    rows = len(df.collect())
    out: dict[str, int] = {}
    for node in _scan_nodes(df._jdf.queryExecution().executedPlan()):
        metrics = node.metrics()
        for name in SCAN_METRICS:
            m = metrics.get(name)
            if m.isDefined():
                out[name] = out.get(name, 0) + int(m.get().value())
    return rows, out


def partition_read(spark: Any, metadata_location: str, spec: tuple[str, ...], label: str) -> dict[str, Any]:
    """One month of the table read by Spark: rows, scan metrics, and the table's files."""
    rows_filter, files_filter = month_filter(spec)
    n, metrics = scan_metrics(spark.read.format("iceberg").load(metadata_location)
                              .where(rows_filter).select("id"))  # fmt: skip
    files = spark.read.format("iceberg").load(metadata_location + "#files").where("content = 0")
    out: dict[str, Any] = {"label": label, "filter": rows_filter, "rows": n, "metrics": metrics,
                           "data_files": files.count()}  # fmt: skip
    if "partition" in files.columns:
        out["partition_data_files"] = files.where(files_filter).count()
    return out


def partition_reads(spark: Any, default_meta: str | None, part_meta: str | None,
                    spec: tuple[str, ...]) -> list[dict[str, Any]]:  # fmt: skip
    """The same month read from the unpartitioned and the partitioned table."""
    out = []
    for label, meta in (("unpartitioned", default_meta), (f"partitioned: {', '.join(spec)}", part_meta)):
        if meta:
            out.append(partition_read(spark, meta, spec, label))
    return out


# -- report -----------------------------------------------------------------------------------


def report_lines(results: dict[str, Any]) -> list[str]:
    """The REPORT.md section: both engines on each workload that ran both, and the reads."""
    md: list[str] = []
    for name, r in results.get("postgres", {}).items():
        part = next((v for v in r.get("variants", []) if v.get("partition_by")), None)
        e = r.get("engine")
        if not part or not e:
            continue
        if not md:
            md += ["## Partitioned tables vs unpartitioned (PostgreSQL)", "",
                   "The same backlog, same run: the default engine's tables are unpartitioned, "
                   "the second engine creates them with `iceberg.partition_by` (every table of "
                   "the workload). Files per commit: data / position-delete / equality-delete "
                   "files in one table's snapshot, mean and largest.", ""]  # fmt: skip
        rows = []
        for label, x in (("unpartitioned", e), ("partitioned: " + ", ".join(part["partition_by"]), part)):
            f = x["files"]
            pc = f["per_commit"]
            rows.append([name, label, f"{x['events']:,}", f"{x['seconds']:.1f}", f"**{x['rate']:,.0f}**",
                         str(x["commits"]),
                         f"{pc['data']:.1f} / {pc['position_deletes']:.1f} / {pc['equality_deletes']:.1f}",
                         str(f["max_per_commit"]), str(x["loadavg"])])  # fmt: skip
        md += [_table(["workload", "tables", "events", "seconds", "events/s", "commits",
                       "files per commit (data/pos/eq)", "max files in a commit", "load"], rows), ""]  # fmt: skip
        reads = r.get("partition_reads") or []
        if reads:
            md += [f"One month of `{r['workload']['tables'][0]}` read by Spark (`{reads[0]['filter']}`); "
                   "planned / pruned data files from Iceberg's scan metrics (`resultDataFiles` / "
                   "`skippedDataFiles` of the `BatchScanExec` node), live data files and those of "
                   "the month's partitions from the `files` metadata table:", ""]  # fmt: skip
            rr = []
            for x in reads:
                m = x["metrics"]
                rr.append([x["label"], f"{x['rows']:,}", str(m.get("resultDataFiles", "?")),
                           str(m.get("skippedDataFiles", "?")), str(x["data_files"]),
                           str(x.get("partition_data_files", "-")),
                           f"{m.get('scannedDataManifests', '?')} / {m.get('skippedDataManifests', '?')}"])  # fmt: skip
            md += [_table(["table", "rows read", "data files scanned", "skipped", "live data files",
                           "in the month's partitions", "manifests scanned / skipped"], rr), ""]  # fmt: skip
    return md


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
