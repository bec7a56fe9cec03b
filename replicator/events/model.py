"""Frozen models for change events, their positions and the schemas they carry.

Values inside ``before``/``after`` are already converted to Python values of the engine's
type mapping (see ``replicator.events.types``): bool, int, float, Decimal, str, bytes,
datetime.date, datetime.datetime (aware, UTC, for ``timestamptz``; naive for ``timestamp``)
or None. Conversion happens in the source adapter, so everything downstream is
source-independent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import total_ordering
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, model_validator

from replicator.events.types import validate_column_type


class Op(StrEnum):
    """Debezium's operation codes."""

    CREATE = "c"
    READ = "r"  # a row from the initial snapshot
    UPDATE = "u"
    DELETE = "d"
    TRUNCATE = "t"  # every row of the table is gone at this position (no images)


_setattr = object.__setattr__  # the immutable classes below set their slots once, in __init__


@total_ordering
class SourcePosition:
    """A totally ordered place in a source's change log.

    ``parts`` is compared as a tuple, so every position of one source kind must use the same
    shape, e.g. Postgres ``(commit_lsn, index_in_tx)``, MySQL ``(binlog_file, pos, row)``,
    files ``(file_name, line)``. Immutable; built once per event on the hot path, hence a
    slotted class and not a validated model.
    """

    __slots__ = ("source", "parts")
    source: str
    parts: tuple[int | str, ...]

    def __init__(self, source: str, parts: tuple[int | str, ...]) -> None:
        _setattr(self, "source", source)
        _setattr(self, "parts", parts if type(parts) is tuple else tuple(parts))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"SourcePosition is immutable (tried to set {name})")

    def __reduce__(self) -> tuple[Any, ...]:  # pickling (Spark, multiprocessing)
        return (SourcePosition, (self.source, self.parts))

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

    def __repr__(self) -> str:
        return f"SourcePosition(source={self.source!r}, parts={self.parts!r})"

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


_NEEDS_AFTER = frozenset((Op.CREATE, Op.READ, Op.UPDATE))


class ChangeEvent:
    """One row change, in the order the source committed it.

    ``before`` must hold at least the key columns for ``u`` and ``d`` (it may be None for
    ``u`` when the key did not change: the ``after`` key is used). ``after`` holds the full
    new row for ``c``, ``r`` and ``u``; ``t`` (truncate) has neither.

    One constructor for every caller, sources' hot paths included: a slotted immutable class
    whose only check is the two image rules (the row mappings are taken as given, not copied:
    copying them cost a validated model about 6x with 10 columns).
    """

    __slots__ = ("table", "op", "before", "after", "position", "schema_", "ts_ms", "tx_id", "last_in_tx",
                 "error")  # fmt: skip
    table: str
    op: Op
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    position: SourcePosition
    schema_: TableSchema | None
    ts_ms: int | None
    tx_id: str | None  # events of one source transaction share it
    last_in_tx: bool  # True on the last event of its transaction, when known
    # Set by a source that could not convert a u/d: ``before`` holds only its (converted) key,
    # ``after`` is None, and the pipeline applies ``errors.on_bad_change`` to it.
    error: str | None

    def __init__(
        self,
        table: str,
        op: Op,
        before: Mapping[str, Any] | None = None,
        after: Mapping[str, Any] | None = None,
        *,
        position: SourcePosition,
        schema: TableSchema | None = None,
        ts_ms: int | None = None,
        tx_id: str | None = None,
        last_in_tx: bool = False,
        error: str | None = None,
    ) -> None:
        if after is None and op in _NEEDS_AFTER and error is None:
            raise ValueError(f"op {op.value!r} needs an 'after' image")
        if before is None and op is Op.DELETE:
            raise ValueError("op 'd' needs a 'before' image")
        _setattr(self, "table", table)
        _setattr(self, "op", op)
        _setattr(self, "before", before)
        _setattr(self, "after", after)
        _setattr(self, "position", position)
        _setattr(self, "schema_", schema)
        _setattr(self, "ts_ms", ts_ms)
        _setattr(self, "tx_id", tx_id)
        _setattr(self, "last_in_tx", last_in_tx)
        _setattr(self, "error", error)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ChangeEvent is immutable (tried to set {name}); use replace()")

    def _fields(self) -> tuple[Any, ...]:
        return (self.table, self.op, self.before, self.after, self.position, self.schema_,
                self.ts_ms, self.tx_id, self.last_in_tx, self.error)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChangeEvent):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # rows are dicts: events are not hashable

    def __reduce__(self) -> tuple[Any, ...]:  # pickling (Spark, multiprocessing)
        return (_rebuild_event, self._fields())

    def __repr__(self) -> str:
        return (f"ChangeEvent(table={self.table!r}, op={self.op.value!r}, before={self.before!r}, "
                f"after={self.after!r}, position={self.position!s}, tx_id={self.tx_id!r}, "
                f"last_in_tx={self.last_in_tx!r}" + (f", error={self.error!r})" if self.error else ")"))  # fmt: skip

    def replace(self, **changes: Any) -> ChangeEvent:
        """A copy with some fields changed (``schema`` for the schema), checked like a new one."""
        values: dict[str, Any] = {
            "table": self.table, "op": self.op, "before": self.before, "after": self.after,
            "position": self.position, "schema": self.schema_, "ts_ms": self.ts_ms,
            "tx_id": self.tx_id, "last_in_tx": self.last_in_tx, "error": self.error,
        }  # fmt: skip
        unknown = set(changes) - set(values)
        if unknown:
            raise TypeError(f"ChangeEvent has no field(s) {sorted(unknown)}")
        values.update(changes)
        return ChangeEvent(**values)

    def key(self, key_columns: tuple[str, ...], *, image: str = "auto") -> tuple[Any, ...]:
        """The primary key of this event (``before`` for deletes, else ``after``)."""
        row = self.before if image == "before" or (image == "auto" and self.op is Op.DELETE) else self.after
        if row is None:
            row = self.after if self.after is not None else self.before
        assert row is not None
        return tuple(row.get(k) for k in key_columns)


def _rebuild_event(
    table: str, op: Op, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
    position: SourcePosition, schema: TableSchema | None, ts_ms: int | None, tx_id: str | None,
    last_in_tx: bool, error: str | None,
) -> ChangeEvent:  # fmt: skip
    return ChangeEvent(table, op, before, after, position=position, schema=schema, ts_ms=ts_ms,
                       tx_id=tx_id, last_in_tx=last_in_tx, error=error)  # fmt: skip


_new = object.__new__
# The slots' setters, by name: they bypass the immutable classes' ``__setattr__``.
_EVENT_SET: dict[str, Any] = {n: getattr(ChangeEvent, n).__set__ for n in ChangeEvent.__slots__}
_POSITION_SET: dict[str, Any] = {n: getattr(SourcePosition, n).__set__ for n in SourcePosition.__slots__}


def read_events(
    table: str, schema: TableSchema | None, rows: Iterable[Mapping[str, Any]], source: str,
    parts: Iterable[tuple[int, ...]],
) -> list[ChangeEvent]:  # fmt: skip
    """Snapshot rows as 'r' events (each its own transaction) at the matching ``parts``:
    what ``ChangeEvent(table, Op.READ, None, row, position=SourcePosition(source, p),
    schema=schema, last_in_tx=True)`` gives, built without the keyword handling and checks
    (a row is an 'after' image, never None). The constructors cost most of a snapshot
    row's time on a source's hot path."""
    e = _EVENT_SET
    s_table, s_op, s_before, s_after, s_pos = e["table"], e["op"], e["before"], e["after"], e["position"]
    s_schema, s_ts, s_tx, s_last, s_error = e["schema_"], e["ts_ms"], e["tx_id"], e["last_in_tx"], e["error"]
    p_source, p_parts = _POSITION_SET["source"], _POSITION_SET["parts"]
    out: list[ChangeEvent] = []
    add = out.append
    read = Op.READ
    for row, pp in zip(rows, parts, strict=True):
        pos = _new(SourcePosition)
        p_source(pos, source)
        p_parts(pos, pp)
        ev = _new(ChangeEvent)
        s_table(ev, table)
        s_op(ev, read)
        s_before(ev, None)
        s_after(ev, row)
        s_pos(ev, pos)
        s_schema(ev, schema)
        s_ts(ev, None)
        s_tx(ev, None)
        s_last(ev, True)
        s_error(ev, None)
        add(ev)
    return out


EventBuilder = Callable[
    [str, Op, Mapping[str, Any] | None, Mapping[str, Any] | None, tuple[Any, ...],
     TableSchema | None, int | None, str | None, bool, str | None],
    ChangeEvent,
]  # fmt: skip


def event_builder(source: str) -> EventBuilder:
    """``build(table, op, before, after, parts, schema, ts_ms, tx_id, last_in_tx, error)``:
    what ``ChangeEvent(table, op, before, after, position=SourcePosition(source, parts), ...)``
    gives, for a source's change stream: without the keyword handling and the image checks
    (the caller holds the image rules; ``parts`` is a tuple). About half the constructors'
    cost, once per change."""
    e = _EVENT_SET
    s_table, s_op, s_before, s_after, s_pos = e["table"], e["op"], e["before"], e["after"], e["position"]
    s_schema, s_ts, s_tx, s_last, s_error = e["schema_"], e["ts_ms"], e["tx_id"], e["last_in_tx"], e["error"]
    p_source, p_parts = _POSITION_SET["source"], _POSITION_SET["parts"]
    new = _new

    def build(
        table: str, op: Op, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
        parts: tuple[Any, ...], schema: TableSchema | None, ts_ms: int | None, tx_id: str | None,
        last_in_tx: bool, error: str | None,
    ) -> ChangeEvent:  # fmt: skip
        pos = new(SourcePosition)
        p_source(pos, source)
        p_parts(pos, parts)
        ev = new(ChangeEvent)
        s_table(ev, table)
        s_op(ev, op)
        s_before(ev, before)
        s_after(ev, after)
        s_pos(ev, pos)
        s_schema(ev, schema)
        s_ts(ev, ts_ms)
        s_tx(ev, tx_id)
        s_last(ev, last_in_tx)
        s_error(ev, error)
        return ev

    return build


@dataclass(frozen=True, slots=True)
class ChangeBatch:
    """Events closed at a transaction boundary, grouped per table, in source order."""

    events: Mapping[str, tuple[ChangeEvent, ...]]
    end_position: SourcePosition
    event_count: int

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self.events)
