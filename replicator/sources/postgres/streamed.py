"""Transactions the server streams while they run (pgoutput protocol 2, PostgreSQL 14+),
kept on local disk until they end.

With ``streaming 'on'`` the walsender sends a transaction that outgrows its
``logical_decoding_work_mem`` in blocks (Stream Start .. Stream Stop), interleaved with other
transactions, long before its commit. The engine's rule stays "transactions whole, in commit
order": ``StreamedTransactions`` appends each block's messages to one spool file per top-level
xid (a few KB resident per open transaction: the file's name and its rolled-back
subtransactions), drops the file at a Stream Abort of the transaction, remembers a Stream
Abort of a subtransaction (ROLLBACK TO SAVEPOINT: its changes, tagged with its xid, are left
out), and at Stream Commit replays the kept messages as ONE ordinary transaction
(Begin .. Commit carrying the commit's LSNs). Everything after the decoder (positions, the
skip rule, the batcher and its spill, checkpoints, acknowledgements) sees what an
unstreamed transaction would have produced.

Spool files are scratch: a new replication session re-streams every transaction not yet
confirmed from its first change, so they are discarded at start and at every reconnect
(``discard_all``). Acknowledgements are unchanged: only committed positions are confirmed,
and a streamed transaction's commit lies after anything confirmed while it ran.
"""

from __future__ import annotations

import logging
import shutil
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from replicator.errors import SourceSetupError, TerminalError
from replicator.sources.postgres.pgoutput import (
    Begin,
    Commit,
    PgOutputMessage,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    decode,
    split_streamed,
)

log = logging.getLogger(__name__)

StreamingMode = Literal["auto", "on", "off"]
STREAMING_MIN_VERSION = 140000  # protocol version 2: streaming of in-progress transactions
STREAM_KINDS = frozenset(b"SEcA")  # the frame messages, outside and between blocks
SPOOL_SUFFIX = ".xact"
_RECORD = struct.Struct(">II")  # (sub)transaction xid, message length
_BUFFER = 1 << 16  # write/read buffer per spool file (one file open at a time)


def streaming_enabled(mode: StreamingMode, server_version: int) -> bool:
    """``source.streaming`` against the server: auto = on where the server can (14+)."""
    if mode == "off":
        return False
    if server_version >= STREAMING_MIN_VERSION:
        return True
    if mode == "on":
        raise SourceSetupError(
            f"source.streaming: on needs PostgreSQL 14 or later (pgoutput protocol version 2); "
            f"this server is PostgreSQL {server_version // 10000}",
            hint="set source.streaming: auto (or off)",
        )
    return False


@dataclass
class _Spool:
    """One open streamed transaction: where its messages are and what of it was rolled back."""

    path: Path
    aborted: set[int] = field(default_factory=set)  # subtransactions rolled back
    messages: int = 0
    size: int = 0


@dataclass
class StreamedStats:
    committed: int = 0  # streamed transactions replayed at their commit
    aborted: int = 0  # streamed transactions rolled back whole
    subtransactions_aborted: int = 0
    messages_spooled: int = 0
    bytes_spooled: int = 0


# (message, its size as v1 sends it); with ``raw_rows``, Insert, Update and Delete messages as bytes
Replayed = Iterator[tuple[PgOutputMessage | bytes, int]]
_ROW_KINDS = frozenset(b"IUD")


class StreamedTransactions:
    """Spool files of the transactions being streamed; ``feed`` takes every message read
    while a block is open and every stream frame message (``STREAM_KINDS``)."""

    def __init__(self, directory: Path | None) -> None:
        # Replay Insert, Update and Delete messages undecoded (the source keeps runs of them for
        # block events: changes.ChangeAssembler.change_raw).
        self.raw_rows = False
        self._temporary = directory is None  # no state directory: a private temporary one
        self.directory = (
            Path(tempfile.mkdtemp(prefix="replicator-streamed-"))
            if directory is None
            else directory
        )
        self.directory.mkdir(parents=True, exist_ok=True)
        self.stats = StreamedStats()
        self._open: dict[int, _Spool] = {}
        self._block: int | None = None  # xid of the block being read
        self._out: IO[bytes] | None = None
        self.discard_all()

    @property
    def in_block(self) -> bool:
        return self._block is not None

    @property
    def open_transactions(self) -> int:
        return len(self._open)

    def discard_all(self) -> None:
        """A new replication session (or a new process): the server streams again every
        transaction it had streamed, from its first change."""
        self._close_block()
        self._open.clear()
        for path in self.directory.glob(f"*{SPOOL_SUFFIX}"):
            path.unlink(missing_ok=True)

    def close(self) -> None:
        self.discard_all()
        if self._temporary:
            shutil.rmtree(self.directory, ignore_errors=True)

    def feed(self, data: bytes) -> Replayed:
        """One message read in a block, or a frame message. Yields the messages to decode
        in its place: nothing while a transaction is being streamed, the whole transaction
        (Begin .. Commit) at its Stream Commit."""
        try:
            return self._feed(data)
        except OSError as exc:  # e.g. the disk is full: say where and what to do
            raise TerminalError(
                f"cannot keep a streamed transaction under {self.directory}: {exc}",
                hint="free space there, or set source.streaming: off (the server then holds "
                "large transactions until their commit)",
            ) from exc

    def _feed(self, data: bytes) -> Replayed:
        if self._block is not None and data[0] not in STREAM_KINDS:
            self._append(self._block, data)
            return iter(())
        msg = decode(data)
        t = type(msg)
        if self._block is not None and t is not StreamStop:
            raise TerminalError(f"pgoutput: {t.__name__} inside the stream block of {self._block}")
        if t is StreamStart:
            assert isinstance(msg, StreamStart)
            self._start(msg)
        elif t is StreamStop:
            self._close_block()
        elif t is StreamAbort:
            assert isinstance(msg, StreamAbort)
            self._abort(msg)
        elif t is StreamCommit:
            assert isinstance(msg, StreamCommit)
            return self._replay(msg)
        else:
            raise TerminalError(f"pgoutput: {t.__name__} where a stream message was expected")
        return iter(())

    def _start(self, msg: StreamStart) -> None:
        spool = self._open.get(msg.xid)
        if spool is None or msg.first_segment:
            spool = self._open[msg.xid] = _Spool(self.directory / f"{msg.xid}{SPOOL_SUFFIX}")
            mode = "wb"  # a first segment starts the transaction afresh
        else:
            mode = "ab"
        self._block = msg.xid
        self._out = spool.path.open(mode, buffering=_BUFFER)

    def _append(self, top: int, data: bytes) -> None:
        xid, plain = split_streamed(data)
        spool = self._open[top]
        out = self._out
        assert out is not None
        out.write(_RECORD.pack(top if xid is None else xid, len(plain)))
        out.write(plain)
        spool.messages += 1
        spool.size += len(plain)
        self.stats.messages_spooled += 1
        self.stats.bytes_spooled += len(plain)

    def _close_block(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        self._block = None

    def _abort(self, msg: StreamAbort) -> None:
        spool = self._open.get(msg.xid)
        if spool is None:  # nothing of it was streamed in this session
            return
        if msg.subxid != msg.xid:
            spool.aborted.add(msg.subxid)
            self.stats.subtransactions_aborted += 1
            return
        del self._open[msg.xid]
        spool.path.unlink(missing_ok=True)
        self.stats.aborted += 1
        log.info(
            "streamed transaction %d rolled back (%d messages discarded)", msg.xid, spool.messages
        )

    def _replay(self, msg: StreamCommit) -> Replayed:
        spool = self._open.pop(msg.xid, None)
        if spool is None:
            # Every transaction streamed in a session starts with its first segment there:
            # a commit without it means changes this reader never saw. Never guess.
            raise TerminalError(
                f"pgoutput: Stream Commit of transaction {msg.xid} that this replication "
                "session never streamed"
            )
        self.stats.committed += 1
        log.debug("replaying streamed transaction %d: %d messages, %d bytes",
                  msg.xid, spool.messages, spool.size)  # fmt: skip
        return self._messages(msg, spool, self.raw_rows)

    @staticmethod
    def _messages(msg: StreamCommit, spool: _Spool, raw_rows: bool) -> Replayed:
        yield Begin(msg.commit_lsn, msg.commit_ts, msg.xid), 0
        try:
            with spool.path.open("rb", buffering=_BUFFER) as f:
                aborted, read, head = spool.aborted, f.read, _RECORD.unpack
                while header := read(_RECORD.size):
                    xid, n = head(header)
                    data = read(n)
                    if len(header) != _RECORD.size or len(data) != n:
                        raise TerminalError(
                            f"spool file {spool.path} of transaction {msg.xid} is cut short"
                        )
                    if xid not in aborted:
                        yield (data if raw_rows and data[0] in _ROW_KINDS else decode(data)), n
        finally:
            spool.path.unlink(missing_ok=True)
        yield Commit(msg.flags, msg.commit_lsn, msg.end_lsn, msg.commit_ts), 0
