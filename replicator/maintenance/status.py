"""A table's health as maintenance sees it (and ``replicator status`` shows it): snapshots,
manifests of the head, partitions holding data, data files and their average size, delete files of each kind, the
oldest pending equality delete, the last maintenance step."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table

from replicator.iceberg.manifests import manifest_entries, read_manifests
from replicator.iceberg.partitions import partition_key
from replicator.maintenance import MAINTENANCE_SUMMARY_KEY
from replicator.maintenance.common import read_last_maintenance
from replicator.text import text_table


@dataclass(frozen=True)
class TableHealth:
    identifier: str
    snapshots: int
    manifests: int  # in the head snapshot's manifest list
    data_files: int
    data_bytes: int
    position_delete_files: int
    equality_delete_files: int
    oldest_equality_delete_ms: int | None  # commit time of the oldest pending one
    last_maintenance: str | None  # "<kind> at <UTC time>"
    last_maintenance_ms: int | None
    partitions: int = 1  # distinct (spec, partition) of the live data files (1: unpartitioned)
    smallest_data_file_bytes: int = 0  # 0: no data files

    @property
    def average_data_file_bytes(self) -> int:
        return self.data_bytes // self.data_files if self.data_files else 0

    def equality_delete_age_seconds(self, now_ms: int | None = None) -> float:
        """Age of the oldest pending equality delete (0 when there is none)."""
        if self.oldest_equality_delete_ms is None:
            return 0.0
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0.0, (now_ms - self.oldest_equality_delete_ms) / 1000)


def table_health(table: Table) -> TableHealth:
    meta = table.metadata
    head = table.current_snapshot()
    manifests = data = data_bytes = pos = eq = 0
    smallest: int | None = None
    oldest_eq: int | None = None
    homes: set[tuple[int, tuple[object, ...]]] = set()
    if head is not None:
        for m in read_manifests(head, table.io):
            manifests += 1
            for entry in manifest_entries(m, table.io, live_only=True):
                f = entry.data_file
                if f.content == DataFileContent.DATA:
                    data += 1
                    data_bytes += f.file_size_in_bytes
                    smallest = f.file_size_in_bytes if smallest is None else min(smallest, f.file_size_in_bytes)
                    homes.add((f.spec_id, partition_key(f)))
                elif f.content == DataFileContent.POSITION_DELETES:
                    pos += 1
                else:
                    eq += 1
                    snap = meta.snapshot_by_id(entry.snapshot_id) if entry.snapshot_id else None
                    at = snap.timestamp_ms if snap is not None else head.timestamp_ms
                    oldest_eq = at if oldest_eq is None else min(oldest_eq, at)
    kind, at_ms = _last_maintenance(table)
    return TableHealth(
        identifier=".".join(table.name()), snapshots=len(meta.snapshots), manifests=manifests,
        data_files=data, data_bytes=data_bytes, position_delete_files=pos,
        equality_delete_files=eq, oldest_equality_delete_ms=oldest_eq,
        last_maintenance=f"{kind} at {_utc(at_ms)}" if kind and at_ms else None,
        last_maintenance_ms=at_ms, partitions=max(1, len(homes)), smallest_data_file_bytes=smallest or 0,
    )  # fmt: skip


def _last_maintenance(table: Table) -> tuple[str | None, int | None]:
    """The newest of: a snapshot made by maintenance, the recorded property (expiry)."""
    kind: str | None = None
    at: int | None = None
    for snap in table.metadata.snapshots:
        summary = snap.summary.additional_properties if snap.summary is not None else {}
        if MAINTENANCE_SUMMARY_KEY in summary and (at is None or snap.timestamp_ms > at):
            kind, at = summary[MAINTENANCE_SUMMARY_KEY], snap.timestamp_ms
    record = read_last_maintenance(table)
    if record is not None and isinstance(record.get("at_ms"), int):
        rec_at = int(record["at_ms"])  # type: ignore[call-overload]
        if at is None or rec_at > at:
            kind, at = str(record.get("kind")), rec_at
    return kind, at


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def format_health(rows: list[TableHealth], now_ms: int | None = None) -> str:
    head = ["table", "snapshots", "manifests", "partitions", "data files", "avg size", "pos-del files",
            "eq-del files", "oldest eq-del", "last maintenance"]  # fmt: skip
    body = [
        [
            h.identifier, str(h.snapshots), str(h.manifests), str(h.partitions), str(h.data_files),
            _size(h.average_data_file_bytes), str(h.position_delete_files),
            str(h.equality_delete_files),
            f"{h.equality_delete_age_seconds(now_ms):.0f}s ago" if h.oldest_equality_delete_ms else "-",
            h.last_maintenance or "-",
        ]  # fmt: skip
        for h in rows
    ]
    return "\n".join(text_table(head, body))
