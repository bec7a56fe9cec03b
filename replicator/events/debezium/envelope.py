"""Envelope shapes: where the schema, the payload, the table, the key and the transaction of
a Debezium JSON line are (pure).

Accepted line shapes (one JSON document per line):

* a plain value envelope ``{"before", "after", "source", "op", "ts_ms", "transaction"?}``;
* the same wrapped by Kafka Connect's JsonConverter: ``{"schema": ..., "payload": ...}``;
* a Kafka key/value pair ``{"key": ..., "value": ...}`` as dumped from a topic, key and value
  each possibly schema-wrapped or a JSON-encoded string (``kcat -J`` dumps, which call the
  value ``payload`` next to ``topic``, are accepted too);
* a tombstone: the line ``null``, a null value or a null payload -> ``None``;
* records that describe no row change (``not_a_row_change``), skipped like a table outside
  the filter: schema change events (``ddl``, ``tableChanges``: the MySQL connector writes
  them to its ``<topic.prefix>`` topic by default) and transaction markers
  (``status`` BEGIN/END, ``provide.transaction.metadata``).

Table name: ``source.schema`` + ``source.table`` (Postgres, SQL Server: ``public.orders``), else
``source.db`` + ``source.table`` (MySQL: ``shop.orders``), else the configured
``default_table``, else the envelope schema name (``<prefix>.<schema>.<table>.Envelope``).

Key columns: the Kafka key's field names when the line has a non-empty key, else
``primary_keys[table]`` (config ``source.primary_keys``), else ``BadInputError``. A delete
whose ``before`` is null but which has a Kafka key gets ``before`` = the key columns.
A ``t`` (TRUNCATE, sent with ``skipped.operations=none``) becomes an event without images
that carries the table's last known schema (the pipeline needs one per event); a truncate of
a table whose columns and key are not known yet is a ``BadInputError``. Other ops (``m``
message) are ``BadInputError`` (dead letters).

Transactions: ``tx_id`` comes from the ``transaction`` block (``provide.transaction.metadata``),
else ``source.txId`` (Postgres), else ``source.gtid`` (MySQL with GTIDs), else
``source.file:source.pos`` (MySQL binlog; ``pos`` is the position of the binlog *event*, so a
transaction made of several row events is split at event boundaries -- enable GTIDs or
transaction metadata for exact boundaries). Snapshot reads (``op == "r"``) get ``tx_id=None``
unless a ``transaction`` block says otherwise: every snapshot row shares the snapshot's
txId/binlog position, and treating a whole snapshot as one transaction would buffer it all.
Events with ``tx_id=None`` are their own transaction, so they get ``last_in_tx=True``; for
the others the caller (who can look ahead) decides ``last_in_tx``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, cast

import orjson

from replicator.events.debezium.convert import Bad, show
from replicator.events.model import Op

OPS: Final[dict[Any, Op]] = {op.value: op for op in Op}


def not_a_row_change(payload: dict[str, Any]) -> str | None:
    """What a record without ``op`` is when it is a known non-row record, else None."""
    if "ddl" in payload or "tableChanges" in payload:
        return "schema change event"
    if payload.get("status") in ("BEGIN", "END") and "id" in payload:
        return "transaction marker"
    return None


def row_struct(value_schema: Any) -> list[Any]:
    """The field list of the envelope's ``after`` (or ``before``) struct."""
    if type(value_schema) is not dict:
        raise Bad(f"'schema' must be an object, got {show(value_schema)}")
    fields = value_schema.get("fields")
    if type(fields) is list:
        fallback = None
        for f in fields:
            if type(f) is dict and f.get("type") == "struct":
                which = f.get("field")
                if which == "after" and type(f.get("fields")) is list:
                    return cast(list[Any], f["fields"])
                if which == "before" and type(f.get("fields")) is list:
                    fallback = cast(list[Any], f["fields"])
        if fallback is not None:
            return fallback
    raise Bad("the value schema is not a Debezium envelope (no 'after'/'before' struct)")


def unwrap(part: Any, what: str) -> tuple[Any, Any]:
    """(schema, payload) of a possibly schema-wrapped / string-encoded Kafka key or value."""
    if type(part) is str:
        try:
            part = orjson.loads(part)
        except orjson.JSONDecodeError as exc:
            raise Bad(f"the Kafka {what} is a string but not JSON: {exc}") from None
    if type(part) is dict and "payload" in part and "schema" in part and len(part) == 2:
        return part["schema"], part["payload"]
    return None, part


def table_name(source: dict[str, Any], value_schema: Any, default_table: str | None) -> str:
    t = source.get("table")
    if type(t) is str and t:
        ns = source.get("schema") or source.get("db")
        return f"{ns}.{t}" if type(ns) is str and ns else t
    if default_table:
        return default_table
    if type(value_schema) is dict:
        name = value_schema.get("name")
        if type(name) is str and name.endswith(".Envelope"):
            parts = name.split(".")[:-1]
            if len(parts) >= 2:
                return ".".join(parts[-2:])
    raise Bad("cannot tell the table: 'source' has no 'table' and no default table is set")


def key_columns(
    table: str,
    key_schema: Any,
    key_payload: Any,
    primary_keys: Mapping[str, tuple[str, ...]],
) -> tuple[str, ...]:
    if key_payload is not None:
        if type(key_payload) is not dict:
            raise Bad(f"the Kafka key must be an object, got {show(key_payload)}")
        names: tuple[str, ...] = ()
        if type(key_schema) is dict and type(key_schema.get("fields")) is list:
            names = tuple(
                f["field"]
                for f in key_schema["fields"]
                if type(f) is dict and type(f.get("field")) is str
            )
        if not names:
            names = tuple(key_payload)
        if names:
            return names
    pk = primary_keys.get(table)
    if pk:
        return pk
    raise Bad(
        "no key columns: the line has no Kafka key and source.primary_keys has no entry "
        f"for {table!r}"
    )


def error_key(
    op: Op | None, before: Any, after: Any, key_payload: Any, key_columns: tuple[str, ...]
) -> Any:
    """The raw (unconverted) key of a failing record, for messages; None when unknown."""
    image = before if op is Op.DELETE else (after if after is not None else before)
    if type(image) is not dict:
        image = key_payload
    if not key_columns or type(image) is not dict:
        return None
    vals = tuple(image.get(k) for k in key_columns)
    return vals[0] if len(vals) == 1 else vals


def check_key(
    op: Op,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    key_columns: tuple[str, ...],
) -> None:
    # The pipeline finds rows by key: a key column that is null in the image it will use
    # would silently address the wrong row (or none).
    for which, image in (("before", before), ("after", after)):
        if image is None:
            continue
        for k in key_columns:
            if image.get(k) is None:
                raise Bad(f"key column {k!r} is null or missing in the {which!r} image")
    if op is Op.DELETE and before is None:  # pragma: no cover - decode guarantees it
        raise Bad("op 'd' without a 'before' image")


def tx_id(payload: dict[str, Any], source: dict[str, Any], op: Op) -> str | None:
    tx = payload.get("transaction")
    if type(tx) is dict:
        tid = tx.get("id")
        if tid is not None:
            return str(tid)
    if op is Op.READ:
        return None  # snapshot rows: see the module docstring
    txid = source.get("txId")
    if txid is not None:
        return str(txid)
    gtid = source.get("gtid")
    if gtid:
        return str(gtid)
    f, p = source.get("file"), source.get("pos")
    if f is not None and p is not None:
        return f"{f}:{p}"
    return None
