"""Helpers shared by the MySQL source tests."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from replicator.events.block import row_events
from replicator.events.model import ChangeEvent, Op
from replicator.sources.mysql import MySQLSource
from sample_dbs.mysql.server import PrivateMariaDB


@dataclass
class TestDb:
    """One database on a private server: SQL as root, the replication user's DSN."""

    __test__ = False  # not a pytest test class
    server: PrivateMariaDB
    name: str

    @property
    def dsn(self) -> str:
        return self.server.dsn_for(dbname=self.name)

    def sql(self, *statements: str) -> list[tuple[Any, ...]]:
        return self.server.execute(*statements, db=self.name)

    def tx(self, *statements: str) -> None:
        """Statements in one transaction."""
        self.sql("BEGIN", *statements, "COMMIT")

    def connect(self) -> Any:
        return self.server.connect(db=self.name)


def drain(src: MySQLSource, *, max_polls: int = 1000, blocks: bool = False) -> list[ChangeEvent]:
    """Everything the source has now (polls until one comes back empty); block events as
    their rows (``BlockEvent.events()``) unless ``blocks``."""
    out: list[ChangeEvent] = []
    for _ in range(max_polls):
        got = list(src.poll())
        if not got and not src.snapshot_in_progress:
            return out if blocks else row_events(out)
        out.extend(got)
    raise AssertionError("source never went idle")


def key_of(ev: ChangeEvent, image: str) -> tuple[Any, ...]:
    assert ev.schema_ is not None
    row = ev.before if image == "before" else ev.after
    assert row is not None
    return tuple(row[k] for k in ev.schema_.key_columns)


def apply(
    model: dict[str, dict[tuple[Any, ...], dict[str, Any]]], events: Iterable[ChangeEvent]
) -> None:
    """Upsert semantics, as the pipeline applies events: 'r'/'c'/'u' replace the row with the
    after key (a 'u' that changes the key removes the before key), 'd' removes its key."""
    for ev in events:
        rows = model.setdefault(ev.table, {})
        if ev.op is Op.DELETE:
            rows.pop(key_of(ev, "before"), None)
            continue
        if ev.op is Op.UPDATE and ev.before is not None:
            old = key_of(ev, "before")
            if old != key_of(ev, "after"):
                rows.pop(old, None)
        rows[key_of(ev, "after")] = dict(ev.after or {})


def summary(events: Iterable[ChangeEvent]) -> list[tuple[Any, ...]]:
    """Comparable tuples: everything an event carries except the schema object identity."""
    return [
        (
            e.table,
            e.op.value,
            dict(e.before) if e.before else None,
            dict(e.after) if e.after else None,
            e.position.parts,
            e.tx_id,
            e.last_in_tx,
            e.schema_.column_names if e.schema_ else None,
        )
        for e in events
    ]
