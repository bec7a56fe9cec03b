"""Incremental snapshots on MariaDB: tables copied chunk by chunk while the binlog streams.

MariaDB gives each ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` the exact binlog position
its snapshot stands for (``binlog_snapshot_file/position``): the chunk's rows are the
table's state at that point P, with no transaction half in. So the chunk needs no LOW/HIGH
watermark pair: its rows are handed out when the stream reaches P (between transactions),
as 'r' events positioned at ``(P.file, P.pos, INCREMENTAL_BASE + seq)``, which sorts after
every change before P and before every change after it; the pipeline applies them as
upserts. It is the DBLog window reduced to zero width (the reconciliation of
``sources.common.incremental`` then drops nothing). Each chunk is its own short read-only
transaction. MySQL has no such position (it would need a global read lock per chunk): there,
an added table is copied before streaming resumes, as before.

State: ``<state_dir>/mysql-<server_id>.incremental.json`` (``IncrementalState``): tables left,
the committed frontier of each (a type-tagged key, ``snapshot.encode_key``), and the next seq
(positions stay above every one handed out, across restarts).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pymysql

from replicator.events.model import ChangeEvent, Op
from replicator.sources.common.incremental import ChunkDone, IncrementalState
from replicator.sources.common.incremental_copy import IncrementalCopier
from replicator.sources.mysql import setup
from replicator.sources.mysql.emit import make_event
from replicator.sources.mysql.position import INCREMENTAL_BASE
from replicator.sources.mysql.snapshot import (
    SnapshotReader,
    SnapTable,
    decode_key,
    encode_key,
    open_consistent_snapshot,
)
from replicator.sources.mysql.types import ValueConversionError

log = logging.getLogger(__name__)


class _Held:
    """A chunk read at binlog point ``point``, waiting for the stream to reach it."""

    def __init__(self, table: SnapTable, point: tuple[str, int], rows: list[tuple[Any, ...]],
                 last_key: tuple[Any, ...] | None, final: bool) -> None:  # fmt: skip
        self.table, self.point, self.rows, self.last_key, self.final = table, point, rows, last_key, final


class MyIncremental(IncrementalCopier[tuple[Any, ...]]):
    """The incremental snapshots of one MySQLSource (MariaDB)."""

    def __init__(
        self,
        *,
        params: setup.ConnParams,
        tables: Mapping[str, setup.TableInfo],
        snap_table: Callable[[pymysql.Connection[Any], setup.TableInfo], SnapTable],
        state: IncrementalState,
        state_path: Path | None,
        chunk_rows: int,
        dead_letter: Callable[[SnapTable, tuple[Any, ...], tuple[Any, ...], ValueConversionError], None],
        progress: bool | None,
    ) -> None:
        super().__init__(
            tables=tables, state=state, state_path=state_path, chunk_rows=chunk_rows,
            progress=progress,
        )  # fmt: skip
        self.params = params
        self.snap_table = snap_table
        self.dead_letter = dead_letter
        self._conn: pymysql.Connection[Any] | None = None
        self._held: _Held | None = None
        self._reading = {
            t: decode_key(k) if k is not None else None for t, k in state.frontier.items()
        }

    @property
    def holding(self) -> bool:
        """A chunk is read and waits for the stream to reach its point (``at_boundary``)."""
        return self._held is not None

    @property
    def busy(self) -> bool:
        return self._held is not None or self._next_table() is not None

    def next_chunk(self) -> None:
        """Read the next chunk in its own consistent snapshot, unless one is held."""
        if self._held is not None:
            return
        name = self._next_table()
        if name is None:
            return
        conn = self._conn
        if conn is None:
            conn = self._conn = setup.connect(self.params)
        point = open_consistent_snapshot(conn, True)
        try:
            table = self.snap_table(conn, self.tables[name])
            reader = SnapshotReader(conn, [table], self.chunk_rows, last_key=self._reading.get(name),
                                    blocks=False, read_ahead=False)  # one chunk, rows held, handed out row by row  # fmt: skip
            chunks = reader.chunks()
            chunk = next(chunks, None)
            close = getattr(chunks, "close", None)  # a generator: end it before the COMMIT
            if close is not None:
                close()
        finally:
            setup.query(conn, "COMMIT")
        rows = chunk.rows if chunk is not None else []
        last_key = chunk.boundary.last_key if chunk is not None else self._reading.get(name)
        self._held = _Held(table, point, list(rows), last_key, len(rows) < self.chunk_rows)

    def at_boundary(self, resume: tuple[str, int]) -> Iterator[ChangeEvent]:
        """The stream stands between transactions at ``resume``: a held chunk whose point it
        has reached is handed out now."""
        held = self._held
        if held is None or resume < held.point:
            return
        self._held = None
        t = held.table
        name = t.info.qualified
        file, pos = held.point
        seq = self.state.next_seq
        self.state.next_seq = seq + len(held.rows)
        self.save()  # before any is handed out: a restart never reuses these positions
        last = None
        n = 0
        for i, row in enumerate(held.rows):
            parts = (file, pos, INCREMENTAL_BASE + seq + i)
            try:
                after = t.rows.from_snapshot(row)
            except ValueConversionError as exc:
                self.dead_letter(t, row, parts, exc)
                continue
            last = parts
            n += 1
            yield make_event(name, Op.READ, None, after, parts, t.schema, None, None, True)
        self._reading[name] = held.last_key
        if held.final:
            self._read_all.add(name)
        key = list(encode_key(held.last_key)) if held.last_key is not None else None
        self.ledger.handed_out(ChunkDone(name, last, key, held.final))
        if self._counted(name, n):
            log.info("incremental snapshot: %s rows copied in this run (now %s)", f"{self.rows:,}", name)

    def close(self) -> None:
        super().close()
        if self._conn is not None:
            with contextlib.suppress(pymysql.err.Error):
                self._conn.close()
            self._conn = None
