"""Building change events on a source's hot path (both databases the same way)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from replicator.events.model import ChangeEvent, Op, SourcePosition, TableSchema, event_builder

# table, op, before, after, position parts, schema, ts_ms, tx_id, last in its transaction
EventMaker = Callable[
    [str, Op, Mapping[str, Any] | None, Mapping[str, Any] | None, tuple[Any, ...],
     TableSchema | None, int | None, str | None, bool],
    ChangeEvent,
]  # fmt: skip


class BadKey(dict[str, Any]):
    """The before key of a u/d whose row does not convert, riding in the 'before' slot of a
    change a source holds back; ``make_event`` turns it into an event with ``error`` set and
    no after image (the pipeline applies ``errors.on_bad_change``: never a silently kept
    stale row)."""

    def __init__(self, key: Mapping[str, Any], error: str) -> None:
        super().__init__(key)
        self.error = error


def event_maker(source: str) -> EventMaker:
    """``make_event(table, op, before, after, parts, schema, ts_ms, tx_id, last)`` for positions
    of ``source`` (positional arguments: a source holds a change back as this tuple, minus
    ``last``, until it knows whether the transaction ends there). A ``BadKey`` before image
    makes an event carrying its error."""

    build = event_builder(source)
    delete, truncate = Op.DELETE, Op.TRUNCATE

    def make_event(
        table: str,
        op: Op,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        parts: tuple[Any, ...],
        schema: TableSchema | None,
        ts_ms: int | None,
        tx_id: str | None,
        last: bool,
    ) -> ChangeEvent:
        if type(before) is BadKey:
            return ChangeEvent(
                table, op, dict(before), None, position=SourcePosition(source, parts),
                schema=schema, ts_ms=ts_ms, tx_id=tx_id, last_in_tx=last, error=before.error,
            )  # fmt: skip
        if (
            (after is None and op is not delete and op is not truncate)
            or (before is None and op is delete)
            or type(parts) is not tuple
        ):  # the constructor's checks, with its errors
            return ChangeEvent(
                table, op, before, after, position=SourcePosition(source, parts), schema=schema,
                ts_ms=ts_ms, tx_id=tx_id, last_in_tx=last,
            )  # fmt: skip
        return build(table, op, before, after, parts, schema, ts_ms, tx_id, last, None)

    return make_event
