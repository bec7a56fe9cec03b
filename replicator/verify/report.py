"""Render a DiffReport for people (default) or machines (``--json``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from replicator.text import text_table
from replicator.verify.model import EXIT_CANNOT_DIFF, DiffReport, TableResult


def _key(key: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in key.items())


def _keys(keys: list[dict[str, Any]], total: int) -> str:
    return "; ".join(_key(k) for k in keys) + (" ..." if total > len(keys) else "")


def _table_dict(t: TableResult) -> dict[str, Any]:
    d = asdict(t)
    d["status"] = "match" if t.matches else "differs"
    return d


def to_json(report: DiffReport) -> str:
    doc = {
        "status": "match" if report.exit_code == 0 else "differs",
        "exit_code": report.exit_code,
        "consistency": report.consistency.as_dict(),
        "tables": [_table_dict(t) for t in report.tables],
        "seconds": round(report.seconds, 3),
    }
    return json.dumps(doc, indent=2, default=str)


def error_json(message: str) -> str:
    return json.dumps(
        {"status": "error", "exit_code": EXIT_CANNOT_DIFF, "error": message}, indent=2
    )


def to_text(report: DiffReport) -> str:
    differ = [t for t in report.tables if not t.matches]
    lines = [
        f"replicator diff: {len(report.tables)} table(s), "
        + (f"{len(differ)} differ" if differ else "all match")
        + f" ({report.seconds:.1f}s)",
        "",
        report.consistency.describe(),
        "",
    ]
    head = ["source table", "iceberg table", "source rows", "iceberg rows", "missing", "extra",
            "changed", "status"]  # fmt: skip
    rows = [
        [
            t.source_table,
            t.iceberg_table,
            f"{t.source_rows:,}",
            f"{t.iceberg_rows:,}",
            f"{t.missing:,}",
            f"{t.extra:,}",
            f"{t.changed:,}",
            "match" if t.matches else "DIFFERS",
        ]  # fmt: skip
        for t in report.tables
    ]
    lines += text_table(head, rows, right={2, 3, 4, 5, 6})
    for t in report.tables:
        lines += _details(t)
    return "\n".join(lines)


def _details(t: TableResult) -> list[str]:
    out: list[str] = []
    if t.note:
        out.append(f"  {t.source_table}: {t.note}")
    if t.matches and not t.unconvertible_rows:
        return out
    out.append("")
    out.append(f"{t.source_table} -> {t.iceberg_table}: " + ("match" if t.matches else "DIFFERS"))
    if t.missing_columns:
        out.append(f"  source columns missing in Iceberg: {', '.join(t.missing_columns)}")
    for m in t.type_mismatches:
        out.append(
            f"  column {m['column']}: source type {m['source_type']}, Iceberg type "
            f"{m['iceberg_type']} (not compared)"
        )
    if t.missing:
        out.append(f"  missing in Iceberg ({t.missing:,}): {_keys(t.missing_keys, t.missing)}")
    if t.extra:
        dup = f", {t.duplicates:,} of them duplicate keys" if t.duplicates else ""
        out.append(f"  extra in Iceberg ({t.extra:,}{dup}): {_keys(t.extra_keys, t.extra)}")
    if t.changed:
        cols = ", ".join(f"{c} ({n:,})" for c, n in t.changed_columns.items())
        out.append(f"  changed ({t.changed:,}; columns: {cols}):")
        for c in t.changed_rows:
            vals = "; ".join(
                f"{col}: source {c.source.get(col)!r}, iceberg {c.iceberg.get(col)!r}"
                for col in c.columns
            )
            out.append(f"    {_key(c.key)}: {vals}")
        if t.changed > len(t.changed_rows):
            out.append("    ...")
    if t.unconvertible_rows:
        out.append(
            f"  {t.unconvertible_rows:,} source row(s) hold values the engine cannot represent "
            "(it dead-letters them); they cannot match"
        )
    if t.ignored_columns:
        out.append(f"  ignored Iceberg-only columns: {', '.join(t.ignored_columns)}")
    if t.changed_after_snapshot:
        out.append(
            f"  {t.changed_after_snapshot:,} key(s) changed after the source snapshot were set "
            f"aside ({t.not_compared:,} of them differed)"
        )
    out.append(
        f"  compared Iceberg snapshot {t.snapshot_id} at position {t.iceberg_position or '-'}; "
        f"{t.differing_ranges} of {t.ranges} key ranges differed"
    )
    return out
