"""Frozen models for change events, their positions and the schemas they carry.

Values inside ``before``/``after`` are already converted to Python values of the engine's
type mapping (see ``replicator.events.types``): bool, int, float, Decimal, str, bytes,
datetime.date, datetime.datetime (aware, UTC, for ``timestamptz``; naive for ``timestamp``)
or None. Conversion happens in the source adapter, so everything downstream is
source-independent.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from functools import total_ordering
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from replicator.events.types import validate_column_type


class Op(StrEnum):
    """Debezium's operation codes."""

    CREATE = "c"
    READ = "r"  # a row from the initial snapshot
    UPDATE = "u"
    DELETE = "d"
    TRUNCATE = "t"  # every row of the table is gone at this position (no images)


@total_ordering
class SourcePosition(BaseModel):
    """A totally ordered place in a source's change log.

    ``parts`` is compared as a tuple, so every position of one source kind must use the same
    shape, e.g. Postgres ``(commit_lsn, index_in_tx)``, MySQL ``(binlog_file, pos, row)``,
    files ``(file_name, line)``.
    """

    model_config = ConfigDict(frozen=True)

    source: str
    parts: tuple[int | str, ...]

    def _key(self, other: SourcePosition) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        if other.source != self.source:
            raise TypeError(f"cannot compare {self.source} position with {other.source} position")
        return self.parts, other.parts

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, SourcePosition):
            return NotImplemented
        mine, theirs = self._key(other)
        return mine < theirs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SourcePosition):
            return NotImplemented
        return self.source == other.source and self.parts == other.parts

    def __hash__(self) -> int:
        return hash((self.source, self.parts))

    def to_json(self) -> str:
        return orjson.dumps({"source": self.source, "parts": list(self.parts)}).decode()

    @classmethod
    def from_json(cls, text: str) -> SourcePosition:
        raw = orjson.loads(text)
        return cls(source=raw["source"], parts=tuple(raw["parts"]))

    def __str__(self) -> str:
        return f"{self.source}:" + "/".join(str(p) for p in self.parts)


class ColumnSpec(BaseModel):
    """One source column and the Iceberg type it maps to (Iceberg primitive syntax)."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: str  # e.g. "long", "decimal(10,2)", "timestamptz", "string"
    nullable: bool = True
    source_type: str | None = None  # the source's own type name, for messages and docs

    @model_validator(mode="after")
    def _check_type(self) -> ColumnSpec:
        validate_column_type(self.type)
        return self


class TableSchema(BaseModel):
    """The shape of a source table as the reader knows it at some position."""

    model_config = ConfigDict(frozen=True)

    table: str  # source-qualified name, e.g. "public.orders" or "shop.orders"
    columns: tuple[ColumnSpec, ...]
    key_columns: tuple[str, ...]

    @model_validator(mode="after")
    def _check_keys(self) -> TableSchema:
        names = {c.name for c in self.columns}
        missing = [k for k in self.key_columns if k not in names]
        if missing:
            raise ValueError(f"key columns {missing} not among columns of {self.table}")
        return self

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


class ChangeEvent(BaseModel):
    """One row change, in the order the source committed it.

    ``before`` must hold at least the key columns for ``u`` and ``d`` (it may be None for
    ``u`` when the key did not change: the ``after`` key is used). ``after`` holds the full
    new row for ``c``, ``r`` and ``u``.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    table: str
    op: Op
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    position: SourcePosition
    schema_: TableSchema | None = Field(default=None, alias="schema")
    ts_ms: int | None = None
    tx_id: str | None = None  # events of one source transaction share it
    last_in_tx: bool = False  # True on the last event of its transaction, when known
    # Set by a source that could not convert a u/d: ``before`` holds only its (converted) key,
    # ``after`` is None, and the pipeline applies ``errors.on_bad_change`` to it.
    error: str | None = None

    @model_validator(mode="after")
    def _check_images(self) -> ChangeEvent:
        if self.op in (Op.CREATE, Op.READ, Op.UPDATE) and self.after is None and self.error is None:
            raise ValueError(f"op {self.op.value!r} needs an 'after' image")
        if self.op is Op.DELETE and self.before is None:
            raise ValueError("op 'd' needs a 'before' image")
        return self

    def key(self, key_columns: tuple[str, ...], *, image: str = "auto") -> tuple[Any, ...]:
        """The primary key of this event (``before`` for deletes, else ``after``)."""
        row = self.before if image == "before" or (image == "auto" and self.op is Op.DELETE) else self.after
        if row is None:
            row = self.after if self.after is not None else self.before
        assert row is not None
        return tuple(row.get(k) for k in key_columns)


_setattr = object.__setattr__
_EVENT_FIELDS = frozenset(ChangeEvent.model_fields)


def trusted_event(
    source: str,
    table: str,
    op: Op,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    parts: tuple[int | str, ...],
    schema: TableSchema | None,
    ts_ms: int | None,
    tx_id: str | None,
    last_in_tx: bool,
) -> ChangeEvent:
    """A ChangeEvent built without pydantic re-validation, for source hot paths.

    The validated constructor copies both row dicts (about 6x the cost with 10 columns),
    which caps a source at ~60k events/s. Callers uphold the invariants themselves ('after'
    for c/r/u, 'before' for d); tests compare the result with the validated constructor.
    """
    pos = object.__new__(SourcePosition)
    _setattr(pos, "__dict__", {"source": source, "parts": parts})
    _setattr(pos, "__pydantic_fields_set__", {"source", "parts"})
    _setattr(pos, "__pydantic_extra__", None)
    _setattr(pos, "__pydantic_private__", None)
    ev = object.__new__(ChangeEvent)
    _setattr(ev, "__dict__", {
        "table": table, "op": op, "before": before, "after": after, "position": pos,
        "schema_": schema, "ts_ms": ts_ms, "tx_id": tx_id, "last_in_tx": last_in_tx,
        "error": None,
    })  # fmt: skip
    _setattr(ev, "__pydantic_fields_set__", set(_EVENT_FIELDS))
    _setattr(ev, "__pydantic_extra__", None)
    _setattr(ev, "__pydantic_private__", None)
    return ev


class ChangeBatch(BaseModel):
    """Events closed at a transaction boundary, grouped per table, in source order."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    events: Mapping[str, tuple[ChangeEvent, ...]]
    end_position: SourcePosition
    event_count: int

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self.events)
