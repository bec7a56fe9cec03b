"""The compiled pgoutput split (replicator.native.pgoutput_rows) against the numpy one of
sources/postgres/change_block.py: generated runs of Insert, Update and Delete messages (nulls,
empty and non-UTF-8 values, old-key tuples with and without null keys, whole old rows,
unchanged TOAST, binary values, wrong column counts, cut, lengthened and flipped bytes) give
the same text columns, old keys and ops, or the same refusal; and ``change_block`` gives the
same typed block either way."""

from __future__ import annotations

import random
import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator import native
from replicator.sources.postgres import change_block as cb
from replicator.sources.postgres.types import RowConverter, TypeMapper

mod = native.load(cb.PGOUTPUT_ROWS)
pytestmark = pytest.mark.skipif(mod is None, reason="replicator.native is not built")

_TOAST, _BINARY = object(), object()


def _tuple(values: list[Any]) -> bytes:
    # Not pg_testkit.tuple_data: that one writes bytes as binary ('b') values; here text
    # values are raw bytes, so a tuple can carry text that is not UTF-8.
    out = [struct.pack(">h", len(values))]
    for v in values:
        if v is None:
            out.append(b"n")
        elif v is _TOAST:
            out.append(b"u")
        elif v is _BINARY:
            out.append(b"b" + struct.pack(">i", 2) + b"\x00\x01")
        else:
            out.append(b"t" + struct.pack(">i", len(v)) + v)
    return b"".join(out)


def _value(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.15:
        return None
    if r < 0.17:
        return _TOAST
    if r < 0.19:
        return _BINARY
    if r < 0.22:
        return b"\xff\xfe"  # not UTF-8
    return rng.choice([b"", b"1", b"-42", b"3.25", b"t", b"2024-03-04", "ünï".encode(), b"x" * 300])


def _message(rng: random.Random, ncols: int, keys: list[int], odd: float) -> bytes:
    def row() -> list[Any]:
        return [_value(rng) if rng.random() < odd else b"%d" % rng.randrange(99) for _ in range(ncols)]

    def old_key() -> list[Any]:
        vals: list[Any] = [None] * ncols
        for k in keys:
            vals[k] = None if rng.random() < odd / 4 else b"%d" % rng.randrange(99)
        return vals

    rel = struct.pack(">I", 16400)
    kind = rng.choice("IIUUUD")
    if kind == "I":
        msg = b"I" + rel + b"N" + _tuple(row())
    elif kind == "U":
        r = rng.random()
        old = b"K" + _tuple(old_key()) if r < 0.4 else b"O" + _tuple(row()) if r < 0.4 + odd / 4 else b""
        msg = b"U" + rel + old + b"N" + _tuple(row())
    else:
        msg = b"D" + rel + (b"O" + _tuple(row()) if rng.random() < odd / 4 else b"K" + _tuple(old_key()))
    if rng.random() < odd / 3:  # a column count off, or bytes cut, added or flipped
        cut = rng.choice(["count", "short", "long", "flip"])
        if cut == "count":
            msg = msg[:6] + struct.pack(">h", ncols + rng.choice([-1, 1])) + msg[8:]
        elif cut == "short":
            msg = msg[: rng.randrange(len(msg))]
        elif cut == "long":
            msg += rng.randbytes(rng.choice([1, 4]))
        else:
            i = rng.randrange(len(msg))
            msg = msg[:i] + bytes([rng.randrange(256)]) + msg[i + 1 :]
    return msg


def _same(a: list[pa.Array] | None, b: list[pa.Array] | None) -> bool:
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))


def _native(msgs: list[bytes], ncols: int, keys: tuple[int, ...]) -> cb.Split | None:
    assert mod is not None
    return cb._split_native(mod, msgs, ncols, keys)


def _numpy(msgs: list[bytes], ncols: int, keys: tuple[int, ...]) -> cb.Split | None:
    try:
        return cb._split_numpy(msgs, ncols, keys)
    except cb._FAILED:  # change_block refuses the run the same way
        return None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), n=st.integers(1, 40), ncols=st.integers(1, 9),
       nkeys=st.integers(0, 2), odd=st.sampled_from([0.0, 0.02, 0.3]))  # fmt: skip
def test_the_split_is_the_numpy_split(seed: int, n: int, ncols: int, nkeys: int, odd: float) -> None:
    rng = random.Random(seed)
    keys = tuple(sorted(rng.sample(range(ncols), min(nkeys, ncols))))
    msgs = [_message(rng, ncols, list(keys), odd) for _ in range(n)]
    got, want = _native(msgs, ncols, keys), _numpy(msgs, ncols, keys)
    assert (got is None) == (want is None)
    if got is None or want is None:
        return
    assert _same(got[0], want[0])
    assert _same(got[1], want[1])
    assert (got[2] is None) == (want[2] is None)
    assert got[2] is None or want[2] is None or got[2].equals(want[2])


def test_a_clean_run_is_split_and_a_bad_one_refused() -> None:
    rel = struct.pack(">I", 1)
    ins = b"I" + rel + b"N" + _tuple([b"1", None, "é".encode()])
    upd_key = b"U" + rel + b"K" + _tuple([b"7", None, None]) + b"N" + _tuple([b"8", b"x", b""])
    dele = b"D" + rel + b"K" + _tuple([b"9", None, None])
    got = _native([ins, upd_key, dele], 3, (0,))
    assert got is not None
    texts, old, ops = got
    assert [t.to_pylist() for t in texts] == [["1", "8", None], [None, "x", None], ["é", "", None]]
    assert old is not None and [o.to_pylist() for o in old] == [[None, "7", "9"]]
    assert ops is not None and ops.to_pylist() == ["c", "u", "d"]
    assert _native([ins, ins], 3, ()) is not None
    assert _native([ins, ins], 3, ())[2] is None  # type: ignore[index]  # one kind
    assert _native([ins, dele], 3, ()) is None  # an old key but no key columns
    assert _native([ins, b"D" + rel + b"K" + _tuple([None, None, None])], 3, (0,)) is None
    assert _native([ins, ins[:-1]], 3, ()) is None  # cut short
    assert _native([ins, ins + b"\x00"], 3, ()) is None  # bytes after the tuple
    assert _native([ins, b"I" + rel + b"N" + _tuple([b"1", _TOAST, b""])], 3, ()) is None


@pytest.mark.parametrize("seed", range(8))
def test_change_block_types_the_same_block_either_way(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # id bigint, n int, ts timestamptz, s text, c numeric(12,2), f float8, b bool
    oids = [(20, -1), (23, -1), (1184, -1), (25, -1), (1700, (12 << 16 | 2) + 4), (701, -1), (16, -1)]
    maps = [TypeMapper(None).column(f"c{i}", oid, typmod) for i, (oid, typmod) in enumerate(oids)]
    types = [m.spec.type for m in maps]
    rows = RowConverter([m.spec.name for m in maps], [m.convert for m in maps])
    rng = random.Random(seed)
    rel = struct.pack(">I", 1)

    def row(k: int) -> list[Any]:
        return [b"%d" % k, rng.choice([None, b"-5", b"2147483647"]),
                rng.choice([b"2024-03-04 05:06:07.123456+00", None]), rng.choice([b"a", "ü".encode(), b""]),
                rng.choice([b"1.50", b"-0.01", None]), rng.choice([b"1.5", b"-Infinity", b"1e-07"]),
                rng.choice([b"t", b"f", None])]  # fmt: skip

    msgs = []
    for k in range(rng.randrange(1, 60)):
        r = rng.random()
        if r < 0.5:
            msgs.append(b"I" + rel + b"N" + _tuple(row(k)))
        elif r < 0.8:
            msgs.append(b"U" + rel + b"K" + _tuple([b"%d" % (k + 1)] + [None] * 6) + b"N" + _tuple(row(k)))
        else:
            msgs.append(b"D" + rel + b"K" + _tuple([b"%d" % k] + [None] * 6))
    got = cb.change_block(msgs, rows, types, (0,))
    monkeypatch.setattr(cb, "_compiled", lambda: None)
    want = cb.change_block(msgs, rows, types, (0,))
    assert got is not None and want is not None
    assert got.after.equals(want.after)
    assert (got.ops is None and want.ops is None) or (got.ops is not None and got.ops.equals(want.ops))
    assert (got.old_keys is None and want.old_keys is None) or (
        got.old_keys is not None and want.old_keys is not None and got.old_keys.equals(want.old_keys)
    )
