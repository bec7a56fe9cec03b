"""Debezium JSON lines from a file or a folder of files, as a ``ChangeSource``.

Files (``*.jsonl`` by default, dot-files ignored) are read in name order, streaming one line
at a time, and each line's position is ``("file", (file_name, line_number))`` with the name
relative to the folder and 1-based line numbers, so positions sort in reading order.

Growth: the current (last reached) file may be appended to and new files may appear after
it; each ``poll`` reads what is new. A file that sorts *before* the current one and grows or
appears later cannot be read without breaking position order, so that is reported as a dead
letter (once per file) instead. A final line without ``\\n`` is taken as complete when it is
valid JSON; otherwise it is assumed to be half-written and retried on the next poll, and
dead-lettered only if the file has not changed since.

Resume: after ``Checkpoints.acknowledged``, the position up to which every table held every
event when some table last committed (a table that has committed nothing yet can still have
events anywhere after it); per-table positions then drop what a table already holds.

Replays: Debezium output travels through Kafka, which delivers at least once (a restarted
consumer or connector hands out records again, in later files), so every insert is applied
as an upsert (``ReplayWindow.all_changes``): a re-delivered create never makes a second row.
Input known to hold each change once (``source.delivery: exactly-once``) spares the equality
delete each upsert costs.

Fencing: a token that grows with every start (microseconds since the epoch, and above the
last one recorded in ``state_dir``), so a second engine writing the same tables is refused.

Transactions: see ``replicator.events.debezium``; an event gets ``last_in_tx=True`` when the
next kept event has another ``tx_id`` or when a poll reaches the end of the input (so a
transaction still being appended when a poll ends is split there).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from replicator.checkpoint import Checkpoints, ReplayWindow
from replicator.errors import BadInputError, ConfigError, TerminalError
from replicator.events.deadletter import DeadLetter, DeadLetterSink
from replicator.events.debezium import BadChangeInput, DebeziumParser, DecodedChange, Filtered
from replicator.events.model import ChangeEvent, SourcePosition
from replicator.sources.base import ChangeSource

log = logging.getLogger(__name__)

POSITION_SOURCE = "file"


class FilePosition(NamedTuple):
    """Where a Debezium record sits in the input: ``SourcePosition("file", (file, line))``
    (a named tuple: serialized as the bare tuple was). Files are read in name order."""

    file: str
    line: int

    @classmethod
    def of(cls, position: SourcePosition) -> FilePosition | None:
        """The file position ``position`` carries; None when it is not one."""
        if position.source != POSITION_SOURCE or len(position.parts) != 2:
            return None
        name, line = position.parts
        if not isinstance(name, str) or not isinstance(line, int):
            return None
        return cls(name, line)
_WHITESPACE = frozenset(b" \t\r\n")


@dataclass
class DebeziumFileStats:
    lines_read: int = 0  # lines consumed by this instance (lines skipped on resume excluded)
    events: int = 0
    tombstones: int = 0
    dead_letters: int = 0
    filtered: int = 0  # lines of tables outside ``tables``
    blank: int = 0


class DebeziumFileSource(ChangeSource):
    """Reads Debezium JSON change records (see ``replicator.events.debezium``) from files."""

    kind = "debezium-json"
    replay = ReplayWindow(snapshot_rows=True, all_changes=True)
    needs_row_fill = True  # Debezium writes a placeholder for an unchanged TOASTed value

    def __init__(
        self,
        path: Path,
        *,
        dead_letters: DeadLetterSink,
        tables: Sequence[str] | None = None,
        primary_keys: Mapping[str, Sequence[str]] | None = None,
        suffixes: Sequence[str] = (".jsonl",),
        default_table: str | None = None,
        state_dir: Path | None = None,
        exactly_once: bool = False,
    ) -> None:
        super().__init__(dead_letters)
        if exactly_once:
            self.replay = ReplayWindow(snapshot_rows=True, all_changes=False)
        self.path = Path(path)
        self.fence_path = Path(state_dir) / "debezium-json.fence" if state_dir else None
        self.tables = None if tables is None else tuple(tables)
        self.suffixes = tuple(suffixes)
        self.stats = DebeziumFileStats()
        self._parser = DebeziumParser(
            primary_keys=primary_keys, default_table=default_table, tables=self.tables
        )
        self._started = False
        # Reading state: the file being read, how far (bytes and lines), lines still to skip.
        self._cur_name: str | None = None
        self._cur_offset = 0
        self._cur_line = 0
        self._skip_lines = 0
        self._newline_owed = False  # an unterminated last line was consumed; its "\n" is due
        self._stalled: tuple[str, int, int] | None = None  # (file, offset, size) of a torn tail
        self._finished: dict[str, int] = {}  # files behind the current one -> bytes read
        self._reported: set[tuple[str, int]] = set()  # out-of-order growth already reported
        # One-event look-ahead: the last decoded change waits until the next one shows
        # whether it ended its transaction.
        self._pending: tuple[DecodedChange, SourcePosition] | None = None

    # -- ChangeSource -------------------------------------------------------------------

    def start(self, checkpoints: Checkpoints) -> None:
        if not self.path.exists():
            raise ConfigError(f"debezium-json input {self.path} does not exist")
        self.fencing_token = self._next_fencing_token()
        self._started = True
        self._cur_name, self._cur_offset, self._cur_line, self._skip_lines = None, 0, 0, 0
        self._newline_owed, self._stalled = False, None
        self._finished.clear()
        self._pending = None
        resume = self._resume_position(checkpoints)
        if resume is None:
            return
        file_name, line = resume
        log.info("resuming %s at %s line %d", self.path, file_name, line)
        for name, path in self._list_files():
            if name < file_name:
                # Everything in earlier files is committed for every table: never reread.
                self._finished[name] = _size(path)
        self._cur_name = file_name
        self._skip_lines = max(line - 1, 0)  # reread the committed line itself (filtered later)

    def poll(self) -> Iterator[ChangeEvent]:
        if not self._started:
            raise TerminalError("DebeziumFileSource.poll() called before start()")
        files = self._list_files()
        for i, (name, path) in enumerate(files):
            if self._cur_name is not None and name < self._cur_name:
                self._check_behind(name, path)
                continue
            if name != self._cur_name:
                if self._cur_name is not None:
                    self._finished[self._cur_name] = self._cur_offset
                self._cur_name, self._cur_offset, self._cur_line = name, 0, 0
                self._skip_lines, self._newline_owed, self._stalled = 0, False, None
            yield from self._read_current(name, path, last=i == len(files) - 1)
        if self._pending is not None:
            # End of the input for now: the transaction is taken as complete.
            change, pos = self._pending
            self._pending = None
            self.stats.events += 1
            yield self._parser.to_event(change, pos, last_in_tx=True)

    # -- internals ----------------------------------------------------------------------

    def _resume_position(self, checkpoints: Checkpoints) -> tuple[str, int] | None:
        for table, pos in checkpoints.positions().items():
            at = FilePosition.of(pos)
            if at is None:
                raise TerminalError(
                    f"committed position {pos} is not a debezium-json file position",
                    table=table,
                    hint="the table was replicated from another source; use a new state "
                    "directory or Iceberg table",
                )
            if self.path.is_file() and at.file != self.path.name:
                raise TerminalError(
                    f"the committed position is in file {at.file!r} but the input is the "
                    f"single file {self.path.name!r}",
                    table=table,
                    hint="point source.path at the folder holding both, or restore the file name",
                )
        acked = checkpoints.acknowledged
        if acked is None:
            return None  # read from the beginning; tables drop what they already hold
        at = FilePosition.of(acked)
        if at is None:
            raise TerminalError(f"malformed file position {acked}")
        return at

    def _next_fencing_token(self) -> int:
        token = time.time_ns() // 1000
        if self.fence_path is None:
            return token
        with contextlib.suppress(OSError, ValueError):
            token = max(token, int(self.fence_path.read_text().strip() or 0) + 1)
        self.fence_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.fence_path.with_suffix(".tmp")
        tmp.write_text(f"{token}\n")
        os.replace(tmp, self.fence_path)
        return token

    def _list_files(self) -> list[tuple[str, Path]]:
        if self.path.is_file():
            return [(self.path.name, self.path)]
        try:
            entries = list(self.path.iterdir())
        except FileNotFoundError:
            return []
        files = [
            (p.name, p)
            for p in entries
            if not p.name.startswith(".") and p.name.endswith(self.suffixes) and p.is_file()
        ]
        files.sort()
        return files

    def _check_behind(self, name: str, path: Path) -> None:
        size = _size(path)
        done = self._finished.get(name)
        if done is None:
            self._finished[name] = size
            if size:
                self._out_of_order(name, size, "appeared after later files were read")
        elif size > done:
            self._out_of_order(name, size, "grew after later files were read")

    def _out_of_order(self, name: str, size: int, what: str) -> None:
        if (name, size) in self._reported:
            return
        self._reported.add((name, size))
        self._dead_letter(
            DeadLetter(
                reason=f"file {name} {what}; its new content is not read because it would "
                "come out of position order (name files so that new data sorts last)",
                file=name,
            )
        )

    def _read_current(self, name: str, path: Path, *, last: bool) -> Iterator[ChangeEvent]:
        try:
            fh = path.open("rb")
        except FileNotFoundError:
            return
        with fh:
            size = _fsize(fh)
            if size < self._cur_offset:
                raise TerminalError(
                    f"input file {name} shrank from {self._cur_offset} to {size} bytes",
                    hint="files must only be appended to; restore the file or start afresh",
                )
            if size == self._cur_offset:
                return
            fh.seek(self._cur_offset)
            for raw in fh:
                if self._newline_owed:
                    self._newline_owed = False
                    if raw == b"\n":
                        self._cur_offset += 1
                        continue
                if raw[-1:] != b"\n" and not self._take_unterminated(name, raw, fh, last):
                    return
                self._cur_offset += len(raw)
                self._cur_line += 1
                if self._skip_lines:
                    self._skip_lines -= 1
                    continue
                event = self._consume(name, self._cur_line, raw)
                if event is not None:
                    yield event

    def _take_unterminated(self, name: str, raw: bytes, fh: Any, last: bool) -> bool:
        """Whether to consume a last line that has no newline (yet). Only the last file can
        still be being written; an earlier file's tail is final."""
        if not last:
            return True
        if raw.strip():
            try:
                orjson.loads(raw)
                complete = True
            except orjson.JSONDecodeError:
                complete = False
        else:
            return False  # only whitespace so far: wait for the rest
        if not complete:
            seen = (name, self._cur_offset, _fsize(fh))
            if self._stalled != seen:
                self._stalled = seen  # likely half-written: give the writer one more poll
                return False
        self._stalled = None
        self._newline_owed = True
        return True

    def _consume(self, name: str, line: int, raw: bytes) -> ChangeEvent | None:
        """Decode one line; return the *previous* change as an event once its
        transaction boundary is known."""
        stats = self.stats
        stats.lines_read += 1
        if raw[0] in _WHITESPACE and not raw.strip():
            stats.blank += 1
            return None
        pos = SourcePosition(source=POSITION_SOURCE, parts=(name, line))
        try:
            change = self._parser.decode(raw, pos)
        except BadChangeInput as exc:
            # A u/d that does not convert: passed on (key only) so the pipeline applies
            # errors.on_bad_change to it instead of leaving its old row in the table.
            change = exc.change
        except BadInputError as exc:
            self._dead_letter(
                DeadLetter(
                    reason=exc.message,
                    table=exc.table,
                    key=exc.key,
                    position=str(pos),
                    file=name,
                    line=line,
                    raw=raw.decode("utf-8", "replace").rstrip("\r\n"),
                )
            )
            return None
        if change is None:
            stats.tombstones += 1
            return None
        if isinstance(change, Filtered):
            stats.filtered += 1
            return None
        prev = self._pending
        self._pending = (change, pos)
        if prev is None:
            return None
        prev_change, prev_pos = prev
        tx = prev_change.tx_id
        stats.events += 1
        return self._parser.to_event(
            prev_change, prev_pos, last_in_tx=tx is None or tx != change.tx_id
        )

    def _dead_letter(self, letter: DeadLetter) -> None:
        self.stats.dead_letters += 1
        self.dead_letters.put(letter)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _fsize(fh: Any) -> int:
    return os.fstat(fh.fileno()).st_size
