"""The primary-key indexes of the tables in ``delete_mode: position`` (``replicator.index``).

One index per table under ``state_dir/index/<namespace.table>``. Before a batch is staged the
index is brought to the head the batch builds on (``ready``): our own last commit is already
in it; a head it does not know (another writer's compaction or MERGE, our maintenance, a
crash between a commit and the index update, a restore) is caught up from the table when
the head descends from the index's snapshot, else the index is rebuilt from the table's live
data files. The first use in a run also checks its live files against the table's. A table
still holding equality deletes (it was in ``equality`` mode) has them converted first.

The batch's keys that may delete a row of an earlier batch are looked up (``lookup``), sorted
and all at once, and handed to the stage as data (``BatchMapper``'s ``table_rows``), with the
(spec, partition) of each data file they name. After the commit, ``committed`` applies the
batch to the index: its new live rows (keys read back from the data files it wrote, net of
its own position deletes) and the keys whose earlier row it deleted.

The positions are valid only for the head they were looked up at (``Positions.snapshot_id``):
``pipeline.apply`` refuses to commit them on any other head (``CommitAnswer.STALE``), so no
position delete ever names a file that is not live in the snapshot its commit is based on.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table

from ops_mapping import OP_COLUMN, MappingPolicy, before_key_column
from ops_mapping.contract import (
    ROW_ID_HI_COLUMN,
    ROW_ID_LO_COLUMN,
    TABLE_ROW_PATH_COLUMN,
    TABLE_ROW_POS_COLUMN,
)
from ops_mapping.row_identity import row_fingerprints
from replicator.config import RunConfig
from replicator.iceberg.tables import TableState
from replicator.index import (
    DuplicateKeyError,
    FileRows,
    IndexCorruptError,
    PrimaryKeyIndex,
    StaleIndexError,
)
from replicator.index.from_table import (
    catch_up_from_table,
    key_arrow_types,
    live_file_homes,
    live_images,
    read_images,
    rebuild_from_table,
)
from replicator.index.multiset import (
    COPY_COLUMN,
    copy_counts,
    copy_keys,
    live_copies,
    numbered_files,
    unique_images,
)

log = logging.getLogger(__name__)

Home = tuple[int, tuple[object, ...]]  # (partition spec id, partition tuple) of a data file
# Converts a table's equality deletes to position deletes (maintenance), returns it refreshed.
Converter = Callable[[Table], Table]


@dataclass(frozen=True)
class Positions:
    """Where the live rows of a batch's keys were at ``snapshot_id``, for the stage."""

    snapshot_id: int | None
    rows: pa.Table  # key columns + TABLE_ROW_PATH_COLUMN + TABLE_ROW_POS_COLUMN
    homes: dict[str, Home]  # each named data file -> its (spec id, partition)


@dataclass
class _Held:
    index: PrimaryKeyIndex
    homes: dict[str, Home] = field(default_factory=dict)


def candidate_keys(staged: pa.Table, key_columns: Sequence[str], policy: MappingPolicy) -> pa.Table:
    """Keys of staged events (``ops_mapping`` contract) whose row from an earlier batch the
    mapper may delete: the before key of an update or delete, the key of an upserted read or
    create, the new key of an update that changes it. Unique, in the staged column types."""
    ops = staged.column(OP_COLUMN)
    parts: list[pa.Table] = []
    changes = pc.is_in(ops, value_set=pa.array(["u", "d"]))
    parts.append(pa.table([staged.column(before_key_column(k)) for k in key_columns], names=list(key_columns))
                 .filter(changes))  # fmt: skip
    after = pc.equal(ops, "u")
    if policy.upsert_reads:
        after = pc.or_(after, pc.equal(ops, "r"))
    if policy.upsert_creates:
        after = pc.or_(after, pc.equal(ops, "c"))
    parts.append(pa.table([staged.column(k) for k in key_columns], names=list(key_columns)).filter(after))
    parts = [p.cast(parts[1].schema) if p.schema != parts[1].schema else p for p in parts]
    keys = pa.concat_tables(parts)
    if not keys.num_rows:
        return keys
    return keys.group_by(list(key_columns), use_threads=False).aggregate([]).select(list(key_columns))


def position_indexes(cfg: RunConfig, spark: Callable[[], Any]) -> TableIndexes | None:
    """The indexes under ``state_dir/index`` when any table is in position mode, else None."""
    ice = cfg.iceberg
    position = ice.delete_mode == "position" or "position" in ice.delete_mode_by_table.values()
    if not position and not cfg.keyless_tables:  # tables without a key always use one
        return None

    def convert(table: Table) -> Table:
        from replicator.maintenance.conversion import convert_equality_deletes

        while convert_equality_deletes(spark(), table).snapshot_id is not None:
            table = table.refresh()
        return table.refresh()

    return TableIndexes(cfg.state_dir / "index", convert)


class TableIndexes:
    """The indexes of this run's position-mode tables (the engine is their single user)."""

    def __init__(self, root: Path, convert: Converter | None = None) -> None:
        self.root = root
        self._convert = convert
        self._held: dict[str, _Held] = {}
        self._rebuild_next: set[str] = set()  # tables whose index is rebuilt at next use

    def directory(self, state: TableState) -> Path:
        return self.root / re.sub(r"[^A-Za-z0-9_.-]", "_", state.identifier)

    def forget(self, state: TableState) -> None:
        """Drop the in-memory index (the next batch reopens it and checks it against the table)."""
        self._held.pop(state.identifier, None)

    def positions(
        self, state: TableState, head: int | None, staged: Iterable[pa.Table], chunks: Iterable[pa.Table],
        policy: MappingPolicy, *, truncate: bool,
    ) -> Positions:  # fmt: skip
        """Where the earlier rows are that staged events (``ops_mapping`` contract, the
        batch's staged chunks first) may delete: their ``candidate_keys``, looked up once."""
        if state.keyless:
            return self._keyless_positions(state, head, [*chunks, *staged], truncate=truncate)
        keys = state.key_columns
        tables = [candidate_keys(t, keys, policy) for t in (*chunks, *staged) if t.num_rows]
        schema = pa.schema(list(zip(keys, key_arrow_types(state.table, keys), strict=True)))
        wanted = pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()
        if truncate:  # the commit empties the table first: no earlier row to delete
            return Positions(head, _with_rows(wanted.slice(0, 0), [], []), {})
        if len(tables) > 1:  # a key in several chunks is looked up once
            wanted = wanted.group_by(list(keys), use_threads=False).aggregate([]).select(list(keys))
        positions = self.lookup(state, head, wanted)
        log.debug("%s: %d of %d keys hold a row of an earlier batch at snapshot %s", state.identifier,
                  positions.rows.num_rows, wanted.num_rows, positions.snapshot_id)  # fmt: skip
        return positions

    def lookup(self, state: TableState, head: int | None, keys: pa.Table, *, rebuilt: bool = False) -> Positions:
        """The live rows of ``keys`` in the table at ``head`` (the index brought there first;
        the returned snapshot may be later when equality deletes had to be converted)."""
        held, head = self._ready(state, head)
        types = key_arrow_types(state.table, state.key_columns)
        if keys.num_rows:
            typed = pa.table([keys.column(k).cast(t) for k, t in zip(state.key_columns, types, strict=True)],
                             names=list(state.key_columns))  # fmt: skip
            found = held.index.lookup(typed, head)
        else:
            typed, found = keys, None
        if found is None or not found.found.any():
            return Positions(head, _with_rows(keys.slice(0, 0), [], []), {})
        paths = [found.paths[int(i)] for i in found.file_ids[found.found]]
        rows = _with_rows(keys.filter(pa.array(found.found)), paths, found.positions[found.found])
        missing = sorted({p for p in paths if p not in held.homes})
        if missing:  # an index file the table does not list: never write a delete against it
            self.forget(state)
            if rebuilt:
                raise StaleIndexError(f"{state.identifier}: index names data files the table does not list: {missing[:3]}")
            log.warning("%s: index names data files the table does not list (%s): rebuilding it",
                        state.identifier, missing[:3])  # fmt: skip
            self._rebuild_next.add(state.identifier)
            return self.lookup(state, head, keys, rebuilt=True)
        return Positions(head, rows, {p: held.homes[p] for p in set(paths)})

    def committed(
        self, state: TableState, parent: int | None, snapshot: int, data: Sequence[DataFile],
        deletes: Sequence[DataFile], positions: Positions | None, *, truncate: bool,
        vectors: Mapping[str, npt.NDArray[np.uint64]] | None = None,
    ) -> None:  # fmt: skip
        """Our batch committed ``snapshot`` on ``parent``: apply it to the index. ``vectors``
        (format v3): the positions the commit deleted per data file, as deletion vectors (its
        position-delete files are gone by now). A failure here only costs a catch-up at the
        next batch (the index stays at ``parent``)."""
        held = self._held.get(state.identifier)
        if held is None or truncate or held.index.snapshot_id != parent:
            self.forget(state)  # caught up from the table before the next batch
            return
        try:
            if state.keyless:
                added, removed = self._keyless_batch_rows(held.index, state, data, deletes, positions, vectors or {})
            else:
                added, removed = self._batch_rows(state, data, deletes, positions, vectors or {})
            held.index.apply_batch(parent, snapshot, added, removed)
            for f in data:
                held.homes[f.file_path] = (f.spec_id, tuple(f.partition[i] for i in range(len(f.partition))))
        except Exception:  # noqa: BLE001 - the table is right; the index is caught up later
            log.warning("%s: index not updated after commit %s; catching up at the next batch",
                        state.identifier, snapshot, exc_info=True)  # fmt: skip
            self.forget(state)

    # ---- internals -------------------------------------------------------------------

    def _ready(self, state: TableState, head: int | None) -> tuple[_Held, int | None]:
        held = self._held.get(state.identifier)
        if held is not None and held.index.snapshot_id == head:
            return held, head
        table, keys = state.table, state.key_columns
        directory = self.directory(state)
        index: PrimaryKeyIndex | None = held.index if held is not None else None
        if state.identifier in self._rebuild_next:
            self._rebuild_next.discard(state.identifier)
        elif index is None and (directory / "MANIFEST").exists():
            try:
                index = PrimaryKeyIndex.open(directory)
            except IndexCorruptError as exc:
                log.warning("%s: index unreadable (%s): rebuilding it", state.identifier, exc)
        if index is not None and index.snapshot_id != head and state.keyless:
            # Another commit's deleted rows have unknown copy numbers (``index.multiset``).
            log.info("%s: table without a key moved to snapshot %s: rebuilding its index", state.identifier, head)
            index = None
        if index is not None and index.snapshot_id != head:
            try:
                catch_up_from_table(index, table, keys, head)
                log.info("%s: index caught up to snapshot %s", state.identifier, head)
            except (StaleIndexError, DuplicateKeyError, IndexCorruptError) as exc:
                log.info("%s: index cannot follow the table (%s): rebuilding it", state.identifier, exc)
                index = None
        homes: dict[str, Home] | None = None
        if index is not None:
            try:
                homes = live_file_homes(table, head)
                index.check_live(head, homes)
            except StaleIndexError as exc:
                log.warning("%s: %s: rebuilding the index", state.identifier, exc)
                index = None
        if index is None:
            index, head = self._rebuild(state, directory, head)
            homes = live_file_homes(state.table, head)
        assert homes is not None
        held = self._held[state.identifier] = _Held(index, homes)
        return held, head

    def _rebuild(self, state: TableState, directory: Path, head: int | None) -> tuple[PrimaryKeyIndex, int | None]:
        if state.keyless:
            index = PrimaryKeyIndex.rebuild(directory, head, numbered_files(live_images(state.table, head)))
            log.info("%s: index of whole rows rebuilt at snapshot %s", state.identifier, head)
            return index, head
        try:
            index = rebuild_from_table(directory, state.table, state.key_columns, head)
        except StaleIndexError:
            if self._convert is None:
                raise
            # Switching from equality mode: the table's pending equality deletes become
            # position deletes first (the batch then stages again on the new head).
            log.info("%s: converting its equality deletes before position mode begins", state.identifier)
            state.table = self._convert(state.table)
            current = state.table.current_snapshot()
            head = current.snapshot_id if current is not None else None
            index = rebuild_from_table(directory, state.table, state.key_columns, head)
        log.info("%s: index rebuilt at snapshot %s (%d live files)", state.identifier, head, len(index.live_files))
        return index, head

    # ---- tables without a primary key (``index.multiset``) ------------------------------

    def _keyless_positions(
        self, state: TableState, head: int | None, staged: Sequence[pa.Table], *, truncate: bool,
        rebuilt: bool = False,
    ) -> Positions:  # fmt: skip
        """Every live row equal to the old image of a staged update or delete, in copy order."""
        names = [f.name for f in state.table.schema().fields]
        types = key_arrow_types(state.table, names)
        his, los = [], []
        for t in staged:
            changes = t.filter(pc.is_in(t.column(OP_COLUMN), value_set=pa.array(["u", "d"])))
            if not changes.num_rows:
                continue
            cols = [changes.column(before_key_column(n)).cast(ty) if before_key_column(n) in changes.column_names
                    else pa.nulls(changes.num_rows, ty) for n, ty in zip(names, types, strict=True)]  # fmt: skip
            hi, lo = row_fingerprints(cols)
            his.append(hi)
            los.append(lo)
        held, head = self._ready(state, head)
        if truncate or not his:
            return Positions(head, live_copies(held.index, head, np.empty(0, np.uint64), np.empty(0, np.uint64)), {})
        rows = live_copies(held.index, head, np.concatenate(his), np.concatenate(los))
        paths = set(rows.column(TABLE_ROW_PATH_COLUMN).to_pylist())
        missing = sorted(p for p in paths if p not in held.homes)
        if missing:  # an index file the table does not list: never write a delete against it
            self.forget(state)
            if rebuilt:
                raise StaleIndexError(f"{state.identifier}: index names data files the table does not list: {missing[:3]}")
            self._rebuild_next.add(state.identifier)
            return self._keyless_positions(state, head, staged, truncate=truncate, rebuilt=True)
        log.debug("%s: %d live rows equal an old image at snapshot %s", state.identifier, rows.num_rows, head)
        return Positions(head, rows, {p: held.homes[p] for p in paths})

    def _keyless_batch_rows(
        self, index: PrimaryKeyIndex, state: TableState, data: Sequence[DataFile], deletes: Sequence[DataFile],
        positions: Positions | None, vectors: Mapping[str, npt.NDArray[np.uint64]],
    ) -> tuple[list[FileRows], pa.Table | None]:  # fmt: skip
        """The batch's live rows keyed (image, copy), numbered on from the copies its deletes
        left, and the (image, copy) keys of the earlier rows it deleted (the top copies)."""
        in_batch, earlier = _deleted_rows(state, data, deletes, vectors)
        removed = None
        if earlier.num_rows and positions is not None and positions.rows.num_rows:
            gone = positions.rows.join(earlier, keys=[TABLE_ROW_PATH_COLUMN, TABLE_ROW_POS_COLUMN],
                                       right_keys=["file_path", "pos"], join_type="inner", use_threads=False)  # fmt: skip
            removed = copy_keys(gone.column(ROW_ID_HI_COLUMN).to_numpy(), gone.column(ROW_ID_LO_COLUMN).to_numpy(),
                                gone.column(COPY_COLUMN).to_numpy())  # fmt: skip
        names = [f.name for f in state.table.schema().fields]
        types = key_arrow_types(state.table, names)
        files = []
        for f in data:
            rows = read_images(state.table, f.file_path, names, types)
            pos = np.arange(rows.num_rows, dtype=np.int64)
            if f.file_path in in_batch:
                pos = np.setdiff1d(pos, np.concatenate(in_batch[f.file_path]))
            files.append((f.file_path, list(rows.take(pa.array(pos)).columns), pos))
        if not files:
            return [], removed
        prints = [row_fingerprints(cols) for _p, cols, _q in files]
        uhi, ulo, _ = unique_images(np.concatenate([h for h, _l in prints]), np.concatenate([lo for _h, lo in prints]))
        counts = copy_counts(index, index.snapshot_id, uhi, ulo)  # before this batch
        first = {(int(h), int(lo_)): int(c) for h, lo_, c in zip(uhi, ulo, counts, strict=True) if c}
        if removed is not None:
            for h, lo_ in zip(removed.column(0).to_numpy().view(np.uint64).tolist(),
                              removed.column(1).to_numpy().view(np.uint64).tolist(), strict=True):  # fmt: skip
                first[(h, lo_)] = first.get((h, lo_), 0) - 1
        return list(numbered_files(files, first, prints)), removed

    def _batch_rows(
        self, state: TableState, data: Sequence[DataFile], deletes: Sequence[DataFile], positions: Positions | None,
        vectors: Mapping[str, npt.NDArray[np.uint64]],
    ) -> tuple[list[FileRows], pa.Table | None]:  # fmt: skip
        """The batch's live rows per data file it wrote, and the keys whose earlier row it
        deleted (from its position deletes, files or vectors: those naming files it did not
        write)."""
        in_batch, hit = _deleted_rows(state, data, deletes, vectors)
        io = state.table.io
        types = key_arrow_types(state.table, state.key_columns)
        added = []
        for f in data:
            with io.new_input(f.file_path).open() as stream:
                keys = pq.ParquetFile(stream).read(columns=list(state.key_columns))
            pos = np.arange(keys.num_rows, dtype=np.int64)
            gone = in_batch.get(f.file_path)
            if gone:
                pos = np.setdiff1d(pos, np.concatenate(gone))
            cols = [keys.column(k).cast(t).take(pa.array(pos)) for k, t in zip(state.key_columns, types, strict=True)]
            added.append(FileRows(f.file_path, cols, pos))
        removed = None
        if hit.num_rows and positions is not None and positions.rows.num_rows:
            joined = positions.rows.join(
                hit, keys=[TABLE_ROW_PATH_COLUMN, TABLE_ROW_POS_COLUMN], right_keys=["file_path", "pos"],
                join_type="inner", use_threads=False,
            )  # fmt: skip
            removed = pa.table([joined.column(k).cast(t) for k, t in zip(state.key_columns, types, strict=True)],
                               names=list(state.key_columns))  # fmt: skip
        return added, removed


def _deleted_rows(
    state: TableState, data: Sequence[DataFile], deletes: Sequence[DataFile],
    vectors: Mapping[str, npt.NDArray[np.uint64]],
) -> tuple[dict[str, list[np.ndarray]], pa.Table]:  # fmt: skip
    """A batch's deleted rows: positions per data file it wrote itself, and (file_path, pos)
    of the earlier batches' rows (from its position-delete files or deletion vectors)."""
    io = state.table.io
    ours = {f.file_path for f in data}
    in_batch: dict[str, list[np.ndarray]] = {}
    earlier: list[pa.Table] = []
    deleted: list[pa.Table] = []
    for f in deletes:
        if f.content != DataFileContent.POSITION_DELETES:
            raise StaleIndexError(f"{state.identifier}: an equality delete in position mode ({f.file_path})")
        with io.new_input(f.file_path).open() as stream:
            deleted.append(pq.ParquetFile(stream).read(columns=["file_path", "pos"]).cast(_DELETED))
    if vectors:
        deleted.append(_vector_rows(vectors))
    for rows in deleted:
        mine = pc.is_in(rows.column("file_path"), value_set=pa.array(sorted(ours), pa.string()))
        for path, group in _by_path(rows.filter(mine)):
            in_batch.setdefault(path, []).append(group)
        earlier.append(rows.filter(pc.invert(mine)))
    return in_batch, pa.concat_tables(earlier) if earlier else _DELETED.empty_table()


def _with_rows(keys: pa.Table, paths: Sequence[str], positions: Sequence[int] | np.ndarray) -> pa.Table:
    """``keys`` with where each one's row is (``BatchMapper``'s ``table_rows``)."""
    rows = keys.append_column(TABLE_ROW_PATH_COLUMN, pa.array(paths, pa.string()))
    return rows.append_column(TABLE_ROW_POS_COLUMN, pa.array(positions, pa.int64()))


_DELETED = pa.schema([("file_path", pa.string()), ("pos", pa.int64())])


def _vector_rows(vectors: Mapping[str, npt.NDArray[np.uint64]]) -> pa.Table:
    """Deletion vectors' positions as position-delete rows (``file_path``, ``pos``)."""
    paths = [p for p, v in vectors.items() for _ in range(len(v))]
    pos = np.concatenate([v.astype(np.int64) for v in vectors.values()])
    return pa.table([pa.array(paths, pa.string()), pa.array(pos, pa.int64())], schema=_DELETED)


def _by_path(rows: pa.Table) -> list[tuple[str, np.ndarray]]:
    if not rows.num_rows:
        return []
    paths = rows.column("file_path").to_numpy(zero_copy_only=False)
    pos = rows.column("pos").to_numpy()
    return [(str(p), pos[paths == p]) for p in np.unique(paths)]
