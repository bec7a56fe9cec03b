"""``DebeziumParser``: one Debezium JSON line -> ``DecodedChange`` / ``ChangeEvent``.

Ties the pieces together: the envelope shapes (``envelope``), the schema fast path
(``fast_path``), the Connect type table (``connect_types``) or schemaless inference
(``schemaless``), and the per-shape conversion plans (``plan``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from replicator.errors import BadInputError
from replicator.events.debezium import envelope
from replicator.events.debezium.connect_types import column_from_field
from replicator.events.debezium.convert import Bad, Converter, show
from replicator.events.debezium.envelope import OPS, row_struct, unwrap
from replicator.events.debezium.fast_path import KnownWrapper, KnownWrappers
from replicator.events.debezium.plan import Plan, make_schema
from replicator.events.debezium.schemaless import InferredTable
from replicator.events.model import ChangeEvent, ColumnSpec, Op, SourcePosition, TableSchema

_MAX_CACHED_PLANS: Final = 4096  # a runaway number of distinct schemas must not eat memory


class Filtered:
    """Marker returned by ``DebeziumParser.decode`` for a record that is not a wanted row
    change: a table outside the ``tables`` filter, or a record that describes no row
    (``envelope.not_a_row_change``: schema changes, transaction markers)."""

    __slots__ = ("reason", "table")

    def __init__(self, table: str, reason: str = "table not wanted") -> None:
        self.table = table
        self.reason = reason

    def __repr__(self) -> str:
        return f"Filtered({self.table!r}, {self.reason!r})"


@dataclass(slots=True)
class DecodedChange:
    """A parsed, converted record that only lacks its position and ``last_in_tx``."""

    table: str
    op: Op
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    schema: TableSchema
    ts_ms: int | None
    tx_id: str | None
    error: str | None = None  # a u/d whose images do not convert: ``before`` = its key


class BadChangeInput(BadInputError):
    """A u/d that does not convert but whose before key does: ``change`` carries that key
    (``error`` set) so the pipeline can apply ``errors.on_bad_change`` instead of leaving
    the old row behind."""

    def __init__(self, message: str, change: DecodedChange, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.change = change


class _Reading:
    """What ``DebeziumParser.decode`` has found of one line so far: the steps fill it in,
    and a failure names the table and key from it."""

    __slots__ = (
        "after", "before", "key_columns", "key_payload", "key_schema", "known", "op", "payload",
        "plan", "source", "table",
    )  # fmt: skip

    def __init__(self) -> None:
        self.table: str | None = None
        self.known: KnownWrapper | None = None
        self.key_schema: Any = None
        self.key_payload: Any = None
        self.key_columns: tuple[str, ...] = ()
        self.op: Op | None = None
        self.before: Any = None
        self.after: Any = None
        self.plan: Plan | None = None
        self.payload: Any = None
        self.source: Any = None


class DebeziumParser:
    """Turns Debezium JSON lines into ``DecodedChange``/``ChangeEvent`` objects.

    Holds only caches (schema plans keyed by table, schema fingerprint and key columns;
    inferred schemas for schemaless tables), so one instance per input stream is right.
    """

    def __init__(
        self,
        *,
        primary_keys: Mapping[str, Sequence[str]] | None = None,
        default_table: str | None = None,
        tables: Collection[str] | None = None,
    ) -> None:
        self.primary_keys: dict[str, tuple[str, ...]] = {
            t: tuple(cols) for t, cols in (primary_keys or {}).items()
        }
        self.default_table = default_table
        self.tables: frozenset[str] | None = None if tables is None else frozenset(tables)
        self._plans: dict[tuple[str, bytes, tuple[str, ...]], Plan] = {}
        self._inferred: dict[str, InferredTable] = {}
        self._last_schema: dict[str, TableSchema] = {}  # per table, for TRUNCATE events
        self._wrappers = KnownWrappers()

    # -- public API ---------------------------------------------------------------------

    def parse(self, line: bytes | str, position: SourcePosition) -> ChangeEvent | None:
        """One line -> event; ``None`` for a tombstone or a table outside ``tables``.

        ``last_in_tx`` is True only for events without transaction info (their own
        transaction); a caller with look-ahead uses ``decode`` + ``to_event`` instead.
        """
        change = self.decode(line, position)
        if change is None or isinstance(change, Filtered):
            return None
        return self.to_event(change, position)

    def decode(
        self, line: bytes | str, position: SourcePosition | None = None
    ) -> DecodedChange | Filtered | None:
        """Parse and convert one line. ``None`` = tombstone; ``Filtered`` = table not wanted.

        Raises ``BadInputError`` naming the field, table and key when known.
        """
        r = _Reading()
        try:
            value_schema = self._unwrap(line, position, r)
            if r.payload is None:
                return None
            if type(r.payload) is not dict:
                raise Bad(f"the change record must be an object, got {type(r.payload).__name__}")
            return self._change(r, value_schema)
        except Bad as exc:
            key = envelope.error_key(r.op, r.before, r.after, r.key_payload, r.key_columns)
            bad = _bad_change(str(exc), r.table, r.op, r.plan, r.before, r.key_payload, r.payload, r.source)
            if bad is not None:
                raise BadChangeInput(str(exc), bad, table=r.table, key=key, position=position) from None
            raise BadInputError(str(exc), table=r.table, key=key, position=position) from None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            # Input shaped in a way no check above foresaw (e.g. a schema with a list where
            # a name belongs): one bad line must not stop the stream.
            key = envelope.error_key(r.op, r.before, r.after, r.key_payload, r.key_columns)
            raise BadInputError(
                f"malformed record ({type(exc).__name__}: {exc})",
                table=r.table,
                key=key,
                position=position,
            ) from None

    @staticmethod
    def to_event(
        change: DecodedChange, position: SourcePosition, *, last_in_tx: bool | None = None
    ) -> ChangeEvent:
        """The event at ``position``. ``last_in_tx=None`` means: True exactly when the event
        has no transaction."""
        if last_in_tx is None:
            last_in_tx = change.tx_id is None
        return ChangeEvent(
            change.table,
            change.op,
            change.before,
            change.after,
            position=position,
            schema=change.schema,
            ts_ms=change.ts_ms,
            tx_id=change.tx_id,
            last_in_tx=last_in_tx,
            error=change.error,
        )

    # -- internals ----------------------------------------------------------------------

    def _unwrap(self, line: bytes | str, position: SourcePosition | None, r: _Reading) -> Any:
        """The line's value schema (or None); its change record (None: a tombstone), Kafka
        key and known wrapper go into ``r``."""
        fast = self._wrappers and type(line) is bytes and self._wrappers.split(line)
        if fast:
            r.known, r.payload = fast
            return r.known.schema
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise BadInputError(f"line is not valid JSON: {exc}", position=position) from None
        if obj is None:
            return None
        if type(obj) is not dict:
            raise Bad(f"expected a JSON object, got {type(obj).__name__}")
        if "op" in obj:
            r.payload = obj
            return None
        if "key" in obj or "value" in obj:
            r.key_schema, r.key_payload = unwrap(obj.get("key"), "key")
            raw_value = obj["value"] if "value" in obj else obj.get("payload")
            value_schema, r.payload = unwrap(raw_value, "value")
            return value_schema
        if "payload" in obj:
            value_schema, r.payload = obj.get("schema"), obj["payload"]
            if type(value_schema) is dict and type(line) is bytes:
                r.known = self._wrappers.register(line, value_schema)
            return value_schema
        r.payload = obj  # reported as a missing 'op'
        return None

    def _change(self, r: _Reading, value_schema: Any) -> DecodedChange | Filtered:
        """The change record ``r.payload`` (an object) checked and converted."""
        payload = r.payload
        source = payload.get("source")
        if type(source) is not dict:
            source = {}
        r.source = source
        if "op" not in payload:
            other = envelope.not_a_row_change(payload)
            if other is not None:
                return Filtered(str(source.get("table") or payload.get("databaseName") or ""), other)
        table = r.table = envelope.table_name(source, value_schema, self.default_table)
        if self.tables is not None and table not in self.tables:
            return Filtered(table)

        before = r.before = payload.get("before")
        after = r.after = payload.get("after")
        if before is not None and type(before) is not dict:
            raise Bad(f"'before' must be an object or null, got {type(before).__name__}")
        if after is not None and type(after) is not dict:
            raise Bad(f"'after' must be an object or null, got {type(after).__name__}")

        # Key columns before the op checks, so that an op error can still name the key.
        key_error: Bad | None = None
        try:
            r.key_columns = envelope.key_columns(table, r.key_schema, r.key_payload, self.primary_keys)
        except Bad as exc:
            key_error = exc
        op_raw = payload.get("op")
        op = r.op = OPS.get(op_raw) if type(op_raw) is str else None
        if op_raw is None:
            raise Bad("missing 'op' field")
        if op is None:
            raise Bad(f"unknown op {op_raw!r} (expected one of c, r, u, d, t)")
        if op is Op.TRUNCATE:  # no images, no key (the Kafka key of a truncate is null)
            return DecodedChange(
                table=table,
                op=op,
                before=None,
                after=None,
                schema=self._truncate_schema(table, value_schema, r.known),
                ts_ms=_ts_ms(payload),
                tx_id=envelope.tx_id(payload, source, op),
            )
        if key_error is not None:
            raise key_error
        return self._converted(r, op, value_schema)

    def _converted(self, r: _Reading, op: Op, value_schema: Any) -> DecodedChange:
        """A row change's images converted by the plan of its schema (given or inferred)."""
        table, before, after, key_columns = r.table, r.before, r.after, r.key_columns
        assert table is not None
        key_only = False
        if op is Op.DELETE:
            if before is None and type(r.key_payload) is dict and r.key_payload:
                before = r.before = r.key_payload  # the Kafka key is the deleted row's identity
                key_only = True
            if before is None:
                raise Bad("op 'd' without a 'before' image (and no Kafka key)")
        elif after is None:
            raise Bad(f"op {op.value!r} without an 'after' image")

        if value_schema is not None:
            plan = r.plan = self._schema_plan(table, value_schema, key_columns, r.known)
        else:
            rows = [row for row in (before, after) if row is not None]
            plan = r.plan = self._inferred_plan(table, rows, key_columns)

        # Unchanged TOASTed values arrive as a placeholder: never data (``unavailable``).
        conv_before = None if before is None else _old_row(plan, before, key_columns)
        if key_only and conv_before is not None:
            conv_before = {k: conv_before[k] for k in key_columns}
        conv_after = None if after is None else plan.mark_unavailable(plan.convert(after))
        envelope.check_key(op, conv_before, conv_after, key_columns)

        ts_ms = _ts_ms(r.payload)
        self._last_schema[table] = plan.schema
        return DecodedChange(
            table=table,
            op=op,
            before=conv_before,
            after=conv_after,
            schema=plan.schema,
            ts_ms=ts_ms,
            tx_id=envelope.tx_id(r.payload, r.source, op),
        )


    def _truncate_schema(
        self, table: str, value_schema: Any, known: KnownWrapper | None
    ) -> TableSchema:
        """The schema a TRUNCATE event carries: the table's last one seen in this input,
        else the line's own schema with the configured primary key."""
        schema = self._last_schema.get(table)
        if schema is not None:
            return schema
        pk = self.primary_keys.get(table)
        if value_schema is not None and pk:
            return self._schema_plan(table, value_schema, pk, known).schema
        raise Bad(
            "TRUNCATE of a table whose columns and key are not known yet (no earlier record "
            "of it in this input and no schema with a source.primary_keys entry)"
        )

    def _schema_plan(
        self,
        table: str,
        value_schema: Any,
        key_columns: tuple[str, ...],
        known: KnownWrapper | None,
    ) -> Plan:
        if known is not None:
            fields, fingerprint = known.fields, known.fingerprint
        else:
            fields = row_struct(value_schema)
            fingerprint = orjson.dumps(fields)
        cache_key = (table, fingerprint, key_columns)
        plan = self._plans.get(cache_key)
        if plan is None:
            if len(self._plans) >= _MAX_CACHED_PLANS:
                self._plans.clear()
            plan = self._build_plan(table, fields, key_columns)
            self._plans[cache_key] = plan
        return plan

    @staticmethod
    def _build_plan(table: str, fields: list[Any], key_columns: tuple[str, ...]) -> Plan:
        columns: list[ColumnSpec] = []
        convs: list[tuple[str, Converter]] = []
        for f in fields:
            try:
                col, conv = column_from_field(f)
            except ValueError as exc:
                raise Bad(f"unmappable schema: {exc}") from None
            columns.append(col)
            convs.append((col.name, conv))
        return Plan(make_schema(table, tuple(columns), key_columns), convs)

    def _inferred_plan(
        self, table: str, rows: Sequence[dict[str, Any]], key_columns: tuple[str, ...]
    ) -> Plan:
        state = self._inferred.get(table)
        if state is None:
            state = self._inferred[table] = InferredTable(table)
        return state.plan_for(rows, key_columns)


def _ts_ms(payload: dict[str, Any]) -> int | None:
    ts_ms = payload.get("ts_ms")
    if ts_ms is not None and type(ts_ms) is not int:
        raise Bad(f"'ts_ms' must be an integer, got {show(ts_ms)}")
    return ts_ms


def parse_line(
    line: bytes | str,
    position: SourcePosition,
    *,
    primary_keys: Mapping[str, Sequence[str]] | None = None,
    default_table: str | None = None,
) -> ChangeEvent | None:
    """Convenience for one-off parsing (no cache reuse: use ``DebeziumParser`` for streams)."""
    parser = DebeziumParser(primary_keys=primary_keys, default_table=default_table)
    return parser.parse(line, position)


def _old_row(plan: Plan, before: dict[str, Any], key_columns: Sequence[str]) -> dict[str, Any]:
    """A u/d's before image, or its key alone when another of its values does not convert:
    a u/d needs only the key of the row it replaces (raises when the key does not convert)."""
    try:
        return plan.mark_unavailable(plan.convert(before))
    except Bad:
        if not all(before.get(k) is not None for k in key_columns):
            raise
        try:
            key = plan.convert({k: before[k] for k in key_columns})
        except (Bad, ValueError, TypeError, OverflowError):
            pass
        else:
            return {k: key[k] for k in key_columns}
        raise


def _bad_change(
    reason: str, table: str | None, op: Op | None, plan: Plan | None, before: Any,
    key_payload: Any, payload: Any, source: Any,
) -> DecodedChange | None:
    """The key-only change of a u/d that failed to convert, or None when its before key is
    unknown or does not convert either (then the line is only dead-lettered)."""
    if op not in (Op.UPDATE, Op.DELETE) or plan is None or table is None:
        return None
    keys = plan.key_columns
    for image in (before, key_payload):
        if type(image) is dict and all(image.get(k) is not None for k in keys):
            try:
                key = plan.convert({k: image[k] for k in keys})
            except (Bad, ValueError, TypeError, OverflowError):
                return None
            # The line is bad: its ts_ms or transaction may be what is bad about it.
            try:
                ts_ms = _ts_ms(payload) if type(payload) is dict else None
            except Bad:
                ts_ms = None
            try:
                tx_id = envelope.tx_id(payload, source, op) if type(payload) is dict else None
            except Bad:
                tx_id = None
            return DecodedChange(
                table=table, op=op, before=key, after=None, schema=plan.schema, ts_ms=ts_ms,
                tx_id=tx_id, error=reason,
            )  # fmt: skip
    return None
