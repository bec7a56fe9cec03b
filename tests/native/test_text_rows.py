"""The compiled text-protocol framing and split (replicator.native.text_rows) against the
pure-Python ones of sources/mysql/rawchunk.py: generated result sets (NULLs, 1/2/3/8-byte
length codes, empty values, sequence ids wrapping, 16 MiB continuations, malformed rows), fed
in random pieces, give the same row payloads and the same columns, or the same refusal."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator import native

mod = native.load("text_rows")
pytestmark = pytest.mark.skipif(mod is None, reason="replicator.native is not built")


def _lenc(rng: random.Random, value: bytes | None) -> bytes:
    if value is None:
        return b"\xfb"
    n = len(value)
    form = rng.choice(["short", "u16", "u24", "u64"]) if n < 251 else rng.choice(["u16", "u24", "u64"])
    if form == "short":
        return bytes([n]) + value
    if form == "u16" and n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little") + value
    if form in ("u16", "u24") and n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little") + value
    return b"\xfe" + n.to_bytes(8, "little") + value


def _row(rng: random.Random, ncols: int) -> bytes:
    """A row packet's payload, sometimes malformed (but never an EOF or error packet: the
    framing reads those as the result's end, as pymysql does)."""
    values = [_lenc(rng, None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 1, 5, 300])))
              for _ in range(ncols)]  # fmt: skip
    out = b"".join(values)
    fault = rng.random()
    if fault < 0.02:
        cut = out[: rng.randrange(len(out) + 1)]
        out = cut if cut[:1] != b"\xfe" or len(cut) >= 9 else out
    elif fault < 0.04:
        out += b"\x01x"  # one value too many
    elif fault < 0.05 and ncols > 1:
        out = values[0] + b"\xff" + b"".join(values[1:])[1:]  # 0xFF opens a value
    return out


def _packets(payload: bytes, seq: int) -> tuple[bytes, int]:
    """A payload as wire packets (16 MiB pieces continued, as servers send it)."""
    out = b""
    while True:
        part, payload = payload[:0xFFFFFF], payload[0xFFFFFF:]
        out += len(part).to_bytes(3, "little") + bytes([seq]) + part
        seq = (seq + 1) & 0xFF
        if len(part) < 0xFFFFFF:
            return out, seq


def _python_columns(payloads: list[bytes], ncols: int) -> list[pa.Array] | None:
    """rawchunk.py's numpy split (``RawChunk.block`` without the typing)."""
    from replicator.sources.mysql.rawchunk import _text_array, _values

    buf = np.frombuffer(b"".join(payloads), dtype=np.uint8)
    lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
    off = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    ends = off + lengths
    out = []
    try:
        for _ in range(ncols):
            start, size, valid = _values(buf, off, ends)
            off = start + size
            out.append(_text_array(buf, start, size, valid, True))
        if not np.array_equal(off, ends):
            return None
    except (ValueError, IndexError):
        return None
    return out


def _compiled_columns(rows: object, n: int, ncols: int) -> list[pa.Array] | None:
    from replicator.sources.mysql.rawchunk import _text_from_buffers

    if not rows.split(ncols):  # type: ignore[attr-defined]
        return None
    return [_text_from_buffers(n, *rows.column(c), True) for c in range(ncols)]  # type: ignore[attr-defined]


def _feed(rng: random.Random, rows: object, wire: bytes) -> int:
    at, state = 0, mod.MORE
    while at < len(wire):
        step = rng.choice([1, 3, 4, 7, 100, 5000, len(wire)])
        state = rows.feed(wire[at : at + step])  # type: ignore[attr-defined]
        at += step
        if state != mod.MORE:
            break
    return state


def _check(seed: int) -> None:
    rng = random.Random(seed)
    ncols = rng.randint(1, 5)
    payloads = [_row(rng, ncols) for _ in range(rng.choice([1, 2, 10, 300]))]
    seq = rng.randrange(256)
    wire = b""
    s = seq
    for p in payloads:
        piece, s = _packets(p, s)
        wire += piece
    eof = b"\xfe\x00\x00\x22\x00"
    wire += len(eof).to_bytes(3, "little") + bytes([s]) + eof
    rows = mod.TextRows(seq)
    assert _feed(rng, rows, wire) == mod.DONE
    assert rows.last == eof and rows.seq == (s + 1) & 0xFF
    assert rows.rows == len(payloads) and [rows.payload(i) for i in range(rows.rows)] == payloads
    want = _python_columns(payloads, ncols)
    got = _compiled_columns(rows, len(payloads), ncols)
    assert (got is None) == (want is None), seed
    if want is not None:
        assert got is not None
        for a, b in zip(got, want, strict=True):
            assert a.equals(b), seed


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_compiled_framing_and_split_equal_the_python_ones(seed: int) -> None:
    _check(seed)


def test_many_seeds_split_and_refuse() -> None:
    for seed in range(400):
        _check(seed)


def test_a_payload_past_16_mib_is_continued() -> None:
    big = b"\xfe" + (0xFFFFFF + 10).to_bytes(8, "little") + b"z" * (0xFFFFFF + 10)
    wire, s = _packets(big, 5)
    wire += b"\x05\x00\x00" + bytes([s]) + b"\xfe\x00\x00\x02\x00"
    rows = mod.TextRows(5)
    assert rows.feed(wire) == mod.DONE
    assert rows.rows == 1 and rows.payload(0) == big and rows.split(1)
    _valid, nulls, _offsets, data = rows.column(0)
    assert nulls == 0 and data == b"z" * (0xFFFFFF + 10)


def test_errors_sequence_and_trailing_bytes() -> None:
    row = b"\x01a"
    rows = mod.TextRows(3)
    assert rows.feed(b"\x02\x00\x00\x03" + row + b"\x04\x00\x00\x04\xff\x10\x04#") == mod.ERROR
    assert rows.last == b"\xff\x10\x04#" and rows.rows == 1
    rows = mod.TextRows(3)
    assert rows.feed(b"\x02\x00\x00\x04" + row) == mod.BAD_SEQUENCE
    assert rows.bad_seq == 4 and rows.seq == 3
    rows = mod.TextRows(0)
    assert rows.feed(b"\x05\x00\x00\x00\xfe\x00\x00\x02\x00" + b"x") == mod.TRAILING
    rows = mod.TextRows(0)
    assert rows.feed(b"\x05\x00\x00\x00\xfe\x00\x00\x02\x00") == mod.DONE
    assert rows.feed(b"x") == mod.TRAILING
    with pytest.raises(IndexError):
        rows.payload(0)
