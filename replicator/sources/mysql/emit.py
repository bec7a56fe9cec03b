"""What the MySQL source hands out, stream and snapshot alike: events of its positions
(``position.py``), dead letters of rows that do not convert, its counters."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from replicator.errors import BadInputError
from replicator.events.deadletter import DeadLetter, DeadLetterSink
from replicator.events.model import SourcePosition, TableSchema
from replicator.sources.common.events import event_maker
from replicator.sources.common.stats import CommonSourceStats
from replicator.sources.mysql.position import MYSQL
from replicator.sources.mysql.types import ValueConversionError

log = logging.getLogger(__name__)

Parts = tuple[str, int, int]  # a BinlogPosition's parts, built as a bare tuple on the hot path

make_event = event_maker(MYSQL)


@dataclass
class SourceStats(CommonSourceStats):
    transactions: int = 0


def dead_letter(
    sink: DeadLetterSink,
    stats: SourceStats,
    table: str,
    schema: TableSchema | None,
    values: Mapping[str, Any],
    parts: Parts,
    exc: ValueConversionError,
) -> None:
    """A row that cannot be converted: dead-lettered with table, key and position."""
    key = None if schema is None else {k: values.get(k) for k in schema.key_columns}
    pos = SourcePosition(source=MYSQL, parts=parts)
    err = BadInputError(str(exc), table=table, key=key, position=pos)
    stats.dead_letters += 1
    log.warning("dead letter: %s", err)
    raw = orjson.dumps(
        {
            k: v if isinstance(v, str | int | float | bool) or v is None else repr(v)
            for k, v in values.items()
        },
        default=repr,
    ).decode()
    sink.put(DeadLetter(reason=err.message, table=table, key=key, position=str(pos), raw=raw))
