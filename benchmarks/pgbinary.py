"""pgoutput text vs binary values: what decoding one change costs in the driver (issue 23).

    .venv/bin/python -m benchmarks.pgbinary --rows 200000 --repeat 5

PostgreSQL 14+ can send tuple values in their binary (``send``) format instead of text
(``START_REPLICATION ... (binary 'true')``). This measures only the driver's side, on the
benchmark's mixed table (``workloads.narrow_table``: bigint, bigint, int, text,
numeric(12,2), timestamptz, double, boolean): Insert messages built here in both formats with
the same values, then for each format ``pgoutput.decode`` plus the per-row conversion into
engine values. Text uses the engine's converters (``sources.postgres.types.RowConverter``);
binary uses prototype converters written here (struct unpacking; numeric from its base-10000
digits). Both outputs are checked equal before timing. Best of ``--repeat`` in CPU time of
this process (one thread).
Server-side cost and wire size are not part of it.
"""

from __future__ import annotations

import argparse
import gc
import random
import struct
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from replicator.sources.postgres.pgoutput import decode
from replicator.sources.postgres.types import (
    RowConverter,
    decimal_converter,
    to_bool,
    to_timestamptz,
)

NAMES = ("id", "txn", "a", "b", "c", "d", "e", "f")
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_Q, _I, _D = struct.Struct(">q"), struct.Struct(">i"), struct.Struct(">d")
_NUMERIC_HEAD = struct.Struct(">hhHH")
_NUMERIC_NEG = 0x4000


def _values(n: int, seed: int = 7) -> list[tuple[Any, ...]]:
    rnd = random.Random(seed)
    words = ["alpine", "anchor", "basalt", "cedar", "copper", "delta", "ember", "fable"]
    out = []
    for i in range(n):
        cents = rnd.randrange(-10**9, 10**9)
        out.append((
            i, i // 10, rnd.randrange(-(2**31), 2**31), " ".join(rnd.sample(words, 3)),
            Decimal(cents).scaleb(-2), _PG_EPOCH + timedelta(microseconds=rnd.randrange(0, 10**15)),
            rnd.random() * 1e6, rnd.random() < 0.5,
        ))  # fmt: skip
    return out


# -- encoders (what the server sends) ------------------------------------------------------------


def _text(row: tuple[Any, ...]) -> list[bytes]:
    i, txn, a, b, c, d, e, f = row
    return [str(i).encode(), str(txn).encode(), str(a).encode(), b.encode(), str(c).encode(),
            d.isoformat(sep=" ").replace("+00:00", "+00").encode(), repr(e).encode(),
            b"t" if f else b"f"]  # fmt: skip


def _numeric_send(d: Decimal) -> bytes:
    sign, digits, exp = d.as_tuple()
    assert isinstance(exp, int)
    dscale = max(0, -exp)
    s = "".join(map(str, digits))
    # pad so the decimal point falls on a base-10000 boundary
    frac = -exp if exp < 0 else 0
    int_part, frac_part = (s[: len(s) - frac] or "0"), s[len(s) - frac :] if frac else ""
    int_part = int_part.lstrip("0") or ""
    int_groups: list[int] = []
    while int_part:
        int_groups.insert(0, int(int_part[-4:]))
        int_part = int_part[:-4]
    frac_part += "0" * (-len(frac_part) % 4)
    frac_groups = [int(frac_part[k : k + 4]) for k in range(0, len(frac_part), 4)]
    groups = int_groups + frac_groups
    weight = len(int_groups) - 1
    while groups and groups[-1] == 0:
        groups.pop()
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    head = _NUMERIC_HEAD.pack(len(groups), weight if groups else 0, _NUMERIC_NEG if sign else 0, dscale)
    return head + b"".join(struct.pack(">h", g) for g in groups)


def _binary(row: tuple[Any, ...]) -> list[bytes]:
    i, txn, a, b, c, d, e, f = row
    micros = (d - _PG_EPOCH) // timedelta(microseconds=1)
    return [_Q.pack(i), _Q.pack(txn), _I.pack(a), b.encode(), _numeric_send(c), _Q.pack(micros),
            _D.pack(e), b"\x01" if f else b"\x00"]  # fmt: skip


def _insert(values: list[bytes], kind: bytes) -> bytes:
    out = [b"I", struct.pack(">I", 16400), b"N", struct.pack(">h", len(values))]
    for v in values:
        out.append(kind + struct.pack(">i", len(v)) + v)
    return b"".join(out)


# -- binary converters (prototypes) ---------------------------------------------------------------


def _int8(b: bytes) -> int:
    return _Q.unpack(b)[0]  # type: ignore[no-any-return]


def _int4(b: bytes) -> int:
    return _I.unpack(b)[0]  # type: ignore[no-any-return]


def _float8(b: bytes) -> float:
    return _D.unpack(b)[0]  # type: ignore[no-any-return]


def _text_value(b: bytes) -> str:
    return b.decode()


def _bool(b: bytes) -> bool:
    return b == b"\x01"


def _timestamptz(b: bytes, _delta: type[timedelta] = timedelta) -> datetime:
    return _PG_EPOCH + _delta(0, 0, _Q.unpack(b)[0])  # positional: 4x faster than microseconds=


def _numeric(scale: int) -> Callable[[bytes], Decimal]:
    def convert(b: bytes) -> Decimal:
        ndigits, weight, sign, _dscale = _NUMERIC_HEAD.unpack_from(b)
        if sign not in (0, _NUMERIC_NEG):
            raise ValueError("numeric NaN/Infinity has no decimal representation")
        n = 0
        for g in struct.unpack_from(f">{ndigits}h", b, 8):
            n = n * 10000 + g
        shift = (weight - ndigits + 1) * 4 + scale  # n * 10**shift units of 10**-scale
        if shift >= 0:
            n *= 10**shift
        else:
            n, rest = divmod(n, 10**-shift)
            if rest:
                raise ValueError(f"numeric does not fit scale {scale}")
        return Decimal(-n if sign else n).scaleb(-scale)

    return convert


BINARY_CONVERTERS: list[Callable[[bytes], Any]] = [_int8, _int8, _int4, _text_value, _numeric(2), _timestamptz, _float8, _bool]
KINDS = ("bigint", "bigint", "integer", "text", "numeric(12,2)", "timestamptz", "double", "boolean")


def _rows(msgs: list[bytes], conv: RowConverter) -> list[dict[str, Any]]:
    out = []
    for m in msgs:
        out.append(conv.convert(decode(m).new))  # type: ignore[union-attr]
    return out


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        gc.disable()  # the cyclic collector's passes over the built rows are noise here
        try:
            t0 = time.process_time()  # CPU time: the machine is shared, wall time moves with load
            fn()
            best = min(best, time.process_time() - t0)
        finally:
            gc.enable()
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    rows = _values(args.rows)
    text_msgs = [_insert(_text(r), b"t") for r in rows]
    binary_msgs = [_insert(_binary(r), b"b") for r in rows]
    text_conv = RowConverter(NAMES, [int, int, int, None, decimal_converter(12, 2), to_timestamptz, float, to_bool])
    binary_fast = _bytes_converter(BINARY_CONVERTERS)
    text_out, binary_out = _rows(text_msgs, text_conv), [binary_fast(decode(m).new) for m in binary_msgs]  # type: ignore[union-attr]
    assert text_out == binary_out, "text and binary decode to different values"
    decode_text = _best(lambda: [decode(m) for m in text_msgs], args.repeat)
    decode_binary = _best(lambda: [decode(m) for m in binary_msgs], args.repeat)
    full_text = _best(lambda: _rows(text_msgs, text_conv), args.repeat)
    full_binary = _best(lambda: [binary_fast(decode(m).new) for m in binary_msgs], args.repeat)  # type: ignore[union-attr]
    n = args.rows
    size_t = sum(map(len, text_msgs)) / n
    size_b = sum(map(len, binary_msgs)) / n
    print(f"{n:,} Insert messages of the mixed table, best of {args.repeat}:")
    print(f"  message size       text {size_t:6.1f} B    binary {size_b:6.1f} B")
    print(f"  decode only        text {n / decode_text:10,.0f}/s  binary {n / decode_binary:10,.0f}/s")
    print(f"  decode + convert   text {n / full_text:10,.0f}/s  binary {n / full_binary:10,.0f}/s"
          f"  (binary/text {full_text / full_binary:.2f}x)")  # fmt: skip
    text_vals = [decode(m).new for m in text_msgs]  # type: ignore[union-attr]
    binary_vals = [decode(m).new for m in binary_msgs]  # type: ignore[union-attr]
    print("  per column, values converted per second (text -> binary):")
    for i, name in enumerate(NAMES):
        tc, bc = text_conv.converters[i], BINARY_CONVERTERS[i]
        tcol: list[Any] = [v[i] for v in text_vals]
        bcol: list[Any] = [v[i] for v in binary_vals]
        t = _best(lambda: [tc(x) for x in tcol] if tc is not None else list(tcol), args.repeat)  # noqa: B023
        b = _best(lambda: [bc(x) for x in bcol], args.repeat)  # noqa: B023
        print(f"    {name:4} {KINDS[i]:14} {n / t:12,.0f} -> {n / b:12,.0f}")


def _bytes_converter(converters: list[Callable[[bytes], Any]]) -> Callable[[Any], dict[str, Any]]:
    """The engine's row converter (``types._compile``: one generated dict literal), for
    ``bytes`` values instead of ``str``: the same per-row cost structure."""
    env: dict[str, Any] = {"bytes": bytes}
    items = []
    for i, (name, conv) in enumerate(zip(NAMES, converters, strict=True)):
        env[f"c{i}"] = conv
        items.append(f"{name!r}: v[{i}] if v[{i}].__class__ is not bytes else c{i}(v[{i}])")
    src = (f"def convert(v):\n    if len(v) != {len(NAMES)}:\n        raise ValueError('arity')\n"
           "    return {" + ", ".join(items) + "}\n")  # fmt: skip
    exec(compile(src, "<binary row converter>", "exec"), env)
    fn: Callable[[Any], dict[str, Any]] = env["convert"]
    return fn


if __name__ == "__main__":
    main()
