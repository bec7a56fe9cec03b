"""Columns kept out of the lakehouse: excluded (dropped) or hashed (a keyed hash).

``source.columns: {<table>: {exclude: [...], hash: [...]}}``. The policy rewrites each change
event as the source reader hands it over, before anything is batched, staged, written,
dead-lettered or logged: an excluded column is gone from the event's schema and row images;
a hashed column holds ``HMAC-SHA256(key, value)`` as 64 hex characters (a ``string`` column),
so equal values still join across tables and runs while the value itself is not
recoverable without the key. Key columns can be neither: they identify rows between the
source and Iceberg.

Pure: the key arrives as bytes; reading it from the environment is the caller's business.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from replicator.errors import ConfigError
from replicator.events.deadletter import DeadLetter
from replicator.events.model import ChangeEvent, ColumnSpec, TableSchema
from replicator.events.unavailable import UNAVAILABLE

HASHED_TYPE = "string"


@dataclass(frozen=True)
class TableColumnRules:
    exclude: frozenset[str]
    hash: frozenset[str]


def _value_bytes(value: Any) -> bytes:
    """One canonical byte form per engine value (the same value from either source hashes
    the same)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int | float | Decimal):
        return str(value).encode()
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat().encode()
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)


def keyed_hash(key: bytes) -> Callable[[Any], Any]:
    """``value -> hex HMAC-SHA256``; None stays None, and Debezium's unavailable-value
    marker stays a marker (the pipeline fills it from the table, where it is hashed
    already)."""

    def digest(value: Any) -> Any:
        if value is None or value is UNAVAILABLE:
            return value
        return hmac.new(key, _value_bytes(value), hashlib.sha256).hexdigest()

    return digest


class ColumnPolicy:
    """Rewrites the events of the tables that have rules; others pass untouched."""

    def __init__(self, rules: Mapping[str, TableColumnRules], key: bytes | None) -> None:
        if any(r.hash for r in rules.values()) and not key:
            raise ConfigError("source.columns hashes columns but no hash key was given")
        self.rules = dict(rules)
        self._hash = keyed_hash(key or b"")
        # id(original schema) -> (original, rewritten): the original is kept so its id is not
        # reused while cached.
        self._schemas: dict[int, tuple[TableSchema, TableSchema]] = {}

    def applies_to(self, table: str) -> bool:
        return table in self.rules

    def __call__(self, ev: ChangeEvent) -> ChangeEvent:
        rules = self.rules.get(ev.table)
        if rules is None:
            return ev
        schema = self.schema(ev.schema_) if ev.schema_ is not None else None
        return ev.replace(
            before=self.row(ev.table, ev.before), after=self.row(ev.table, ev.after), schema=schema
        )

    def row(self, table: str, row: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """One row image of ``table`` with its rules applied (a dead letter's, an event's)."""
        rules = self.rules.get(table)
        if row is None:
            return None
        if rules is None:
            return dict(row)
        out = {k: v for k, v in row.items() if k not in rules.exclude}
        for name in rules.hash:
            if name in out:
                out[name] = self._hash(out[name])
        return out

    def redact(self, letter: DeadLetter) -> DeadLetter:
        """A dead letter with the table's rules applied to the row it carries (a JSON object,
        or a Debezium envelope: every nested object is treated as a row image); input that
        is not JSON is withheld."""
        rules = self.rules.get(letter.table or "")
        if rules is None or letter.raw is None:
            return letter
        try:
            parsed = orjson.loads(letter.raw)
        except orjson.JSONDecodeError:
            return letter.model_copy(update={"raw": "(withheld: the table has source.columns rules)"})
        return letter.model_copy(update={"raw": orjson.dumps(self._redact(rules, parsed)).decode()})

    def _redact(self, rules: TableColumnRules, value: Any) -> Any:
        if isinstance(value, list):
            return [self._redact(rules, v) for v in value]
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k in rules.exclude:
                continue
            out[k] = self._hash(v) if k in rules.hash and not isinstance(v, dict | list) else self._redact(rules, v)
        return out

    def schema(self, schema: TableSchema) -> TableSchema:
        got = self._schemas.get(id(schema))
        if got is not None and got[0] is schema:
            return got[1]
        rules = self.rules.get(schema.table)
        if rules is None:
            return schema
        _check(schema, rules)
        columns = tuple(
            ColumnSpec(name=c.name, type=HASHED_TYPE, nullable=c.nullable, source_type=c.source_type)
            if c.name in rules.hash
            else c
            for c in schema.columns
            if c.name not in rules.exclude
        )
        out = schema.model_copy(update={"columns": columns})
        self._schemas[id(schema)] = (schema, out)
        return out


def _check(schema: TableSchema, rules: TableColumnRules) -> None:
    """Key columns stay as they are; every named column exists (a misspelt name would
    otherwise let the value through)."""
    keys = [k for k in schema.key_columns if k in rules.exclude or k in rules.hash]
    if keys:
        raise ConfigError(
            f"source.columns: {schema.table}: {', '.join(keys)} is part of the table's key, "
            "which identifies rows between the source and Iceberg: a key column can be "
            "neither excluded nor hashed"
        )
    names = {c.name for c in schema.columns}
    missing = sorted((rules.exclude | rules.hash) - names)
    if missing:
        raise ConfigError(
            f"source.columns: {schema.table} has no column {', '.join(missing)} (its columns: "
            f"{', '.join(sorted(names))}); fix the name, or remove it once the column is dropped"
        )
