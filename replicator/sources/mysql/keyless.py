"""Tables without a primary key (``source.keyless_tables``) on a MySQL/MariaDB source.

Such a table is replicated as a multiset of whole rows (README "Tables without a primary
key"): an update or delete names its row by the whole before image, which the binlog carries
only with ``binlog_row_image=FULL`` (checked for the server at start, ``setup.check_server``;
a session may still set MINIMAL or NOBLOB, so every rows event of such a table is checked
too: ``full_images``). Its rows are copied by the initial snapshot only: a later copy overlaps
the stream, and without a key a row read twice cannot be told from a duplicate.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

from replicator.errors import SourceSetupError, TerminalError
from replicator.events.model import Op, TableSchema
from replicator.sources.common.events import BadKey
from replicator.sources.mysql.emit import SourceStats
from replicator.sources.mysql.position import SNAPSHOT_BASE, BinlogPosition
from replicator.sources.mysql.setup import TableInfo
from replicator.sources.mysql.snapshot import SnapshotState

__all__ = ["NOT_FULL", "check_keyless", "copied_keyless", "full_images", "not_full_error", "not_full_items", "refuse_overlap"]

NOT_FULL = (
    "the binlog row image is not FULL (a session set binlog_row_image to MINIMAL or NOBLOB): "
    "the change does not carry every column"
)


def check_keyless(listed: Sequence[TableInfo], keyless: Collection[str]) -> None:
    """Each ``keyless`` table must be replicated (found, among ``source.tables``) and have no
    primary key."""
    known = {t.qualified: t for t in listed}
    missing = sorted(set(keyless) - set(known))
    if missing:
        raise SourceSetupError(
            f"source.keyless_tables names {missing}: no such table is replicated (not found, "
            "or not among source.tables)",
            hint="list each as db.table, as the table is named on the server",
        )
    for name in sorted(keyless):
        t = known[name]
        if t.pk_columns:
            raise SourceSetupError(
                f"table {name} is in source.keyless_tables but has a primary key "
                f"({', '.join(t.pk_columns)})",
                table=name,
                hint="remove it from source.keyless_tables: it is replicated by its key",
            )


def refuse_overlap(tables: Sequence[TableInfo], keyless: Collection[str]) -> None:
    """A snapshot that is not the first one (a resumed initial snapshot, a table new to a
    pipeline that already streams, a resnapshot) cannot copy a keyless table."""
    late = sorted(t.qualified for t in tables if t.qualified in keyless)
    if late:
        raise SourceSetupError(
            f"{', '.join(late)} (source.keyless_tables) would be copied by a snapshot that "
            "overlaps the binlog stream (an interrupted initial snapshot resumed, a table added "
            "to a pipeline that already streams, or a resnapshot): without a primary key a row "
            "read twice cannot be told from a duplicate",
            table=late[0],
            hint="start the pipeline over for these tables (a new state_dir and server_id, their "
            "Iceberg tables dropped), or give the tables a primary key",
        )


def copied_keyless(
    state: SnapshotState | None, committed: Mapping[str, BinlogPosition], keyless: Collection[str]
) -> dict[str, BinlogPosition]:
    """Keyless tables the initial snapshot copied whole with nothing committed for them (they
    were empty, and nothing of theirs was committed since): committed at the snapshot's end,
    so the stream resumes no later than that point for them, where a keyed table would be
    snapshotted again."""
    if state is None or not committed:
        return {}  # nothing committed anywhere: a first start
    done = state.done_tables()
    end = BinlogPosition(str(state.point[0]), int(state.point[1]), SNAPSHOT_BASE + max(state.next_seq - 1, 0))
    return {t: end for t in sorted(keyless) if t in done and t not in committed}


def full_images(ev: Any) -> bool:
    """Whether every row image of a rows event names every column of its table."""
    n = int(ev.number_of_columns)
    full = (1 << n) - 1
    maps = [ev.columns_present_bitmap, getattr(ev, "columns_present_bitmap2", None)]
    return all(int.from_bytes(m, "little") & full == full for m in maps if m is not None)


def not_full_error(table: str, position: str) -> TerminalError:
    """A keyed table's rows event without whole row images: its missing columns are not
    NULL but unknown (MINIMAL leaves out unchanged and defaulted ones, NOBLOB unchanged blobs),
    so applying it would write wrong values; nothing of it is acknowledged."""
    return TerminalError(
        f"a rows event of {table} does not carry every column (a session set binlog_row_image "
        "to MINIMAL or NOBLOB): its missing values are unknown, applying it would write wrong ones",
        table=table, position=position,
        hint="SET GLOBAL binlog_row_image = FULL and stop clients from changing it per session; "
        "then resnapshot the table (replicator resnapshot), which skips this event",
    )  # fmt: skip


def not_full_items(
    ev: Any, table: str, schema: TableSchema | None, tx: Any, base: int, threshold: tuple[Any, ...],
    stats: SourceStats,
) -> Iterator[tuple[Any, ...]]:
    """The held-back items (``stream.BinlogStream._emit``'s tuples) of a keyless table's rows
    event whose images are not FULL: each an error change, which stops the table
    (``pipeline.staging.check_old_images``): an update or delete cannot name its row, and an
    insert's missing columns hold server defaults the binlog does not carry."""
    op = Op.CREATE if isinstance(ev, WriteRowsEvent) else Op.UPDATE if isinstance(ev, UpdateRowsEvent) else Op.DELETE
    for i in range(len(ev.rows)):
        parts = (tx.file, tx.begin, base | i)
        if parts <= threshold:
            stats.skipped += 1
            continue
        yield (table, op, BadKey({}, NOT_FULL), None, parts, schema, ev.timestamp * 1000, tx.tx_id)
