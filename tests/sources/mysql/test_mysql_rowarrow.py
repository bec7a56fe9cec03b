"""The compiled row-image decoder (rowarrow.py over replicator.native.binlog_rows) against the
reference: rowimage.py's values put into Arrow as blocks.py does (``column_array``). Row images
are generated for every supported column type (signed/unsigned, NULLs, charsets, fsp, decimal
layouts, multi-row events, updates that keep or move their key, deletes) and malformed ones
(random bytes, cut or extended bodies). For each event: the compiled decoder takes it exactly
when the reference does (the reference refuses: ``rowimage.Fallback``, a value ``column_array``
refuses, or a NULL key, which the row path decides), and then gives the same rows: op, before
key, after values (value and type)."""

from __future__ import annotations

import math
import random
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.events.block import BlockEvent
from replicator.events.model import Op, TableSchema
from replicator.sources.mysql.blocks import REFUSED, column_array
from replicator.sources.mysql.rowarrow import DELETE, INSERT, UPDATE, RowArrow, available
from replicator.sources.mysql.rowimage import Fallback, compile_table
from replicator.sources.mysql.types import ColumnDef, def_from_binlog, map_column

pytestmark = pytest.mark.skipif(not available(), reason="replicator.native is not built")

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_FSP_BYTES = (0, 1, 1, 2, 2, 3, 3)


class Col:
    """A mysql-replication table-map ``Column``: the attributes the decoders read."""

    def __init__(self, name: str, type: int, **kw: Any) -> None:  # noqa: A002
        self.name, self.type = name, type
        self.unsigned = False
        self.character_set_name: str | None = None
        self.max_length = 0
        self.length_size = 0
        self.precision = self.decimals = self.fsp = self.bits = self.bytes = self.size = None
        self.enum_values: list[str] | None = None
        self.set_values: list[str] | None = None
        self.__dict__.update(kw)


@dataclass(frozen=True)
class Kind:
    """One column type: its table-map column and how to generate a stored value."""

    type: int
    kw: tuple[tuple[str, Any], ...] = ()
    is_bool: bool = False
    is_json: bool = False

    def col(self, name: str) -> Col:
        return Col(name, self.type, **dict(self.kw))


def _k(type_: int, **kw: Any) -> Kind:
    flags = {k: kw.pop(k) for k in ("is_bool", "is_json") if k in kw}
    return Kind(type_, tuple(sorted(kw.items())), **flags)


_LABELS = ["", "a", "b", "é", "x,y"]
KINDS = [
    _k(1), _k(1, unsigned=True), _k(1, is_bool=True), _k(2), _k(2, unsigned=True),
    _k(9), _k(9, unsigned=True), _k(3), _k(3, unsigned=True), _k(8), _k(8, unsigned=True),
    _k(4), _k(5),
    *(_k(246, precision=p, decimals=s) for p, s in
      ((1, 0), (4, 4), (9, 0), (9, 9), (10, 0), (12, 2), (18, 9), (19, 1), (27, 18), (38, 0),
       (38, 38), (38, 10), (39, 2), (65, 30), (65, 0))),
    _k(15, max_length=100, character_set_name="utf8mb4"),
    _k(15, max_length=300, character_set_name="utf8mb4"),
    _k(254, max_length=30, character_set_name="latin1"),
    _k(15, max_length=40, character_set_name="ascii"),
    _k(15, max_length=40, character_set_name="koi8r"),
    _k(15, max_length=40, character_set_name="binary"),
    _k(254, max_length=6, character_set_name="binary"),
    *(_k(252, length_size=n, character_set_name=cs) for n in (1, 2, 3, 4) for cs in ("utf8mb4", "binary")),
    _k(252, length_size=4, character_set_name="utf8mb4", is_json=True),
    _k(255, length_size=4, character_set_name="binary"),
    _k(10), _k(13),
    *(_k(t, fsp=f) for t in (18, 17, 19) for f in range(7)),
    _k(247, size=1, enum_values=_LABELS), _k(247, size=2, enum_values=[""] + [f"v{i}" for i in range(300)]),
    _k(248, size=1, set_values=["a", "b", "c"]), _k(248, size=8, set_values=[f"m{i}" for i in range(64)]),
    *(_k(16, bits=b, bytes=(b + 7) // 8) for b in (1, 7, 63, 64)),
]  # fmt: skip
_TEXT = "aé😀𝄞'\\\" x{}[]:,\n\t\u00ff"


def _text(rng: random.Random, kind: Kind, limit: int) -> bytes:
    """A stored string: mostly valid text of the charset, sometimes any bytes."""
    cs = dict(kind.kw).get("character_set_name")
    n = rng.randint(0, limit)
    if cs == "binary" or rng.random() < 0.1:
        return rng.randbytes(n)
    if kind.is_json:
        return rng.choice(['{"a": [1, 2.50, "x y"],  "n" : null}', '[ ]', '"a \\" b"', '" open',
                           ' { "k":"\\\\" } ']).encode()  # fmt: skip
    codec = {"latin1": "cp1252", "ascii": "ascii", "koi8r": "koi8_r"}.get(str(cs), "utf-8")
    text = "".join(rng.choice(_TEXT) for _ in range(n))
    return text.encode(codec, "ignore")[:limit]


def _decimal(rng: random.Random, p: int, s: int) -> bytes:
    integral = p - s
    segs = [(b, d) for b, d in [(_DIG2BYTES[integral % 9], integral % 9)] if b]
    segs += [(4, 9)] * (integral // 9) + [(4, 9)] * (s // 9)
    segs += [(b, d) for b, d in [(_DIG2BYTES[s % 9], s % 9)] if b]
    out = b""
    for nbytes, digits in segs:
        v = rng.choice([0, 10**digits - 1, rng.randrange(10**digits)])
        if rng.random() < 0.05:
            v = rng.randrange(1 << (8 * nbytes))  # a group out of its digits' range
        out += v.to_bytes(nbytes, "big")
    raw = bytearray(out)
    if rng.random() < 0.5:
        raw[0] |= 0x80  # >= 0
    else:
        raw = bytearray(b ^ 0xFF for b in raw)
        raw[0] &= 0x7F
    return bytes(raw)


def _datetime2(rng: random.Random, fsp: int) -> bytes:
    y, m, d = rng.randint(0, 10000), rng.randint(0, 13), rng.randint(0, 31)
    h, mi, s = rng.randint(0, 25), rng.randint(0, 61), rng.randint(0, 61)
    if rng.random() < 0.7:
        y, m, d, h, mi, s = rng.randint(1, 9999), rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)  # fmt: skip
    v = (1 << 39) | ((y * 13 + m) << 22) | (d << 17) | (h << 12) | (mi << 6) | s
    n = _FSP_BYTES[fsp]
    frac = rng.randrange(1 << (8 * n)) if n else 0
    if n and rng.random() < 0.8:
        frac = rng.randrange(10 ** (2 * n)) if fsp % 2 == 0 else rng.randrange(10 ** (2 * n - 1)) * 10
    return v.to_bytes(5, "big") + frac.to_bytes(n, "big")


def _value(rng: random.Random, kind: Kind) -> bytes:
    kw = dict(kind.kw)
    t = kind.type
    if t in (1, 2, 3, 8, 9):
        return rng.randbytes({1: 1, 2: 2, 3: 4, 8: 8, 9: 3}[t])
    if t == 4:
        return struct.pack("<f", rng.choice([0.0, -0.0, 1.5, rng.uniform(-1e30, 1e30)])) if rng.random() < 0.8 else rng.randbytes(4)
    if t == 5:
        return struct.pack("<d", rng.choice([0.0, -0.0, 5e-324, rng.uniform(-1e300, 1e300)])) if rng.random() < 0.8 else rng.randbytes(8)
    if t == 246:
        return _decimal(rng, kw["precision"], kw["decimals"])
    if t in (15, 254):
        size = 2 if kw["max_length"] > 255 else 1
        data = _text(rng, kind, min(kw["max_length"], 300))
        return len(data).to_bytes(size, "little") + data
    if t in (252, 255):
        size = kw["length_size"]
        data = _text(rng, kind, min((1 << (8 * size)) - 1, 400))
        return len(data).to_bytes(size, "little") + data
    if t == 10:
        if rng.random() < 0.7:
            y, m, d = rng.randint(1, 9999), rng.randint(1, 12), rng.randint(1, 31)
        else:
            y, m, d = rng.randint(0, 32767), rng.randint(0, 15), rng.randint(0, 31)
        return ((y << 9) | (m << 5) | d).to_bytes(3, "little")
    if t == 18:
        return _datetime2(rng, kw["fsp"])
    if t == 17:
        n = _FSP_BYTES[kw["fsp"]]
        secs = rng.choice([0, 1, rng.randrange(1 << 31), rng.randrange(1 << 32)])
        return secs.to_bytes(4, "big") + (rng.randrange(1 << (8 * n)) if n else 0).to_bytes(n, "big")
    if t == 19:
        n = (kw["fsp"] + 1) // 2
        return rng.randrange(1 << (8 * (3 + n))).to_bytes(3 + n, "big")
    if t == 13:
        return rng.randbytes(1)
    if t == 247:
        labels = len(kw["enum_values"])
        return rng.randrange(labels + 2).to_bytes(kw["size"], "little")
    if t == 248:
        return rng.randbytes(kw["size"])
    if t == 16:
        return rng.randbytes(kw["bytes"])
    raise AssertionError(t)


def _image(rng: random.Random, kinds: list[Kind], keys: set[int], p_null: float) -> bytes:
    nulls = [i not in keys and rng.random() < p_null for i in range(len(kinds))]
    if keys and rng.random() < 0.03:
        nulls[next(iter(keys))] = True  # a NULL key: the row path decides
    bitmap = bytearray((len(kinds) + 7) // 8)
    for i, null in enumerate(nulls):
        if null:
            bitmap[i >> 3] |= 1 << (i & 7)
    return bytes(bitmap) + b"".join(_value(rng, k) for k, null in zip(kinds, nulls, strict=True) if not null)


def _table(kinds: list[Kind], key_idx: list[int]) -> tuple[list[Col], list[ColumnDef], TableSchema]:
    cols = [k.col(f"c{i}") for i, k in enumerate(kinds)]
    defs = [def_from_binlog(c, is_bool=k.is_bool, is_json=k.is_json) for c, k in zip(cols, kinds, strict=True)]
    key = tuple(defs[i].name for i in key_idx)
    specs = tuple(map_column(d, key=d.name in key).spec for d in defs)
    return cols, defs, TableSchema(table="db.t", columns=specs, key_columns=key)


def _reference(kinds: list[Kind], cols: list[Col], defs: list[ColumnDef], schema: TableSchema,
               body: bytes, kind: int) -> list[tuple[Any, ...]] | None:  # fmt: skip
    """rowimage.py's rows as (op, before key, after row), or None: refused (Fallback, a
    value Arrow's block refuses, a NULL key)."""
    decoder = compile_table(cols, defs)
    assert decoder is not None
    try:
        rows = decoder.rows(body, 2 if kind == UPDATE else 1)
    except Fallback:
        return None
    if not rows:
        return None
    key = schema.key_columns
    if any(img[k] is None for r in rows for img in r for k in key):
        return None
    out: list[tuple[Any, ...]] = []
    for r in rows:
        if kind == INSERT:
            out.append(("c", None, r[0]))
        elif kind == UPDATE:
            out.append(("u", tuple(r[0][k] for k in key), r[1]))
        else:
            out.append(("d", tuple(r[0][k] for k in key), None))
    # What goes into the block: the new rows' columns, the old rows' keys (the rest of an old
    # row is only decoded).
    news = [r[-1] for r in rows] if kind != DELETE else []
    olds = [r[0] for r in rows] if kind != INSERT else []
    try:
        for spec in schema.columns:
            for imgs in (news, olds if spec.name in key else []):
                if imgs and column_array([img[spec.name] for img in imgs], spec.type) is None:
                    return None
    except REFUSED:
        return None
    return out


def _compiled(arrow: RowArrow, schema: TableSchema, body: bytes, kind: int) -> list[tuple[Any, ...]] | None:
    n = arrow.append(body, kind)
    if n < 0:
        assert arrow.rows == 0
        return None
    block, op = arrow.finish()
    ev = BlockEvent("db.t", schema, block, 0, n, "mysql", ("f", 4), 0, op, 0, "tx", True)
    key = schema.key_columns
    out: list[tuple[Any, ...]] = []
    for e in ev.events():
        after = None if e.after is None else dict(e.after)
        if e.op is Op.CREATE:
            out.append(("c", None, after))
        elif e.op is Op.UPDATE:
            src = e.before if e.before is not None else after
            assert src is not None
            out.append(("u", tuple(src[k] for k in key), after))
        else:
            assert e.before is not None
            out.append(("d", tuple(e.before[k] for k in key), None))
    return out


def _typed(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _typed(x) for k, x in v.items()}
    if isinstance(v, tuple | list):  # lists too: a NaN in one is not equal to another NaN
        return (type(v).__name__, tuple(_typed(x) for x in v))
    if isinstance(v, float) and math.isnan(v):
        return ("float", "nan")
    if isinstance(v, float):
        return ("float", v, math.copysign(1.0, v))
    if isinstance(v, Decimal):
        return ("Decimal", str(v))
    if hasattr(v, "tzinfo"):
        return (type(v).__name__, v, getattr(v, "tzinfo", None))
    return (type(v).__name__, v)


def _check(seed: int) -> tuple[bool, bool]:
    rng = random.Random(seed)
    kinds = [rng.choice(KINDS) for _ in range(rng.randint(1, 7))]
    key_idx = sorted(rng.sample(range(len(kinds)), rng.randint(1, min(2, len(kinds)))))
    cols, defs, schema = _table(kinds, key_idx)
    arrow = RowArrow.build(cols, defs, schema, key_idx)
    assert arrow is not None, [k.type for k in kinds]
    kind = rng.choice([INSERT, UPDATE, DELETE])
    p_null = rng.choice([0.0, 0.2, 0.7])
    keys = set(key_idx)
    images = []
    for _ in range(rng.choice([1, 1, 2, 5, 20])):
        images.append(_image(rng, kinds, keys, p_null))
        if kind == UPDATE:  # the after image: the key kept (mostly) or moved
            after = _image(rng, kinds, keys, p_null)
            images.append(after if rng.random() < 0.3 else _keep_key(rng, images[-1], after, kinds, keys))
    body = b"".join(images)
    mutate = rng.random()
    if mutate < 0.05:
        body = body[: rng.randrange(len(body) + 1)]
    elif mutate < 0.1:
        body += rng.randbytes(rng.randint(1, 3))
    elif mutate < 0.15 and body:
        i = rng.randrange(len(body))
        body = body[:i] + bytes([rng.randrange(256)]) + body[i + 1 :]
    want = _reference(kinds, cols, defs, schema, body, kind)
    got = _compiled(arrow, schema, body, kind)
    assert (got is None) == (want is None), (seed, want, got)
    if want is not None:
        assert got is not None
        assert _typed(got) == _typed(want), seed
    return want is not None, kind == UPDATE and want is not None


def _keep_key(rng: random.Random, before: bytes, after: bytes, kinds: list[Kind], keys: set[int]) -> bytes:
    """``after`` with ``before``'s key values (both images without NULL keys), by re-encoding:
    the images are regenerated from the same seed values, so splice per column."""
    b_vals, a_vals = _split(before, kinds), _split(after, kinds)
    if b_vals is None or a_vals is None:
        return after
    bitmap_b, vals_b = b_vals
    bitmap_a, vals_a = a_vals
    out = bytearray(bitmap_a)
    for i in keys:  # the key's NULL bit too
        out[i >> 3] = (out[i >> 3] & ~(1 << (i & 7))) | (bitmap_b[i >> 3] & (1 << (i & 7)))
    parts = [vals_b[i] if i in keys else vals_a[i] for i in range(len(kinds))]
    return bytes(out) + b"".join(p for p in parts if p is not None)


def _split(image: bytes, kinds: list[Kind]) -> tuple[bytes, list[bytes | None]] | None:
    """An image's bitmap and each column's stored bytes (None: NULL)."""
    nb = (len(kinds) + 7) // 8
    bitmap, off, out = image[:nb], nb, []
    for i, k in enumerate(kinds):
        if bitmap[i >> 3] >> (i & 7) & 1:
            out.append(None)
            continue
        n = _width(k, image, off)
        out.append(image[off : off + n])
        off += n
    return (bitmap, out) if off == len(image) else None


def _width(kind: Kind, b: bytes, off: int) -> int:
    kw = dict(kind.kw)
    t = kind.type
    fixed = {1: 1, 2: 2, 3: 4, 8: 8, 9: 3, 4: 4, 5: 8, 10: 3, 13: 1}
    if t in fixed:
        return fixed[t]
    if t == 246:
        p, s = kw["precision"], kw["decimals"]
        i = p - s
        return _DIG2BYTES[i % 9] + 4 * (i // 9 + s // 9) + _DIG2BYTES[s % 9]
    if t in (15, 254):
        size = 2 if kw["max_length"] > 255 else 1
        return size + int.from_bytes(b[off : off + size], "little")
    if t in (252, 255):
        size = kw["length_size"]
        return size + int.from_bytes(b[off : off + size], "little")
    if t == 18:
        return 5 + _FSP_BYTES[kw["fsp"]]
    if t == 17:
        return 4 + _FSP_BYTES[kw["fsp"]]
    if t == 19:
        return 3 + (kw["fsp"] + 1) // 2
    if t in (247, 248):
        return int(kw["size"])
    if t == 16:
        return int(kw["bytes"])
    raise AssertionError(t)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_compiled_decoder_equals_rowimage_and_blocks(seed: int) -> None:
    _check(seed)


def test_every_kind_decodes_and_refuses_like_the_reference() -> None:
    """Many seeds per run, so that every kind is taken and refused somewhere."""
    taken = refused = moved = 0
    for seed in range(3000):
        ok, upd = _check(seed)
        taken += ok
        refused += not ok
        moved += upd
    assert taken > 800 and refused > 300 and moved > 100


def test_a_group_of_events_and_a_refused_one_in_between() -> None:
    """Events appended one after another form one block; a refused event leaves nothing
    behind; the block's ops and old keys say which row is which."""
    kinds = [_k(3), _k(15, max_length=100, character_set_name="utf8mb4"), _k(10)]
    cols, defs, schema = _table(kinds, [0])
    arrow = RowArrow.build(cols, defs, schema, [0])
    assert arrow is not None

    def row(k: int, text: bytes, day: int = (2024 << 9) | (5 << 5) | 17) -> bytes:
        return b"\x00" + struct.pack("<i", k) + bytes([len(text)]) + text + day.to_bytes(3, "little")

    assert arrow.append(row(1, b"a") + row(2, b"b"), INSERT) == 2
    assert arrow.append(row(3, b"c", day=0), INSERT) == -1  # a zero date
    assert arrow.append(row(2, b"b") + row(2, b"bb") + row(1, b"a") + row(7, b"a"), UPDATE) == 2
    assert arrow.append(row(2, b"\xff"), DELETE) == -1  # not UTF-8
    assert arrow.append(row(7, b"a"), DELETE) == 1
    block, op = arrow.finish()
    assert op is Op.UPDATE and block.ops is not None and block.old is not None
    assert block.ops.to_pylist() == ["c", "c", "u", "u", "d"]
    assert block.table.column("c0").to_pylist() == [1, 2, 2, 7, None]
    assert block.old.table.column("c0").to_pylist() == [None, None, None, 1, 7]
    assert arrow.rows == 0
    assert arrow.append(row(5, b"x"), INSERT) == 1
    block, op = arrow.finish()
    assert op is Op.CREATE and block.ops is None and block.old is None


def test_unsupported_charsets_and_types_get_no_builder() -> None:
    for kind in (_k(15, max_length=10, character_set_name="sjis"), _k(245, length_size=4),
                 _k(15, max_length=10, character_set_name="ucs2"), _k(12)):  # fmt: skip
        col = kind.col("c1")
        try:
            d = def_from_binlog(col)
            spec = map_column(d).spec
        except ValueError:
            continue
        key = Col("id", 3)
        schema = TableSchema(table="db.t", columns=(map_column(def_from_binlog(key), key=True).spec, spec),
                             key_columns=("id",))  # fmt: skip
        assert RowArrow.build([key, col], [def_from_binlog(key), d], schema, [0]) is None


def test_the_decoders_in_use_are_described(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the log and ``replicator status`` say: compiled, or Python and why."""
    from types import SimpleNamespace

    from replicator import native
    from replicator.cli.source_status import format_decoders
    from replicator.sources.mysql.rowarrow import describe_decoders

    assert describe_decoders("fast", 1).startswith("binlog rows: compiled, into blocks")
    assert "snapshot chunks: compiled" in describe_decoders("fast", 1)
    assert "change_blocks: 0" in describe_decoders("fast", 0)
    assert "row_decoder: library" in describe_decoders("library", 1)
    monkeypatch.setitem(native._loaded, "binlog_rows", None)
    monkeypatch.setitem(native._loaded, "text_rows", None)
    monkeypatch.setitem(native._why, "binlog_rows", "No module named x")
    said = describe_decoders("fast", 1)
    assert "Python, row by row" in said and "not built: No module named x" in said
    assert "snapshot chunks: Python (numpy" in said
    cfg = SimpleNamespace(source=SimpleNamespace(type="mysql", row_decoder="fast", change_blocks=1))
    assert format_decoders(cfg).startswith("source decoders: binlog rows: Python")  # type: ignore[arg-type, union-attr]
    assert format_decoders(SimpleNamespace(source=SimpleNamespace(type="postgres"))) is None  # type: ignore[arg-type]
