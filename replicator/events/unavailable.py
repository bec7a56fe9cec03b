"""Column values a change record does not carry, and filling them in (pure).

Debezium's Postgres connector cannot read an unchanged out-of-line ("TOASTed") value of an
UPDATE without REPLICA IDENTITY FULL; it sends a placeholder instead
(``unavailable.value.placeholder``, default ``__debezium_unavailable_value``), in a shape that
depends on the column type (measured with Debezium 3.6.3; see docs/debezium.md):

=========================================  =============================================
column                                     what arrives
=========================================  =============================================
text, varchar, json/jsonb, xml             the placeholder text
bytea (binary.handling.mode=bytes)         the placeholder's bytes (base64 in JSON)
bytea (base64/hex modes), numeric          the placeholder text
  (decimal.handling.mode=string)
text[] and other text arrays               ``["__debezium_unavailable_value"]``
int[] and other integer arrays             the placeholder's bytes as numbers
unconstrained numeric, precise mode        null: indistinguishable, nothing to detect
=========================================  =============================================

The Debezium parser turns each of these into ``UNAVAILABLE`` (one module-level sentinel,
never a value of any column type: it cannot be written as data, staging rejects it), and
``fill_unavailable`` replaces it with the column's current value before the batch is applied.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Final

import orjson

from replicator.errors import BadInputError
from replicator.events.model import ChangeEvent, Op

__all__ = [
    "DEBEZIUM_PLACEHOLDER",
    "PLACEHOLDER_VALUES",
    "UNAVAILABLE",
    "Key",
    "RowLookup",
    "fill_unavailable",
    "has_unavailable",
    "mark_unavailable",
]


class _Unavailable:
    """The type of ``UNAVAILABLE``; a singleton (copies and pickles stay the same object)."""

    __slots__ = ()
    _instance: _Unavailable | None = None

    def __new__(cls) -> _Unavailable:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unavailable: unchanged TOASTed value not sent by the source>"

    def __reduce__(self) -> str:
        return "UNAVAILABLE"

    def __copy__(self) -> _Unavailable:
        return self

    def __deepcopy__(self, memo: Any) -> _Unavailable:
        return self


UNAVAILABLE: Final = _Unavailable()

DEBEZIUM_PLACEHOLDER: Final = "__debezium_unavailable_value"
_PLACEHOLDER_BYTES: Final = DEBEZIUM_PLACEHOLDER.encode()
# Engine values (after conversion) that are the placeholder in one of its shapes: the text,
# its bytes (binary column), its base64 text (a bytea column read without a schema), and the
# JSON text of the two array shapes (arrays are stored as JSON text).
PLACEHOLDER_VALUES: Final[frozenset[Any]] = frozenset(
    {
        DEBEZIUM_PLACEHOLDER,
        _PLACEHOLDER_BYTES,
        base64.b64encode(_PLACEHOLDER_BYTES).decode(),
        orjson.dumps([DEBEZIUM_PLACEHOLDER]).decode(),
        orjson.dumps(list(_PLACEHOLDER_BYTES)).decode(),
    }
)


def mark_unavailable(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (engine values) with every placeholder value replaced by ``UNAVAILABLE``
    (the same dict when there is none). One set operation when there is nothing to do."""
    values = row.values()
    try:
        if PLACEHOLDER_VALUES.isdisjoint(values):
            return row
    except TypeError:  # an unhashable value (never from the converters): check one by one
        pass
    out = dict(row)
    for k, v in row.items():
        try:
            if v in PLACEHOLDER_VALUES:
                out[k] = UNAVAILABLE
        except TypeError:
            continue
    return out


def has_unavailable(row: Mapping[str, Any] | None) -> bool:
    return row is not None and any(v is UNAVAILABLE for v in row.values())


Key = tuple[Hashable, ...]
#: keys -> the current row of each key in the target table (None: no such row). Called at
#: most once per ``fill_unavailable`` call, with every key it needs.
RowLookup = Callable[[Sequence[Key]], Mapping[Key, Mapping[str, Any] | None]]

_MISSING: Final = object()


def fill_unavailable(
    events: Sequence[ChangeEvent],
    key_columns: Sequence[str],
    lookup: RowLookup | None = None,
) -> list[ChangeEvent]:
    """One table's events of one batch, in order, with every ``UNAVAILABLE`` value replaced.

    A value comes from, in this order:

    1. the latest earlier image of the same key in ``events`` (exact: the value has not
       changed since, or the source would have sent it);
    2. ``lookup``: the key's current row in the target table, which holds every change
       before this batch (exact for the same reason). Called once, for all keys that need it;
    3. for a create that directly follows a delete in the same transaction (how Debezium
       sends a primary-key change: ``d`` old key, ``c`` new key), the deleted key's image,
       by rules 1 and 2.

    A value found nowhere raises ``BadInputError`` naming the table, key, position and
    column: a placeholder is never written as data. Events without ``UNAVAILABLE`` are
    returned as they are (the same objects).
    """
    keys = tuple(key_columns)
    needs = [_needs_fill(ev) for ev in events]
    if not any(needs):
        return list(events)

    # Pass 1: which keys have no earlier image in the batch when first needed.
    seen: set[Key] = set()
    wanted: list[Key] = []
    for i, ev in enumerate(events):
        if needs[i]:
            src = _source_key(events, i, keys)
            if src is not None and src not in seen and src not in wanted:
                wanted.append(src)
        _remember_keys(ev, keys, seen)
    found: Mapping[Key, Mapping[str, Any] | None] = {}
    if wanted and lookup is not None:
        found = lookup(wanted)

    # Pass 2: fill, tracking the latest full image of each key.
    latest: dict[Key, Mapping[str, Any] | None] = {}
    deleted: dict[Key, Mapping[str, Any] | None] = {}  # the image a delete removed
    out: list[ChangeEvent] = []
    for i, ev in enumerate(events):
        if needs[i]:
            src = _source_key(events, i, keys)
            image: Any = None
            if src is not None:
                if ev.op is Op.CREATE:  # a key change: the deleted old key's image
                    image = deleted.get(src)
                    if image is None:
                        image = found.get(src)
                else:
                    image = latest.get(src, _MISSING)
                    if image is _MISSING:
                        image = found.get(src)
            ev = _filled(ev, image if isinstance(image, Mapping) else None, keys)
        _track(ev, keys, latest, deleted)
        out.append(ev)
    return out


def _needs_fill(ev: ChangeEvent) -> bool:
    return has_unavailable(ev.after) or has_unavailable(ev.before)


def _key_of(row: Mapping[str, Any], keys: tuple[str, ...]) -> Key:
    return tuple(row.get(k) for k in keys)


def _source_key(events: Sequence[ChangeEvent], i: int, keys: tuple[str, ...]) -> Key | None:
    """The key whose earlier image holds the values event ``i`` lacks."""
    ev = events[i]
    if ev.op is Op.CREATE:
        prev = events[i - 1] if i else None
        if (
            prev is not None
            and prev.op is Op.DELETE
            and prev.before is not None
            and ev.tx_id is not None
            and prev.tx_id == ev.tx_id
        ):
            return _key_of(prev.before, keys)
        return None
    if ev.op is Op.DELETE:
        return None if ev.before is None else _key_of(ev.before, keys)
    row = ev.before if ev.before is not None else ev.after
    return None if row is None else _key_of(row, keys)


def _remember_keys(ev: ChangeEvent, keys: tuple[str, ...], seen: set[Key]) -> None:
    """Keys whose full image is known from this event on, for pass 1 (an after-image; a
    delete's before-image is not one: with REPLICA IDENTITY DEFAULT Debezium sends the key
    and nulls)."""
    if ev.op is not Op.DELETE and ev.after is not None and not has_unavailable(ev.after):
        seen.add(_key_of(ev.after, keys))


def _track(
    ev: ChangeEvent,
    keys: tuple[str, ...],
    latest: dict[Key, Mapping[str, Any] | None],
    deleted: dict[Key, Mapping[str, Any] | None],
) -> None:
    if ev.op is Op.DELETE:
        if ev.before is not None:
            k = _key_of(ev.before, keys)
            prior = latest.get(k)
            # Never the delete's own before-image: with REPLICA IDENTITY DEFAULT it holds the
            # key and nulls, which would pass for values.
            deleted[k] = prior
            latest[k] = None
        return
    if ev.op is Op.UPDATE and ev.before is not None:
        old = _key_of(ev.before, keys)
        new = _key_of(ev.after, keys) if ev.after is not None else old
        if old != new:
            latest[old] = None
    if ev.after is not None:
        latest[_key_of(ev.after, keys)] = ev.after


def _filled(ev: ChangeEvent, image: Mapping[str, Any] | None, keys: tuple[str, ...]) -> ChangeEvent:
    after, before = ev.after, ev.before
    if has_unavailable(after):
        assert after is not None
        after = _fill_row(ev, after, image, keys, "after")
    if has_unavailable(before):
        assert before is not None
        before = _fill_row(ev, before, image, keys, "before")
    return ev.replace(after=after, before=before)


def _fill_row(
    ev: ChangeEvent,
    row: Mapping[str, Any],
    image: Mapping[str, Any] | None,
    keys: tuple[str, ...],
    which: str,
) -> dict[str, Any]:
    out = dict(row)
    for col, v in row.items():
        if v is not UNAVAILABLE:
            continue
        value = _MISSING if image is None else image.get(col, _MISSING)
        if value is _MISSING or value is UNAVAILABLE:
            key = _key_of(row, keys)
            raise BadInputError(
                f"column {col!r} of the {which!r} image is unavailable (an unchanged TOASTed "
                "value the source did not send) and no earlier value of this row is known",
                table=ev.table,
                key=key[0] if len(key) == 1 else key,
                position=ev.position,
                hint="set REPLICA IDENTITY FULL on the source table so that Debezium sends "
                "unchanged large values",
            )
        out[col] = value
    return out
