"""Schemaless input (``schemas.enable=false``): column types inferred from JSON values.

The schema is inferred from the JSON values (int -> long, float -> double, str -> string,
bool -> boolean, object/array -> string holding JSON text; a column that is null in every row
so far -> string). A column's type is fixed when it is first seen, so a later value must fit
it (an int fits a double column, and so do the strings "NaN", "Infinity" and "-Infinity",
which is how the JSON converter writes non-finite floats; anything fits a string column as its
JSON text); otherwise the line is a BadInputError. A float column whose first value is
non-finite is inferred as string (its later values are kept as their JSON text). Debezium encodings are not decoded without a schema: decimals
stay base64 strings and timestamps stay numbers. Supply the schema for faithful types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson

from replicator.events.debezium.convert import NON_FINITE, Bad, Converter, show
from replicator.events.debezium.plan import Plan, make_schema
from replicator.events.model import ColumnSpec


class InferredTable:
    """Schemaless input: column types fixed at first sight, grown as new columns appear."""

    __slots__ = ("plan", "table", "types")

    def __init__(self, table: str) -> None:
        self.table = table
        self.types: dict[str, str] = {}
        self.plan: Plan | None = None

    def plan_for(self, rows: Sequence[dict[str, Any]], key_columns: tuple[str, ...]) -> Plan:
        plan = self.plan
        grew = False
        for row in rows:
            if plan is not None and plan.names.issuperset(row):
                continue
            for k, v in row.items():
                if k not in self.types:
                    self.types[k] = _infer_type(v)
                    grew = True
        if plan is None or grew or plan.key_columns != key_columns:
            # Key columns are required: Iceberg identifier fields cannot be optional.
            columns = tuple(
                ColumnSpec(name=n, type=t, nullable=n not in key_columns)
                for n, t in self.types.items()
            )
            schema = make_schema(self.table, columns, key_columns)
            plan = Plan(schema, [(n, _INFERRED_CONVERTERS[t]) for n, t in self.types.items()])
            self.plan = plan
        return plan


def _infer_type(v: Any) -> str:
    t = type(v)
    if t is bool:
        return "boolean"
    if t is int:
        return "long"
    if t is float:
        return "double"
    return "string"  # str, object/array (as JSON text), and null-so-far


def _inferred_str(v: Any) -> str:
    return v if type(v) is str else orjson.dumps(v).decode()


def _inferred_long(v: Any) -> int:
    if type(v) is int and -(2**63) <= v < 2**63:
        return v
    raise Bad(
        f"got {show(v)} but the column was inferred as long from earlier rows "
        "(schemaless input; supply a Debezium schema for exact types)"
    )


def _inferred_double(v: Any) -> float:
    t = type(v)
    if t is float or t is int:
        return float(v)
    if t is str and v in NON_FINITE:  # Jackson writes NaN and +-Infinity as strings
        return NON_FINITE[v]
    raise Bad(
        f"got {show(v)} but the column was inferred as double from earlier rows "
        "(schemaless input; supply a Debezium schema for exact types)"
    )


def _inferred_bool(v: Any) -> bool:
    if type(v) is bool:
        return v
    raise Bad(
        f"got {show(v)} but the column was inferred as boolean from earlier rows "
        "(schemaless input; supply a Debezium schema for exact types)"
    )


_INFERRED_CONVERTERS: Final[dict[str, Converter]] = {
    "string": _inferred_str,
    "long": _inferred_long,
    "double": _inferred_double,
    "boolean": _inferred_bool,
}
