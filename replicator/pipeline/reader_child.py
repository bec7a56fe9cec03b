"""The child side of ``source.reader_process``: the real source, read in a process of its own.

The child builds the source from a picklable factory, starts it when told, then polls ahead
of the engine and sends what each poll yields in chunks (the chunk boundaries are the
reader thread's, ``pipeline.reader.CHUNK_EVENTS`` rows, so the state sent after a chunk is
what the reader thread would have asked the source at that point). Every message costs one
credit; the engine returns a credit per message it takes, so at most ``credits`` messages
are in flight (memory stays bounded). While it waits for credits, or for the engine to ask
again after an idle poll, the child keeps the server connection alive (``keepalive()``).

It acknowledges only what the engine acknowledges, in the order the engine sent it; after a
failed ``start`` or ``poll`` it reads no more but still takes acknowledgements until closed
(the engine commits the complete transactions it got before the error, then acknowledges).
Dead letters and log records go to the engine, which keeps them as if read in-process.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from replicator.checkpoint import ReplayWindow
from replicator.events.block import row_count
from replicator.events.deadletter import DeadLetter, DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition, TableSchema
from replicator.pipeline.reader import CHUNK_EVENTS
from replicator.sources.base import ChangeSource, LogPosition
from replicator.sources.observe import SourceObserver

SourceFactory = Callable[[DeadLetterSink], ChangeSource]
PR_SET_NAME = 15  # linux/prctl.h


@dataclass(frozen=True)
class SourceState:
    """What the engine reads from its source between calls, as the child last saw it."""

    replay: ReplayWindow
    fencing_token: int | None
    source_id: str | None
    snapshot_in_progress: bool
    incremental_active: bool
    reached: LogPosition | None
    behind: bool = False


def state_of(source: ChangeSource) -> SourceState:
    return SourceState(
        source.replay, source.fencing_token, source.source_id,
        bool(getattr(source, "snapshot_in_progress", False)),
        bool(getattr(source, "incremental_active", False)), source.reached_position(), source.behind,
    )  # fmt: skip


class ForwardedLetters(DeadLetterSink):
    """The child's dead-letter sink: letters are kept for the next message to the engine,
    whose own sink redacts, counts and writes them (nothing is written in the child)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.pending: list[DeadLetter] = []

    def put(self, letter: DeadLetter) -> None:
        with self._lock:
            self.pending.append(letter)

    def take(self) -> list[DeadLetter]:
        with self._lock:
            out, self.pending = self.pending, []
            return out


class PollTally(SourceObserver):
    """Sums what the child's polls spent reading and decoding, sent with each poll's end."""

    def __init__(self) -> None:
        self.read_s = self.decode_s = 0.0
        self.nbytes = self.messages = 0

    def read(self, seconds: float, nbytes: int) -> None:
        self.read_s += seconds
        self.nbytes += nbytes

    def decoded(self, seconds: float, messages: int) -> None:
        self.decode_s += seconds
        self.messages += messages

    def take(self) -> tuple[float, int, float, int]:
        out = (self.read_s, self.nbytes, self.decode_s, self.messages)
        self.read_s = self.decode_s = 0.0
        self.nbytes = self.messages = 0
        return out


class EventPacker:
    """Row events as flat tuples for the pipe, each table schema sent once (by number).

    Pickling ``ChangeEvent``s as objects calls Python per event and per position on both
    sides (measured: ~8 us an event to load); tuples of the fields load in C, and events
    sharing a schema share one schema object in the engine as in-process (caches keyed by a
    schema's identity, e.g. ``events.columns``, stay small). Other events (snapshot and
    change blocks) travel as themselves."""

    def __init__(self) -> None:
        self._numbers: dict[int, int] = {}
        self._kept: list[TableSchema] = []  # keeps ids unique while numbered

    def pack(self, chunk: list[ChangeEvent]) -> tuple[list[TableSchema], list[Any]]:
        """The schemas not sent before, and the chunk packed."""
        numbers, kept = self._numbers, self._kept
        new: list[TableSchema] = []
        out: list[Any] = []
        for ev in chunk:
            if type(ev) is not ChangeEvent:
                out.append(ev)
                continue
            schema, n = ev.schema_, -1
            if schema is not None:
                got = numbers.get(id(schema))
                if got is None:
                    got = numbers[id(schema)] = len(kept)
                    kept.append(schema)
                    new.append(schema)
                n = got
            p = ev.position
            out.append((ev.table, ev.op.value, ev.before, ev.after, p.source, p.parts, n, ev.ts_ms, ev.tx_id,
                        ev.last_in_tx, ev.error))  # fmt: skip
        return new, out


_OPS = {op.value: op for op in Op}


class EventUnpacker:
    """The engine's side of ``EventPacker``."""

    def __init__(self) -> None:
        self.schemas: list[TableSchema] = []

    def unpack(self, new: list[TableSchema], packed: list[Any]) -> list[ChangeEvent]:
        schemas = self.schemas
        schemas.extend(new)
        ops, event, position = _OPS, ChangeEvent, SourcePosition
        out: list[ChangeEvent] = []
        for x in packed:
            if type(x) is not tuple:
                out.append(x)
                continue
            out.append(event(x[0], ops[x[1]], x[2], x[3], position=position(x[4], x[5]),
                             schema=schemas[x[6]] if x[6] >= 0 else None, ts_ms=x[7], tx_id=x[8],
                             last_in_tx=x[9], error=x[10]))  # fmt: skip
        return out


class _Forward(logging.Handler):
    """Log records of the child, sent to the engine (which formats and scrubs them)."""

    def __init__(self, send: Callable[[Any], None]) -> None:
        super().__init__()
        self.send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
            if record.exc_info:
                msg += "\n" + "".join(traceback.format_exception(*record.exc_info))
            self.send(("log", record.name, record.levelno, msg))
        except Exception:  # noqa: BLE001 - a log record must never stop the reader
            pass


def portable_error(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling (the engine raises the same class and message), else
    a RuntimeError naming its class; the child's traceback goes along as a note."""
    note = "in the source reader process:\n" + "".join(traceback.format_exception(exc)).rstrip()
    try:
        pickle.loads(pickle.dumps(exc))
        out = exc
    except Exception:  # noqa: BLE001 - any pickling failure: send a plain stand-in
        out = RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    out.__traceback__ = None
    out.__cause__ = out.__context__ = None
    if not any(n == note for n in getattr(out, "__notes__", ())):
        out.add_note(note)
    return out


class _Closing(Exception):
    """The engine said close: leave the poll where it is."""


class ChildReader:
    def __init__(self, source: ChangeSource, letters: ForwardedLetters, send: Callable[[Any], None],
                 cmd: Connection, credits: int) -> None:  # fmt: skip
        self.source = source
        self.letters = letters
        self.send = send  # a message to the engine (any thread of the child)
        self.cmd = cmd
        self.credits = credits
        self.want = False  # the engine asked for a poll (cleared by an idle one)
        self.held = False  # measurement: read nothing more until released (``hold``)
        self.started = False
        self.failed = False
        self.closing = False
        self.tally: PollTally | None = None
        self.alive_at = time.monotonic()
        self.packer = EventPacker()

    # -- messages -------------------------------------------------------------------------------
    def _handle(self, msg: tuple[Any, ...]) -> None:
        op = msg[0]
        if op == "took":
            self.credits += 1
        elif op == "ack":
            self.source.acknowledge(msg[1])
        elif op == "poll":
            self.want = True
        elif op == "keepalive":
            self._keepalive()
        elif op == "set":
            setattr(self.source, msg[1], msg[2])
        elif op == "call":
            self._call(msg[1], msg[2])
        elif op == "start":
            self._start(msg[1], msg[2])
        elif op == "hold":
            self.held = msg[1]
        elif op == "close":
            self.closing = True

    def serve(self, timeout: float = 0.0) -> None:
        """Handle the engine's messages (waiting up to ``timeout`` for the first); keep the
        source alive when it has waited long enough."""
        if self.cmd.poll(timeout):
            while not self.closing and self.cmd.poll(0):
                self._handle(self.cmd.recv())
        if self.started and time.monotonic() - self.alive_at >= self.source.keepalive_seconds:
            self._keepalive()
        if self.closing:
            raise _Closing

    def _keepalive(self) -> None:
        self.alive_at = time.monotonic()
        if self.started and not self.failed:
            self.source.keepalive()

    def _call(self, name: str, args: tuple[Any, ...]) -> None:
        try:
            got = getattr(self.source, name)
            value = got(*args) if callable(got) else got
            reply: tuple[Any, ...] = ("reply", True, value, state_of(self.source))
        except BaseException as exc:  # noqa: BLE001 - raised in the engine
            reply = ("reply", False, portable_error(exc), None)
        self.cmd.send(reply)

    def _start(self, checkpoints: Any, observe: bool) -> None:
        if observe:
            self.tally = PollTally()
            self.source.source_observer = self.tally
        try:
            self.source.start(checkpoints)
        except BaseException as exc:  # noqa: BLE001 - raised in the engine
            self.failed = True
            self.send(("error", self.letters.take(), portable_error(exc)))
            return
        self.started = True
        self.alive_at = time.monotonic()
        self.send(("started", self.letters.take(), state_of(self.source)))

    # -- reading --------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while True:
                if (
                    self.started
                    and not self.failed
                    and self.want
                    and self.credits > 0
                    and not self.held
                ):
                    self.serve()
                    self._one_poll()
                else:
                    self.serve(self.source.keepalive_seconds if self.started else 1.0)
        except _Closing:
            pass

    def _emit(self, chunk: list[ChangeEvent]) -> None:
        self.credits -= 1
        new, packed = self.packer.pack(chunk)
        self.send(("events", self.letters.take(), new, packed, state_of(self.source)))
        self.serve()
        while self.credits <= 0 or self.held:  # back-pressure: the engine has not taken enough yet
            self.serve(self.source.keepalive_seconds)

    def _one_poll(self) -> None:
        got = rows = 0
        chunk: list[ChangeEvent] = []
        try:
            for ev in self.source.poll():
                chunk.append(ev)
                rows += row_count(ev)
                got += 1
                if rows >= CHUNK_EVENTS:
                    self._emit(chunk)
                    chunk, rows = [], 0
        except _Closing:
            raise
        except BaseException as exc:  # noqa: BLE001 - raised in the engine after the chunk
            self.failed = True
            if chunk:
                self._emit(chunk)
            self.send(("error", self.letters.take(), portable_error(exc)))
            return
        if chunk:
            self._emit(chunk)
        self.credits -= 1
        tally = self.tally.take() if self.tally is not None else None
        self.send(("end", self.letters.take(), got, state_of(self.source), tally))
        if got == 0:
            self.want = False  # idle: wait until the engine asks again


def _name_process(name: bytes) -> None:
    """What ``ps`` / ``top`` show for the child (Linux ``prctl(PR_SET_NAME)``); else nothing."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(PR_SET_NAME, name, 0, 0, 0)


def child_main(factory: SourceFactory, data: Connection, cmd: Connection, settings: dict[str, Any],
               credits: int, log_level: int) -> None:  # fmt: skip
    """The child process: build the source, serve the engine until it says close."""
    # A Ctrl-C or SIGTERM to the process group is the engine's to handle: it stops, sends its
    # last acknowledgement, then closes the child (which ends on its own if the engine dies:
    # the pipe closes).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _name_process(b"source-reader")
    lock = threading.Lock()

    def send_locked(msg: Any) -> None:
        with lock:
            data.send(msg)

    root = logging.getLogger()
    root.handlers[:] = [_Forward(send_locked)]
    root.setLevel(log_level)
    letters = ForwardedLetters()
    try:
        source = factory(letters)
        for name, value in settings.items():
            setattr(source, name, value)
    except BaseException as exc:  # noqa: BLE001 - raised in the engine
        send_locked(("error", letters.take(), portable_error(exc)))
        return
    reader = ChildReader(source, letters, send_locked, cmd, credits)
    try:
        reader.run()
    finally:
        source.close()
        data.close()
