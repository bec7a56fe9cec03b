"""What the diff needs from a source database (``postgres_side``, ``mysql_side``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tqdm import tqdm

from replicator.events.model import SourcePosition
from replicator.verify.digest import RowCodec, RowRecord, SourceRanges


@dataclass
class EngineProgress:
    caught_up: bool
    reason: str
    engine_position: str | None = None  # how far the engine has confirmed, when known


class SourceTableLike(Protocol):
    @property
    def name(self) -> str: ...  # the engine's source table name (schema.table / db.table)

    @property
    def short_name(self) -> str: ...  # the table name alone

    @property
    def column_names(self) -> tuple[str, ...]: ...  # the columns the engine replicates

    @property
    def engine_types(self) -> dict[str, str]: ...  # column -> engine type, as the source maps it

    @property
    def key_columns(self) -> tuple[str, ...]: ...


class SourceSide(Protocol):
    """One diff's view of the source: a consistent snapshot at a known position, read in key
    order; the engine's progress; and the keys changed after the snapshot."""

    kind: str  # the SourcePosition.source of the engine's positions
    exact: bool  # the snapshot's position is exact (else approximate)

    def open(self) -> None: ...

    def close(self) -> None: ...

    def point_label(self) -> str: ...  # e.g. "LSN 0/1A2B3C8"

    def snapshot_how(self) -> str: ...  # how the snapshot was taken, for the report

    def tables(self, configured: Sequence[str] | None) -> list[Any]: ...

    def has_rows(self, table: Any) -> bool: ...

    def estimated_rows(self, table: Any) -> int: ...

    def scan(
        self, table: Any, codec: RowCodec, chunk_rows: int, bar: tqdm[Any] | None = None
    ) -> tuple[SourceRanges, int]: ...

    def fetch_range(
        self, table: Any, codec: RowCodec, lo: Sequence[Any] | None, hi: Sequence[Any] | None,
        batch: int,
    ) -> list[RowRecord]: ...  # fmt: skip

    def past(self, position: SourcePosition) -> bool: ...  # at or after the snapshot point?

    def engine_progress(self, positions: dict[str, SourcePosition | None]) -> EngineProgress: ...

    def changed_keys(
        self, limits: Sequence[tuple[Any, RowCodec, SourcePosition]]
    ) -> dict[str, set[tuple[Any, ...]] | None]: ...

    def change_counter(self, tables: Sequence[Any]) -> int | None: ...

    # Why a table may differ for a known limit of the source's change log ("" if none).
    def difference_hint(self, table: Any) -> str: ...
