"""Chunked snapshot bookkeeping both databases share: where a chunk ends and where a
restarted snapshot resumes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from tqdm import tqdm

log = logging.getLogger(__name__)

# A snapshot's progress goes to the log this often (a service has no terminal for the bar).
PROGRESS_LOG_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Boundary:
    """The end of one snapshot chunk: the last seq it handed out and where reading goes on."""

    seq: int  # the last seq of a chunk
    table_index: int  # table to continue with
    last_key: tuple[Any, ...] | None  # None: start of that table


class ResumeState(Protocol):
    """A snapshot's resume state file (each database's ``SnapshotState``)."""

    tables: list[str]
    table_index: int
    last_key: Any
    next_seq: int
    complete: bool

    def save(self, path: Path) -> None: ...


def record_boundary(
    state: ResumeState, boundary: Boundary, last_key: Any, next_seq: int, path: Path | None
) -> None:
    """The snapshot's rows up to ``boundary`` are committed: a restart continues after it
    (``last_key``: the boundary's key as the state file stores it)."""
    state.table_index = boundary.table_index
    state.last_key = last_key
    state.next_seq = next_seq
    state.complete = boundary.table_index >= len(state.tables)
    if path:
        state.save(path)


# Chunk records a snapshot state keeps at most (``frontier.py`` of each database): dropping
# the oldest only narrows a resume less (a table whose last commit ends a dropped chunk
# repeats up to its frontier), and a stopped table (its acknowledgements held back) must not
# grow the file, rewritten before every chunk, without bound.
CHUNK_RECORDS_MAX = 1024


def pruned_chunk_records(records: list[list[Any]], acked_seq: int, seq_at: int) -> list[list[Any]]:
    """The chunk records (``[table, ...]``, the chunk's last seq at ``seq_at``) that may still
    end a table's last committed row: at or above the acknowledged seq, and each table's
    newest below it; the newest ``CHUNK_RECORDS_MAX`` of those."""
    newest_below: dict[str, int] = {}
    for i, c in enumerate(records):
        if c[seq_at] < acked_seq:
            newest_below[c[0]] = i
    keep = set(newest_below.values())
    return [c for i, c in enumerate(records) if c[seq_at] >= acked_seq or i in keep][-CHUNK_RECORDS_MAX:]


class BoundaryLog:
    """The boundaries of the chunks handed out, oldest first, until acknowledged."""

    def __init__(self) -> None:
        self.boundaries: list[Boundary] = []

    def append(self, boundary: Boundary) -> None:
        self.boundaries.append(boundary)

    def resume_point(self, acked_seq: int) -> Boundary | None:
        """The last boundary at or below an acknowledged seq (drops older ones)."""
        best: Boundary | None = None
        keep: list[Boundary] = []
        for b in self.boundaries:
            if b.seq <= acked_seq:
                best = b
            else:
                keep.append(b)
        if best is not None:
            self.boundaries = [best, *keep]
        return best


class _HasRows(Protocol):
    @property
    def rows(self) -> Sequence[Any]: ...


def _size(chunk: Any) -> int:
    """Rows in a chunk: ``len(chunk)`` when it says (a chunk read as Arrow has no ``rows``
    list), else ``len(chunk.rows)``."""
    return len(chunk) if hasattr(chunk, "__len__") else len(chunk.rows)


C = TypeVar("C", bound=_HasRows)


class SnapshotCursor(Generic[C]):
    """The rows of a chunked snapshot one at a time, with a progress bar. The place lives in
    the cursor, not in a generator: a consumer that stops iterating early loses nothing."""

    def __init__(
        self,
        chunks: Iterator[C],
        *,
        total: int | None,
        desc: str,
        progress: bool | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._chunks = chunks
        self._chunk: C | None = None
        self._pos = 0
        self._desc = desc
        self._total = total or None
        self._clock = clock
        self._started = self._logged = clock()
        self._read = 0
        # progress None: tqdm decides (a terminal shows the bar, a log file does not).
        self._bar: tqdm[Any] | None = tqdm(
            total=total or None, unit="rows", desc=desc,
            disable=None if progress is None else not progress, leave=False,
        )  # fmt: skip

    def next_row(self) -> tuple[C, int] | None:
        """The next row as (its chunk, its index in the chunk); None when all were read."""
        got = self.next_rows(1)
        return None if got is None else (got[0], got[1])

    def next_rows(self, limit: int) -> tuple[C, int, int] | None:
        """The next rows of one chunk as (chunk, start, stop), at most ``limit`` of them
        (limit >= 1); None when all were read."""
        chunk = self._chunk
        while chunk is None or self._pos >= _size(chunk):
            chunk = self._chunk = next(self._chunks, None)
            self._pos = 0
            if chunk is None:
                return None
        start = self._pos
        stop = self._pos = min(_size(chunk), start + limit)
        if self._bar is not None:
            self._bar.update(stop - start)
        self._read += stop - start
        now = self._clock()
        if now - self._logged >= PROGRESS_LOG_SECONDS:
            self._logged = now
            log.info("%s", self.progress_line(now))
        return chunk, start, stop

    def progress_line(self, now: float) -> str:
        """What the log says every ``PROGRESS_LOG_SECONDS``: rows this run, rate, share."""
        rate = self._read / max(now - self._started, 1e-9)
        of = ""
        if self._total:
            share = min(self._read / self._total, 1.0)
            left = max(self._total - self._read, 0) / rate if rate > 0 else 0.0
            of = f" of ~{self._total:,} ({share:.0%}, about {left:,.0f} s left)"
        return f"{self._desc}: {self._read:,} rows read in this run{of}, {rate:,.0f} rows/s"

    def close(self) -> None:
        """Stop reading: the chunk generator ends now (a read it has in flight on a helper
        thread is awaited), before its source closes the connection under it."""
        self._chunk = None
        stop = getattr(self._chunks, "close", None)
        if stop is not None:
            try:
                stop()
            except Exception as exc:  # noqa: BLE001 - closing must go on (the connection is closed next)
                log.warning("%s: stopping the snapshot read failed: %s", self._desc, exc)
        if self._bar is not None:
            self._bar.close()
            self._bar = None
