"""Result types of ``replicator diff`` (plain data; ``report`` renders them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

EXIT_MATCH = 0
EXIT_DIFFERS = 1
EXIT_CANNOT_DIFF = 2


class DiffError(Exception):
    """The diff could not run (bad config, source unreachable, table missing, engine behind):
    exit code 2. The message says what to do."""


def lsn_str(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


@dataclass
class ChangedRow:
    key: dict[str, Any]
    columns: list[str]
    source: dict[str, Any]
    iceberg: dict[str, Any]


@dataclass
class TableResult:
    source_table: str
    iceberg_table: str
    source_rows: int = 0
    iceberg_rows: int = 0
    missing: int = 0  # in the source, not in Iceberg
    extra: int = 0  # in Iceberg, not in the source (duplicated keys included)
    changed: int = 0  # same key, different values
    duplicates: int = 0  # Iceberg rows repeating a key
    missing_keys: list[dict[str, Any]] = field(default_factory=list)
    extra_keys: list[dict[str, Any]] = field(default_factory=list)
    changed_rows: list[ChangedRow] = field(default_factory=list)
    changed_columns: dict[str, int] = field(default_factory=dict)  # column -> rows differing
    missing_columns: list[str] = field(default_factory=list)  # source columns Iceberg lacks
    type_mismatches: list[dict[str, str]] = field(default_factory=list)
    ignored_columns: list[str] = field(default_factory=list)  # Iceberg-only (dropped) columns
    unconvertible_rows: int = 0  # source rows the engine cannot represent (dead letters)
    ranges: int = 0
    differing_ranges: int = 0
    snapshot_id: int | None = None  # the Iceberg snapshot compared (the head when pinned)
    iceberg_position: str | None = None  # its replicator.position
    changed_after_snapshot: int = 0  # keys changed between the two sides' positions
    not_compared: int = 0  # differing rows among them (skipped, not counted as differences)
    note: str | None = None
    seconds: float = 0.0

    @property
    def matches(self) -> bool:
        return not (
            self.missing or self.extra or self.changed or self.missing_columns
            or self.type_mismatches
        )  # fmt: skip


@dataclass
class Consistency:
    """What was compared with what, and why the two sides are comparable."""

    source_position: str  # the source snapshot's position P, e.g. "LSN 0/1A2B3C8"
    snapshot: str  # "exact" or "approximate"
    snapshot_how: str  # how the source snapshot was taken
    engine_check: str  # how the engine was shown to have applied every change before P
    engine_position: str | None = None  # how far the engine has confirmed, when known
    waited_seconds: float = 0.0
    source_changes_during_diff: int | None = None  # row changes to the compared tables
    tables_past_snapshot: list[str] = field(default_factory=list)  # Iceberg position >= P
    keys_changed_after_snapshot: int = 0  # keys changed in [P, compared Iceberg position]

    @property
    def mode(self) -> str:
        """'quiescent': nothing changed the compared tables during the diff, so the result
        holds now; 'caught-up': exact as of P (keys changed since are set aside)."""
        quiet = self.source_changes_during_diff == 0 and not self.tables_past_snapshot
        return "quiescent" if quiet else "caught-up"

    def describe(self) -> str:
        at = self.source_position
        lines = [
            f"Compared the source at {at} ({self.snapshot_how}) with each Iceberg table's "
            "current snapshot, read by Iceberg Java.",
            f"The engine had applied every change before {at}: {self.engine_check}"
            + (f" (waited {self.waited_seconds:.0f}s)." if self.waited_seconds >= 1 else "."),
        ]
        if self.mode == "quiescent":
            lines.append(
                "Mode: quiescent source: no change to these tables while the diff ran, so the "
                "result holds now."
            )
            return "\n".join(lines)
        why = []
        if self.source_changes_during_diff:
            why.append(
                f"the source kept changing ({self.source_changes_during_diff} row changes to "
                "these tables while the diff ran)"
            )
        elif self.source_changes_during_diff is None:
            why.append("changes during the diff could not be counted")
        if self.tables_past_snapshot:
            why.append(
                f"the engine had already committed changes made after {at} to "
                + ", ".join(self.tables_past_snapshot)
                + f"; the {self.keys_changed_after_snapshot} key(s) they touched were not compared"
            )
        lines.append(
            "Mode: caught-up engine: " + "; ".join(why) + f". The result is exact as of {at}; "
            "later changes are not part of it."
        )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mode"] = self.mode
        d["statement"] = self.describe()
        return d


@dataclass
class DiffReport:
    tables: list[TableResult]
    consistency: Consistency
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return EXIT_MATCH if all(t.matches for t in self.tables) else EXIT_DIFFERS
