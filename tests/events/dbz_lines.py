"""Build Debezium JSON lines shaped exactly as the Debezium 3.6 JSON converter writes them
(field order, type names, parameters), for unit tests of single columns."""

from __future__ import annotations

from typing import Any

import orjson

from replicator.events.model import SourcePosition


def field(name: str, type_: str, semantic: str | None = None, optional: bool = True,
          **params: str) -> dict[str, Any]:
    f: dict[str, Any] = {"type": type_, "optional": optional}
    if semantic:
        f["name"] = semantic
    if params:
        f["parameters"] = params
    f["field"] = name
    return f


def line(fields: list[dict[str, Any]], after: dict[str, Any] | None, *, op: str = "c",
         before: dict[str, Any] | None = None, table: str = "t", schemas: bool = True,
         key: dict[str, Any] | None = None) -> bytes:
    """A key/value pair line (``{"key", "value"}``) as the capture harness writes it."""
    row = {"type": "struct", "fields": [field("id", "int32", optional=False), *fields],
           "optional": True, "name": f"dbz.public.{table}.Value"}
    source = {"version": "3.6.3.Final", "connector": "postgresql", "name": "dbz", "ts_ms": 1,
              "snapshot": "false", "db": "app", "schema": "public", "table": table,
              "txId": 771, "lsn": 1000}
    payload = {"before": before, "after": after, "source": source, "transaction": None,
               "op": op, "ts_ms": 2}
    value_schema = {"type": "struct", "fields": [
        {**row, "field": "before"}, {**row, "field": "after"},
        {"type": "struct", "fields": [], "optional": False, "name": "io.debezium.connector.postgresql.Source", "field": "source"},
        {"type": "string", "optional": False, "field": "op"},
    ], "optional": False, "name": f"dbz.public.{table}.Envelope", "version": 2}
    key_payload = key if key is not None else {"id": (after or before or {}).get("id")}
    key_schema = {"type": "struct", "fields": [field("id", "int32", optional=False)],
                  "optional": False, "name": f"dbz.public.{table}.Key"}
    if schemas:
        k: Any = {"schema": key_schema, "payload": key_payload}
        v: Any = {"schema": value_schema, "payload": payload}
    else:
        k, v = key_payload, payload
    return orjson.dumps({"key": k, "value": v})


def pos(n: int = 1) -> SourcePosition:
    return SourcePosition(source="file", parts=("t.jsonl", n))
