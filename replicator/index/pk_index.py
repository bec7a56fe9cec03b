"""The primary-key index of one Iceberg table: key -> (live data file, row position).

It lets a writer in ``delete_mode: position`` turn an update or delete of a key written by an
earlier batch into a position delete (or a deletion-vector bit). The one thing it must never
do is name a row that is not live: a position delete against a file that is gone would bring
nothing back, but one against a removed row's *old* file would leave the row's current copy
alive. Hence:

* it answers for exactly one table snapshot (``snapshot_id``) and refuses any other;
* every change is applied against the snapshot it was made on (``parent``), or refused;
* each entry names a file by a small id; the ids of removed files are dead and their entries
  never answered; ``check_live`` compares the index's live files with the table's.

Layout (an LSM tree of key fingerprints, see ``runs.py`` and ``keys.py``): each change writes
one sorted run of its entries (a removed key is a tombstone), the newest entry of a key wins,
and runs are merged like a binary counter (a run merges into the one before it when it is at
least as big), so each entry is rewritten O(log n) times and a lookup probes O(log n) runs,
most of them skipped by their bloom filter. Resident: the bloom filters and sparse samples
(~1.3 bytes a key); on disk ~28 bytes a key plus tombstones until merged away.

Durability: runs are written whole then renamed; the manifest (``manifest.py``) is replaced
atomically after them, so a crash leaves the previous state or the new one. One durability
point per change: the runs a change writes and merges away at once are never fsynced, the
ones its manifest names are, just before it (the index is written after the table's commit,
so it may lag the table, never lead it). A missing or torn
manifest raises IndexCorruptError: rebuild from the table (``rebuild``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from replicator.index.errors import DuplicateKeyError, IndexCorruptError, StaleIndexError
from replicator.index.keys import fingerprint, key_type_names
from replicator.index.manifest import MANIFEST, Manifest, read_manifest, write_manifest
from replicator.index.runs import (
    MERGE_PART_ENTRIES,
    TOMBSTONE,
    DuplicateFingerprint,
    Entries,
    Run,
    merge_runs,
    sort_unique,
    sync_run,
    write_run,
)

__all__ = ["FileMove", "FileRows", "KeyColumns", "Lookup", "PrimaryKeyIndex"]

KeyColumns: TypeAlias = Sequence[pa.Array | pa.ChunkedArray] | pa.Table
_ABSENT = -1


@dataclass(frozen=True)
class FileRows:
    """Live rows of one data file: their keys (columns in key order) and row positions
    (``None``: rows 0..n-1, every row of the file)."""

    path: str
    keys: KeyColumns
    positions: np.ndarray | None = None


@dataclass(frozen=True)
class FileMove:
    """A rewrite moved the rows of ``old_path`` into ``new_path``: ``new_positions[p]`` is
    where old row ``p`` went, -1 if it was not carried (it was deleted)."""

    old_path: str
    new_path: str
    new_positions: np.ndarray


@dataclass(frozen=True)
class Lookup:
    """Where each looked-up key's live row is (parallel to the keys asked)."""

    found: np.ndarray  # bool
    file_ids: np.ndarray  # int32, -1 where not found
    positions: np.ndarray  # int64, -1 where not found
    paths: dict[int, str]  # file id -> data file path

    def file_paths(self) -> list[str | None]:
        return [self.paths[int(f)] if f >= 0 else None for f in self.file_ids]

    def position_deletes(self) -> pa.Table:
        """(file_path, pos) of the found rows, sorted: a position-delete file's content."""
        ids, pos = self.file_ids[self.found], self.positions[self.found]
        paths = [self.paths[int(i)] for i in ids]
        table = pa.table({"file_path": pa.array(paths, pa.string()), "pos": pa.array(pos, pa.int64())})
        return table.sort_by([("file_path", "ascending"), ("pos", "ascending")])


def _columns(keys: KeyColumns) -> list[pa.Array | pa.ChunkedArray]:
    return list(keys.columns) if isinstance(keys, pa.Table) else list(keys)


def _wipe(directory: Path) -> None:
    """Empty ``directory`` for a new index; refuse one holding anything but an index."""
    if directory.exists():
        foreign = [p.name for p in directory.iterdir() if not p.name.startswith((MANIFEST, "run-"))]
        if foreign:
            raise ValueError(f"{directory} holds {sorted(foreign)[:3]}: not an index directory, not wiped")
        shutil.rmtree(directory)
    directory.mkdir(parents=True)


class PrimaryKeyIndex:
    """One table's index in ``directory`` (exclusively: one writer per table)."""

    def __init__(self, directory: Path, manifest: Manifest, runs: list[Run]) -> None:
        self._dir = directory
        self._m = manifest
        self._runs = runs
        self._refresh_maps()

    # ---- opening -------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path) -> PrimaryKeyIndex:
        """An empty index for a table with no snapshot yet (anything in ``directory`` goes)."""
        return cls._fresh(directory, Manifest(snapshot_id=None, key_types=None))

    @classmethod
    def open(cls, directory: Path) -> PrimaryKeyIndex:
        """The index as last written; IndexCorruptError if it is missing or torn."""
        manifest = read_manifest(directory)
        runs = []
        for name, count in manifest.runs:
            try:
                runs.append(Run.open(directory / name, count))
            except (OSError, ValueError, KeyError) as exc:
                raise IndexCorruptError(f"index run {directory / name} is missing or torn: {exc}") from exc
        index = cls(directory, manifest, runs)
        index._drop_unreferenced()
        return index

    @classmethod
    def rebuild(cls, directory: Path, snapshot_id: int | None, files: Iterable[FileRows]) -> PrimaryKeyIndex:
        """The index of a table snapshot from its live data files (rows already net of their
        position deletes / deletion vectors). DuplicateKeyError if two live rows share a key."""
        _wipe(directory)  # no manifest until the end: a crash mid-way leaves a torn index
        m = Manifest(snapshot_id=None, key_types=None)
        index = cls(directory, m, [])
        ids: dict[int, str] = {}
        spills: list[Run] = []
        pending: list[Entries] = []
        pending_n = 0
        key_types: tuple[str, ...] | None = None

        def spill() -> None:
            nonlocal pending, pending_n, m
            ents = Entries.concat(pending)
            try:
                ents = sort_unique(ents, duplicates="error")
            except DuplicateFingerprint as dup:
                index._raise_duplicate(ents, dup.first, dup.second, ids)
            run = write_run(directory / f"run-{m.next_run:08d}", [ents])
            m = m.evolve(next_run=m.next_run + 1)
            if run is not None:
                spills.append(run)
            pending, pending_n = [], 0

        for rows in files:
            cols = _columns(rows.keys)
            types = key_type_names(cols)
            if key_types is None:
                key_types = types
            elif types != key_types:
                raise ValueError(f"data file {rows.path} has key types {types}, expected {key_types}")
            fid = m.next_file_id
            m = m.evolve(next_file_id=fid + 1)
            ids[fid] = rows.path
            pending.append(_file_entries(fid, cols, rows.positions))
            pending_n += len(pending[-1])
            if pending_n >= MERGE_PART_ENTRIES:
                spill()
        if pending:
            spill()
        runs = spills
        if len(spills) > 1:
            name = f"run-{m.next_run:08d}"
            m = m.evolve(next_run=m.next_run + 1)
            try:
                merged = merge_runs(spills, directory / name, np.empty(0, np.int32), complete=True, duplicates="error")
            except DuplicateFingerprint as dup:
                index._raise_spilled_duplicate(spills, dup.first, dup.second, ids)
            runs = [merged] if merged is not None else []
        m = m.evolve(
            snapshot_id=snapshot_id,
            key_types=key_types,
            runs=tuple((r.name, r.count) for r in runs),
            files=tuple(sorted(ids.items())),
        )
        write_manifest(directory, m)
        index = cls(directory, m, runs)
        index._drop_unreferenced()
        return index

    @classmethod
    def _fresh(cls, directory: Path, manifest: Manifest) -> PrimaryKeyIndex:
        _wipe(directory)
        write_manifest(directory, manifest)
        return cls(directory, manifest, [])

    # ---- what it knows -------------------------------------------------------------------

    @property
    def snapshot_id(self) -> int | None:
        return self._m.snapshot_id

    @property
    def live_files(self) -> frozenset[str]:
        return frozenset(p for _i, p in self._m.files)

    @property
    def run_counts(self) -> tuple[int, ...]:
        return tuple(r.count for r in self._runs)

    def disk_bytes(self) -> int:
        return sum(r.disk_bytes() for r in self._runs)

    def resident_bytes(self) -> int:
        """Bytes this index keeps in memory (bloom filters, sparse samples, file registry)."""
        return sum(r.bloom.nbytes + r.segments.nbytes + r.sparse.nbytes for r in self._runs) + sum(
            len(p) + 16 for _i, p in self._m.files
        )

    def check_live(self, snapshot_id: int | None, live_paths: Iterable[str]) -> None:
        """Refuse (StaleIndexError) unless the index answers for ``snapshot_id`` and its live
        files are exactly the table's live data files at that snapshot."""
        self._check_snapshot(snapshot_id, "check")
        live = frozenset(live_paths)
        mine = self.live_files
        if live != mine:
            gone, unknown = sorted(mine - live), sorted(live - mine)
            raise StaleIndexError(
                f"index live files differ from the table's at snapshot {snapshot_id}: "
                f"{len(gone)} no longer live (e.g. {gone[:3]}), {len(unknown)} not indexed (e.g. {unknown[:3]})",
                hint="another writer changed the table: catch the index up or rebuild it",
            )

    def lookup(self, keys: KeyColumns, snapshot_id: int | None) -> Lookup:
        """Where the live row of each key is, at ``snapshot_id`` (refused for another one)."""
        self._check_snapshot(snapshot_id, "lookup")
        cols = _columns(keys)
        self._check_types(cols)
        hi, lo = fingerprint(cols)
        fid, pos = self._find(hi, lo)
        found = fid >= 0
        return Lookup(found, fid, pos, {i: self._paths[i] for i in np.unique(fid[found]).tolist()})

    # ---- changes -------------------------------------------------------------------------

    def apply_batch(
        self,
        parent: int | None,
        snapshot: int,
        added: Sequence[FileRows] = (),
        removed: KeyColumns | None = None,
    ) -> None:
        """A batch committed ``snapshot`` on ``parent``: ``removed`` keys lost their row (a
        key both removed and added is an update: the added row wins), ``added`` files hold
        the batch's live rows. DuplicateKeyError if an added key is still live elsewhere."""
        self._change(parent, snapshot, added=added, removed=removed)

    def rewrite(self, parent: int | None, snapshot: int, moves: Sequence[FileMove]) -> None:
        """A compaction (``snapshot``) moved rows between files as ``moves`` say."""
        self._change(parent, snapshot, moves=moves)

    def catch_up(
        self,
        parent: int | None,
        snapshot: int,
        removed_files: Iterable[str] = (),
        added: Sequence[FileRows] = (),
        removed: KeyColumns | None = None,
    ) -> None:
        """Another writer's commit: its removed data files are forgotten (their entries are
        never answered again), its added files' live rows indexed, its deleted keys removed."""
        self._change(parent, snapshot, added=added, removed=removed, removed_files=tuple(removed_files))

    def note_snapshot(self, parent: int | None, snapshot: int) -> None:
        """A commit that changes no live row (delete conversion, a checkpoint-only commit)."""
        self._change(parent, snapshot)

    # ---- internals -----------------------------------------------------------------------

    def _refresh_maps(self) -> None:
        self._paths = dict(self._m.files)
        self._ids = {p: i for i, p in self._m.files}
        self._dead = np.array(self._m.dead, dtype=np.int32)

    def _check_snapshot(self, snapshot_id: int | None, what: str) -> None:
        if snapshot_id != self._m.snapshot_id:
            raise StaleIndexError(
                f"index is at snapshot {self._m.snapshot_id}, asked to {what} at {snapshot_id}",
                hint="catch the index up with the commits in between, or rebuild it from the table",
            )

    def _check_types(self, cols: Sequence[pa.Array | pa.ChunkedArray]) -> tuple[str, ...]:
        types = key_type_names(cols)
        if self._m.key_types is not None and types != self._m.key_types:
            raise ValueError(f"keys of types {types} given to an index of keys {self._m.key_types}")
        return types

    def _find(self, hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(file id, pos) of each fingerprint's newest live entry; (-1, -1) where none."""
        order = np.argsort(hi)  # sorted probes touch run pages in order
        hi, lo = hi[order], lo[order]
        fid = np.full(len(hi), _ABSENT, dtype=np.int32)
        pos = np.full(len(hi), _ABSENT, dtype=np.int64)
        open_ = np.ones(len(hi), dtype=bool)
        for run in reversed(self._runs):
            todo = np.flatnonzero(open_)
            if len(todo) == 0:
                break
            with run.entries() as ents:
                idx = run.probe(hi[todo], lo[todo], ents)
                hit = idx >= 0
                fid[todo[hit]] = ents.file[idx[hit]]
                pos[todo[hit]] = ents.pos[idx[hit]]
            open_[todo[hit]] = False
        gone = (fid == TOMBSTONE) | np.isin(fid, self._dead)
        fid[gone] = _ABSENT
        pos[gone] = _ABSENT
        out_fid, out_pos = np.empty_like(fid), np.empty_like(pos)
        out_fid[order], out_pos[order] = fid, pos
        return out_fid, out_pos

    def _change(
        self,
        parent: int | None,
        snapshot: int,
        added: Sequence[FileRows] = (),
        removed: KeyColumns | None = None,
        moves: Sequence[FileMove] = (),
        removed_files: tuple[str, ...] = (),
    ) -> None:
        self._check_snapshot(parent, f"apply the change made on it (new snapshot {snapshot})")
        m = self._m
        files = dict(m.files)
        ids = {p: i for i, p in m.files}
        for path in removed_files + tuple(mv.old_path for mv in moves):
            if path not in ids:
                raise StaleIndexError(f"data file {path} is not live in the index", hint="rebuild the index")
        gone_ids = [ids[p] for p in removed_files]
        moved_ids = sorted({ids[mv.old_path] for mv in moves})
        next_id = m.next_file_id
        new_paths = [r.path for r in added] + [mv.new_path for mv in moves]
        for path in dict.fromkeys(new_paths):
            if path in ids:
                raise StaleIndexError(f"data file {path} is already live in the index (listed twice?)")
            ids[path] = next_id
            files[next_id] = path
            next_id += 1
        for path in removed_files + tuple(mv.old_path for mv in moves):
            del files[ids[path]]
        parts: list[Entries] = []
        tombs: Entries | None = None
        if removed is not None:
            cols = _columns(removed)
            if cols and len(cols[0]):
                self._check_types(cols)
                hi, lo = fingerprint(cols)
                tombs = Entries(hi, lo, np.full(len(hi), TOMBSTONE, np.int32), np.full(len(hi), -1, np.int64))
                parts.append(tombs)
        if moves:
            parts.append(self._moved_entries(moves, ids))
        key_types = m.key_types
        added_parts = []
        for rows in added:
            cols = _columns(rows.keys)
            key_types = self._check_types(cols)
            added_parts.append(_file_entries(ids[rows.path], cols, rows.positions))
        if added_parts:
            fresh = Entries.concat(added_parts)
            self._check_new(fresh, tombs, gone_ids, files)
            parts.append(fresh)
        ents = sort_unique(Entries.concat(parts), duplicates="last") if parts else None
        m = m.evolve(
            snapshot_id=snapshot,
            key_types=key_types,
            files=tuple(sorted(files.items())),
            dead=tuple(sorted(set(m.dead) | set(gone_ids) | set(moved_ids))),
            next_file_id=next_id,
        )
        runs = list(self._runs)
        if ents is not None and len(ents):
            # Unsynced: it is usually merged into the run before it at once (binary counter);
            # only the runs the new manifest names are synced, once, before it (one
            # durability point per change instead of one per run and merge).
            run = write_run(self._dir / f"run-{m.next_run:08d}", [ents], sync=False)
            m = m.evolve(next_run=m.next_run + 1)
            if run is not None:
                runs.append(run)
        m, runs = self._merge_tail(m, runs)
        old = {r.name for r in self._runs}
        for r in runs:
            if r.name not in old:
                sync_run(r)
        self._install(m, runs)

    def _check_new(self, fresh: Entries, tombstones: Entries | None, gone_ids: list[int], files: dict[int, str]) -> None:
        """Refuse added keys that are twice in the change or still live in the index."""
        try:
            sort_unique(fresh, duplicates="error")
        except DuplicateFingerprint as dup:
            self._raise_duplicate(fresh, dup.first, dup.second, files)
        fid, pos = self._find(fresh.hi, fresh.lo)
        live = (fid >= 0) & ~np.isin(fid, np.array(gone_ids, np.int32))
        if tombstones is not None and live.any():
            live &= ~np.isin(_pairs(fresh), _pairs(tombstones))
        if live.any():
            i = int(np.flatnonzero(live)[0])
            raise DuplicateKeyError(
                f"{int(live.sum())} added key(s) still live in another row, e.g. the row at "
                f"{files.get(int(fresh.file[i]))}#{int(fresh.pos[i])} is also at "
                f"{self._paths.get(int(fid[i]))}#{int(pos[i])}",
                hint="a key must be removed (or its file rewritten) before it is added again",
            )

    def _moved_entries(self, moves: Sequence[FileMove], ids: dict[str, int]) -> Entries:
        """The current entries of the moved files, pointing at their rows' new places."""
        by_old = {self._ids[mv.old_path]: mv for mv in moves}
        old_ids = np.array(sorted(by_old), dtype=np.int32)
        found: list[Entries] = []
        for run in self._runs:
            for start in range(0, run.count, MERGE_PART_ENTRIES):
                f = run.read_column("file", start, min(run.count, start + MERGE_PART_ENTRIES))
                sel = np.flatnonzero(np.isin(f, old_ids)) + start
                if len(sel):
                    with run.entries() as ents:
                        found.append(ents.take(sel))
        cand = Entries.concat(found)
        fid, pos = self._find(cand.hi, cand.lo)
        current = cand.take((fid == cand.file) & (pos == cand.pos))  # superseded entries stay behind
        new_file = np.empty(len(current), np.int32)
        new_pos = np.empty(len(current), np.int64)
        for old_id, mv in by_old.items():
            sel = current.file == old_id
            if mv.new_positions.size and int(current.pos[sel].max(initial=-1)) >= len(mv.new_positions):
                raise ValueError(f"rewrite of {mv.old_path}: position map shorter than the file's rows")
            moved = np.asarray(mv.new_positions, np.int64)[current.pos[sel]]
            new_pos[sel] = moved
            new_file[sel] = np.where(moved >= 0, ids[mv.new_path], TOMBSTONE)
        return Entries(current.hi, current.lo, new_file, new_pos)

    def _install(self, m: Manifest, runs: list[Run]) -> None:
        m = m.evolve(runs=tuple((r.name, r.count) for r in runs))
        write_manifest(self._dir, m)
        self._m, self._runs = m, runs
        self._refresh_maps()
        self._drop_unreferenced()

    def _merge_tail(self, m: Manifest, runs: list[Run]) -> tuple[Manifest, list[Run]]:
        """Merge the newest run into the one before while it is at least as big (a binary
        counter: O(log n) runs, each entry rewritten O(log n) times). The merged runs are
        written unsynced; the caller syncs the survivors and installs the manifest."""
        while len(runs) >= 2 and runs[-2].count <= runs[-1].count:
            complete = len(runs) == 2
            dead = np.array(m.dead, dtype=np.int32)
            name = f"run-{m.next_run:08d}"
            merged = merge_runs(runs[-2:], self._dir / name, dead, complete=complete, sync=False)
            runs = runs[:-2] + ([merged] if merged is not None else [])
            m = m.evolve(next_run=m.next_run + 1)
            if complete:  # no entry names a dead file any more
                m = m.evolve(dead=())
        return m, runs

    def _drop_unreferenced(self) -> None:
        keep = {r.name for r in self._runs}
        for child in self._dir.iterdir():
            if child.is_dir() and child.name not in keep:
                shutil.rmtree(child, ignore_errors=True)

    def _raise_duplicate(self, ents: Entries, a: int, b: int, files: dict[int, str]) -> None:
        raise DuplicateKeyError(
            f"two live rows hold one key: {files.get(int(ents.file[a]))}#{int(ents.pos[a])} and "
            f"{files.get(int(ents.file[b]))}#{int(ents.pos[b])}"
        )

    def _raise_spilled_duplicate(self, runs: list[Run], a: int, b: int, files: dict[int, str]) -> None:
        where = []
        for packed in (a, b):
            with runs[packed >> 40].entries() as ents:
                i = packed & ((1 << 40) - 1)
                where.append(f"{files.get(int(ents.file[i]))}#{int(ents.pos[i])}")
        raise DuplicateKeyError(f"two live rows hold one key: {where[0]} and {where[1]}")


def _file_entries(fid: int, cols: Sequence[pa.Array | pa.ChunkedArray], positions: np.ndarray | None) -> Entries:
    hi, lo = fingerprint(cols)
    pos = np.arange(len(hi), dtype=np.int64) if positions is None else np.asarray(positions, np.int64)
    if len(pos) != len(hi):
        raise ValueError(f"{len(hi)} keys but {len(pos)} positions")
    return Entries(hi, lo, np.full(len(hi), fid, np.int32), pos)


def _pairs(ents: Entries) -> np.ndarray:
    """Fingerprints as one structured value each (for set membership)."""
    out = np.empty(len(ents), dtype=[("hi", np.uint64), ("lo", np.uint64)])
    out["hi"], out["lo"] = ents.hi, ents.lo
    return out
