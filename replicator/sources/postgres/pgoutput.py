"""A pure decoder of ``pgoutput`` logical replication messages, protocol version 1, plus
version 2's streaming of in-progress transactions (PostgreSQL 14+).

No I/O: ``decode(data)`` turns the bytes of one message (the payload of an XLogData frame or
the ``data`` column of ``pg_logical_slot_peek_binary_changes``) into a frozen, typed
NamedTuple. Reference: PostgreSQL docs, "Logical Replication Message Formats".

Tuple data values are ``str`` (kind ``'t'``, text output of the type, decoded as UTF-8: the
server converts to the client encoding, which the source pins to UTF8), ``None`` (``'n'``),
``UNCHANGED_TOAST`` (``'u'``: an unchanged TOASTed value the server did not send) or ``bytes``
(``'b'``, only with the ``binary`` option, which the source does not use).

Streaming (protocol version 2, ``streaming 'on'``): a large transaction is sent while it runs,
in blocks between Stream Start ('S') and Stream Stop ('E'), interleaved with other transactions,
and ended by Stream Commit ('c') or Stream Abort ('A'). Inside a block every message but Origin
carries the (sub)transaction's xid right after its type byte: ``split_streamed`` takes it out,
leaving the bytes ``decode`` reads as version 1.

Speed: the hot path is ``_tuple``. An ASCII message (the common case) is decoded to ``str``
once and values are sliced out of it, saving one decode call per value; offsets are read
with precompiled ``struct.Struct.unpack_from`` on the original bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple, TypeAlias


class DecodeError(ValueError):
    """The bytes are not a well-formed pgoutput message."""


class _Unchanged:
    """Marker for an unchanged TOASTed column ('u'); the value was not sent."""

    _instance: _Unchanged | None = None

    def __new__(cls) -> _Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = _Unchanged()

TupleValue: TypeAlias = str | bytes | None | _Unchanged
TupleData: TypeAlias = tuple[TupleValue, ...]

# Microseconds between the Unix epoch and PostgreSQL's epoch (2000-01-01 UTC).
PG_EPOCH_US = 946_684_800_000_000


class Begin(NamedTuple):
    final_lsn: int  # LSN of the transaction's commit record
    commit_ts: int  # microseconds since 2000-01-01 UTC
    xid: int


class Commit(NamedTuple):
    flags: int
    commit_lsn: int
    end_lsn: int  # end of the commit record: where a restart may resume
    commit_ts: int


class Origin(NamedTuple):
    commit_lsn: int
    name: str


class RelationColumn(NamedTuple):
    flags: int  # 1 = part of the replica identity ("key")
    name: str
    type_oid: int
    typmod: int

    @property
    def is_key(self) -> bool:
        return bool(self.flags & 1)


class Relation(NamedTuple):
    relid: int
    namespace: str  # "" means pg_catalog
    name: str
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[RelationColumn, ...]


class Type(NamedTuple):
    oid: int
    namespace: str
    name: str


class Insert(NamedTuple):
    relid: int
    new: TupleData


class Update(NamedTuple):
    relid: int
    old_kind: str | None  # 'K' key columns only, 'O' full old row, None: not sent
    old: TupleData | None
    new: TupleData


class Delete(NamedTuple):
    relid: int
    old_kind: str  # 'K' or 'O'
    old: TupleData


class Truncate(NamedTuple):
    options: int  # 1 = CASCADE, 2 = RESTART IDENTITY
    relids: tuple[int, ...]


class Message(NamedTuple):
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


class StreamStart(NamedTuple):
    xid: int  # the top-level transaction the block belongs to
    first_segment: bool  # the transaction's first block


class StreamStop(NamedTuple):
    pass


class StreamCommit(NamedTuple):
    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


class StreamAbort(NamedTuple):
    xid: int  # top-level transaction
    subxid: int  # == xid: the whole transaction; else the one subtransaction rolled back


PgOutputMessage: TypeAlias = (
    Begin | Commit | Origin | Relation | Type | Insert | Update | Delete | Truncate | Message
    | StreamStart | StreamStop | StreamCommit | StreamAbort
)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">BQQq")
_REL_HEAD = struct.Struct(">I")
_COL_TAIL = struct.Struct(">Ii")
_TRUNC_HEAD = struct.Struct(">iB")
_MSG_HEAD = struct.Struct(">BQ")
_U64 = struct.Struct(">Q")
_STREAM_START = struct.Struct(">IB")
_STREAM_COMMIT = struct.Struct(">IBQQq")
_STREAM_ABORT = struct.Struct(">II")

_T, _N, _U, _B = ord("t"), ord("n"), ord("u"), ord("b")


def _cstring(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.find(b"\0", pos)
    if end < 0:
        raise DecodeError(f"unterminated string at offset {pos}")
    return buf[pos:end].decode(), end + 1


def _tuple(buf: bytes, pos: int, text: str | None) -> tuple[TupleData, int]:
    """TupleData at ``pos``. ``text`` is ``buf`` decoded when it is pure ASCII (same offsets)."""
    (ncols,) = _I16.unpack_from(buf, pos)
    pos += 2
    out: list[TupleValue] = []
    append = out.append
    unpack_len = _I32.unpack_from
    for _ in range(ncols):
        kind = buf[pos]
        if kind == _T:
            (n,) = unpack_len(buf, pos + 1)
            pos += 5
            append(text[pos : pos + n] if text is not None else buf[pos : pos + n].decode())
            pos += n
        elif kind == _N:
            append(None)
            pos += 1
        elif kind == _U:
            append(UNCHANGED_TOAST)
            pos += 1
        elif kind == _B:
            (n,) = unpack_len(buf, pos + 1)
            pos += 5
            append(buf[pos : pos + n])
            pos += n
        else:
            raise DecodeError(f"unknown tuple value kind {kind!r} at offset {pos}")
    # Slicing past the end silently shortens a value: one check here instead of one per value.
    if pos > len(buf):
        raise DecodeError(f"tuple data runs {pos - len(buf)} bytes past the end of the message")
    return tuple(out), pos


def _ascii(buf: bytes) -> str | None:
    return buf.decode("ascii") if buf.isascii() else None


def _begin(buf: bytes) -> Begin:
    return Begin(*_BEGIN.unpack_from(buf, 1))


def _commit(buf: bytes) -> Commit:
    return Commit(*_COMMIT.unpack_from(buf, 1))


def _origin(buf: bytes) -> Origin:
    (lsn,) = _U64.unpack_from(buf, 1)
    name, _ = _cstring(buf, 9)
    return Origin(lsn, name)


def _relation(buf: bytes) -> Relation:
    (relid,) = _REL_HEAD.unpack_from(buf, 1)
    namespace, pos = _cstring(buf, 5)
    name, pos = _cstring(buf, pos)
    identity = chr(buf[pos])
    (ncols,) = _I16.unpack_from(buf, pos + 1)
    pos += 3
    cols = []
    for _ in range(ncols):
        flags = buf[pos]
        colname, pos = _cstring(buf, pos + 1)
        oid, typmod = _COL_TAIL.unpack_from(buf, pos)
        pos += 8
        cols.append(RelationColumn(flags, colname, oid, typmod))
    return Relation(relid, namespace, name, identity, tuple(cols))


def _type(buf: bytes) -> Type:
    (oid,) = _U32.unpack_from(buf, 1)
    namespace, pos = _cstring(buf, 5)
    name, _ = _cstring(buf, pos)
    return Type(oid, namespace, name)


def _insert(buf: bytes) -> Insert:
    (relid,) = _U32.unpack_from(buf, 1)
    if buf[5] != 78:  # 'N'
        raise DecodeError(f"Insert: expected 'N', got {buf[5:6]!r}")
    new, _ = _tuple(buf, 6, _ascii(buf))
    return Insert(relid, new)


def _update(buf: bytes) -> Update:
    (relid,) = _U32.unpack_from(buf, 1)
    text = _ascii(buf)
    kind = buf[5]
    old_kind: str | None = None
    old: TupleData | None = None
    pos = 6
    if kind in (75, 79):  # 'K' / 'O'
        old_kind = chr(kind)
        old, pos = _tuple(buf, 6, text)
        kind = buf[pos]
        pos += 1
    if kind != 78:
        raise DecodeError(f"Update: expected 'N', got {chr(kind)!r}")
    new, _ = _tuple(buf, pos, text)
    return Update(relid, old_kind, old, new)


def _delete(buf: bytes) -> Delete:
    (relid,) = _U32.unpack_from(buf, 1)
    kind = buf[5]
    if kind not in (75, 79):
        raise DecodeError(f"Delete: expected 'K' or 'O', got {chr(kind)!r}")
    old, _ = _tuple(buf, 6, _ascii(buf))
    return Delete(relid, chr(kind), old)


def _truncate(buf: bytes) -> Truncate:
    nrel, options = _TRUNC_HEAD.unpack_from(buf, 1)
    relids = struct.unpack_from(f">{nrel}I", buf, 6)
    return Truncate(options, relids)


def _message(buf: bytes) -> Message:
    flags, lsn = _MSG_HEAD.unpack_from(buf, 1)
    prefix, pos = _cstring(buf, 10)
    (n,) = _I32.unpack_from(buf, pos)
    content = buf[pos + 4 : pos + 4 + n]
    if len(content) != n:
        raise DecodeError("Message: content runs past the end")
    return Message(bool(flags & 1), lsn, prefix, content)


def _stream_start(buf: bytes) -> StreamStart:
    xid, first = _STREAM_START.unpack_from(buf, 1)
    return StreamStart(xid, bool(first))


def _stream_stop(buf: bytes) -> StreamStop:
    return StreamStop()


def _stream_commit(buf: bytes) -> StreamCommit:
    return StreamCommit(*_STREAM_COMMIT.unpack_from(buf, 1))


def _stream_abort(buf: bytes) -> StreamAbort:
    # Version 4 (parallel apply, not requested) appends the abort LSN and time: ignored.
    return StreamAbort(*_STREAM_ABORT.unpack_from(buf, 1))


_DECODERS: dict[int, Callable[[bytes], PgOutputMessage]] = {
    ord("B"): _begin,
    ord("C"): _commit,
    ord("O"): _origin,
    ord("R"): _relation,
    ord("Y"): _type,
    ord("I"): _insert,
    ord("U"): _update,
    ord("D"): _delete,
    ord("T"): _truncate,
    ord("M"): _message,
    ord("S"): _stream_start,
    ord("E"): _stream_stop,
    ord("c"): _stream_commit,
    ord("A"): _stream_abort,
}

# Message types that carry no xid inside a stream block (Origin follows Stream Start as is).
_NO_STREAM_XID = frozenset(b"OSEcA")


def decode(data: bytes | bytearray | memoryview) -> PgOutputMessage:
    """Decode one pgoutput message (inside a stream block: after ``split_streamed``). Raises
    DecodeError on malformed input."""
    buf = data if type(data) is bytes else bytes(data)
    if not buf:
        raise DecodeError("empty message")
    fn = _DECODERS.get(buf[0])
    if fn is None:
        raise DecodeError(f"unknown pgoutput message type {chr(buf[0])!r}")
    try:
        return fn(buf)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise DecodeError(f"malformed {chr(buf[0])!r} message: {exc}") from exc


def split_streamed(data: bytes | bytearray | memoryview) -> tuple[int | None, bytes]:
    """A message read inside a stream block -> (its (sub)transaction xid, the message as
    version 1 sends it). Messages without an xid there (Origin) -> (None, the message)."""
    buf = data if type(data) is bytes else bytes(data)
    if not buf:
        raise DecodeError("empty message")
    if buf[0] in _NO_STREAM_XID:
        return None, buf
    if len(buf) < 5:
        raise DecodeError(f"streamed {chr(buf[0])!r} message too short for its xid")
    (xid,) = _U32.unpack_from(buf, 1)
    return xid, buf[:1] + buf[5:]


def lsn_to_str(lsn: int) -> str:
    """``0x16B3748`` -> ``'0/16B3748'`` (PostgreSQL's pg_lsn text form)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def str_to_lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)
