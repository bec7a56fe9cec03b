"""The own row-image decoder (rowimage.py) against mysql-replication + RowConverter: the same
binlog read by two sources, one per decoder, gives identical events, value types included."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any

import pytest
from mysql_testkit import TestDb, drain, summary
from test_mysql_types import COLUMNS, EMPTY, ROW1

from replicator.checkpoint import Checkpoints
from replicator.sources.mysql import MySQLSource
from replicator.sources.mysql.rowimage import Fallback, compile_table
from replicator.sources.mysql.types import ColumnDef

pytestmark = pytest.mark.integration

NARROW = (
    "id BIGINT PRIMARY KEY, txn BIGINT, a INT, b VARCHAR(200), c DECIMAL(12,2), "
    "d DATETIME(6), e DOUBLE, f BOOLEAN"
)
DECIMALS = ((4, 4), (9, 0), (9, 9), (10, 0), (18, 9), (19, 1), (27, 18), (30, 5), (65, 0))
_TEXT = "aé😀𝄞'\\\"x \u00ff"
_LATIN = "aéÿ'x "


def _typed(v: Any) -> Any:
    """A value with its exact type (and time zone): 1 == True == Decimal(1) otherwise."""
    if isinstance(v, dict):
        return {k: _typed(x) for k, x in v.items()}
    if isinstance(v, datetime):
        return ("datetime", v, v.tzinfo)
    return (type(v).__name__, v)


def _typed_summary(events: Any) -> list[Any]:
    return [tuple(_typed(x) if isinstance(x, dict) else x for x in s) for s in summary(events)]


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(0, n))) or "0"


def _dec(rng: random.Random, p: int, s: int) -> str:
    sign = rng.choice(["", "-"])
    if rng.random() < 0.1:  # the extremes
        whole, frac = ("9" * (p - s) or "0", "9" * s) if rng.random() < 0.5 else ("0", "0" * s)
        return f"{sign}{whole}.{frac}" if s else f"{sign}{whole}"
    whole = _digits(rng, p - s)
    frac = _digits(rng, s) if s else ""
    return f"{sign}{whole}.{frac}" if s else f"{sign}{whole}"


def _ts(rng: random.Random, lo: datetime, hi: datetime) -> str:
    span = int((hi - lo).total_seconds())
    t = lo + timedelta(seconds=rng.randint(0, span), microseconds=rng.randint(0, 999_999))
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")


def _int(rng: random.Random, bits: int, unsigned: bool) -> int:
    lo, hi = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return rng.choice([lo, hi, 0, 1, -1 if not unsigned else 2, rng.randint(lo, hi)])


def _row(rng: random.Random, key: int) -> list[Any]:
    """A random alltypes row (parameters for _INSERT): no NULLs, some or many."""
    tm = rng.randint(-838 * 3600, 838 * 3600 + 59 * 60 + 59)
    vals: list[Any] = [
        key,
        rng.randint(-128, 127),
        rng.choice([0, 1]),
        _int(rng, 8, False),
        _int(rng, 8, True),
        _int(rng, 16, False),
        _int(rng, 16, True),
        _int(rng, 24, False),
        _int(rng, 24, True),
        _int(rng, 32, False),
        _int(rng, 32, True),
        _int(rng, 64, False),
        _int(rng, 64, True),
        _dec(rng, 10, 2),
        _dec(rng, 5, 0),
        _dec(rng, 38, 10),
        _dec(rng, 65, 30),
        rng.uniform(-1e30, 1e30),
        rng.choice([rng.uniform(-1e300, 1e300), 0.0, -0.0, 5e-324]),
        rng.randint(0, 1),
        rng.randint(0, 1023),
        _int(rng, 64, True),
        "".join(rng.choice(_TEXT) for _ in range(rng.randint(0, 5))),
        "".join(rng.choice(_TEXT) for _ in range(rng.choice([0, 1, 255, 256, 300]))),
        "".join(rng.choice(_TEXT) for _ in range(rng.randint(0, 3000))),
        "".join(rng.choice(_TEXT) for _ in range(rng.choice([0, 70000, 17]))),
        "".join(rng.choice(_LATIN) for _ in range(rng.randint(0, 10))),
        rng.randbytes(rng.randint(0, 4)),
        rng.randbytes(rng.randint(0, 10)),
        rng.randbytes(rng.choice([0, 1, 255, 256, 5000])),
        '{"k": [1, 2.50, "a b"],  "n": null}',
        rng.choice("xyz"),
        ",".join(rng.sample("abc", rng.randint(0, 3))),
        rng.choice([0, 1901, 2155, rng.randint(1901, 2155)]),
        date(1000, 1, 1) + timedelta(days=rng.randint(0, 3_287_181)),
        f"{'-' if tm < 0 else ''}{abs(tm) // 3600}:{abs(tm) // 60 % 60:02d}:{abs(tm) % 60:02d}"
        f".{rng.randint(0, 999):03d}",
        f"{rng.randint(0, 838)}:{rng.randint(0, 59)}:{rng.randint(0, 59)}",
        f"-0:0:{rng.randint(0, 59)}.{rng.randint(0, 999_999):06d}",
        _ts(rng, datetime(1000, 1, 1), datetime(9999, 12, 31, 23, 59, 59)),
        _ts(rng, datetime(1000, 1, 1), datetime(9999, 12, 31, 23, 59, 59)),
        _ts(rng, datetime(1000, 1, 1), datetime(9999, 12, 31, 23, 59, 59)),
        _ts(rng, datetime(1970, 1, 1, 0, 0, 1), datetime(2038, 1, 19, 3, 14, 6)),
        _ts(rng, datetime(1970, 1, 1, 0, 0, 1), datetime(2038, 1, 19, 3, 14, 6)),
        f"POINT({rng.uniform(-180, 180)} {rng.uniform(-90, 90)})",
    ]
    p_null = rng.choice([0.0, 0.15, 0.6])
    return [v if i == 0 or rng.random() >= p_null else None for i, v in enumerate(vals)]


_NAMES = re.findall(r"(?:^|,)\s*([a-z0-9_]+) [A-Z]", COLUMNS.strip())
_INSERT = (
    f"INSERT INTO alltypes ({', '.join(_NAMES)}) VALUES ("
    + ", ".join("ST_GeomFromText(%s)" if n == "g" else "%s" for n in _NAMES)
    + ")"
)


def _sources(
    db: TestDb, make_source: Callable[..., MySQLSource], tables: list[str], **kw: Any
) -> tuple[MySQLSource, MySQLSource]:
    fast = make_source(db, tables=[f"{db.name}.{t}" for t in tables], change_blocks=0, **kw)
    slow = make_source(db, tables=[f"{db.name}.{t}" for t in tables], row_decoder="library", **kw)
    for src in (fast, slow):
        src.start(Checkpoints.at({}))
        assert drain(src) == []
    return fast, slow


def _counts(src: MySQLSource) -> tuple[int, int]:
    stream = src._stream
    assert stream is not None
    return stream.fast_events, stream.fallback_events


def test_fast_decoder_equals_library(db: TestDb, make_source: Callable[..., MySQLSource]) -> None:
    decs = ", ".join(f"x{i} DECIMAL({p},{s})" for i, (p, s) in enumerate(DECIMALS))
    db.sql(
        f"CREATE TABLE alltypes ({COLUMNS})",
        f"CREATE TABLE narrow ({NARROW})",
        f"CREATE TABLE decs (id INT PRIMARY KEY, {decs})",
    )
    fast, slow = _sources(db, make_source, ["alltypes", "narrow", "decs"])
    rng = random.Random(7)
    db.sql(f"INSERT INTO alltypes VALUES ({ROW1})", "INSERT INTO alltypes (id) VALUES (2)")
    db.sql(EMPTY.format(3))
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.executemany(_INSERT, [_row(rng, k) for k in range(10, 60)])  # one multi-row event
            for k in range(60, 90):
                cur.execute(_INSERT, _row(rng, k))
            for k in range(10, 40, 3):  # before and after images with different NULLs
                new = _row(rng, k)
                cur.execute(
                    f"UPDATE alltypes SET {', '.join(f'{n} = %s' for n in _NAMES[1:-1])} "
                    "WHERE id = %s",
                    [*new[1:-1], k],
                )
            cur.execute("UPDATE alltypes SET b = NOT b, id = id + 1000 WHERE id % 4 = 0")
            cur.execute("DELETE FROM alltypes WHERE id % 5 = 0")
            narrow = [
                (
                    k,
                    _int(rng, 64, False),
                    _int(rng, 32, False),
                    "".join(rng.choice(_TEXT) for _ in range(rng.randint(0, 200))),
                    _dec(rng, 12, 2),
                    _ts(rng, datetime(1000, 1, 1), datetime(9999, 12, 31)),
                    rng.uniform(-1e10, 1e10),
                    rng.choice([0, 1, 5, -1]),
                )
                for k in range(200)
            ]
            cur.executemany("INSERT INTO narrow VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", narrow)
            cur.execute("UPDATE narrow SET a = NULL, b = 'x' WHERE id % 3 = 0")
            cur.executemany(
                f"INSERT INTO decs VALUES (%s{', %s' * len(DECIMALS)})",
                [(k, *(_dec(rng, p, s) for p, s in DECIMALS)) for k in range(300)],
            )
            cur.execute("DELETE FROM narrow WHERE id % 7 = 0")
    finally:
        conn.close()
    got, want = drain(fast), drain(slow)
    assert len(want) > 300
    assert _typed_summary(got) == _typed_summary(want)
    fast_events, fallbacks = _counts(fast)
    assert fast_events >= 40 and fallbacks == 0
    assert _counts(slow) == (0, 0)


@pytest.mark.parametrize("policy", ["null", "dead-letter"])
def test_special_values_go_the_library_way(
    db: TestDb, make_source: Callable[..., MySQLSource], policy: str
) -> None:
    """Zero dates (both policies) and bad keys: the fast source falls back for those events
    and gives the same events, dead letters and counts as the library source."""
    db.sql(
        "CREATE TABLE z (id INT PRIMARY KEY, d DATE, dt DATETIME(3), ts TIMESTAMP NULL, y YEAR, "
        "s SET('a','b'))",
        "CREATE TABLE zk (d DATE PRIMARY KEY, v INT)",
    )
    fast, slow = _sources(db, make_source, ["z", "zk"], zero_dates=policy)
    db.sql(
        "SET SESSION sql_mode = ''",
        "INSERT INTO z VALUES (1, '2024-01-01', '2024-01-01 00:00:00', NULL, 2024, 'a')",
        "INSERT INTO z VALUES (2, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', 0, '')",
        "INSERT INTO z VALUES (3, '2020-00-15', '2020-02-00 10:00:00', NULL, 2024, 'b')",
        "INSERT INTO zk VALUES ('0000-00-00', 1), ('2024-01-01', 2)",
        "UPDATE z SET d = '0000-00-00' WHERE id = 1",
        "UPDATE z SET d = '2024-05-05' WHERE id = 2",
        "DELETE FROM z",
        "DELETE FROM zk",
    )
    got, want = drain(fast), drain(slow)
    assert _typed_summary(got) == _typed_summary(want)
    for attr in ("dead_letters", "keyed_before_images", "changes", "skipped"):
        assert getattr(fast.stats, attr) == getattr(slow.stats, attr), attr
    assert fast.zero_dates_nulled == slow.zero_dates_nulled
    fast_lines = fast.dead_letters.path.read_text().splitlines() if fast.stats.dead_letters else []
    slow_lines = slow.dead_letters.path.read_text().splitlines() if slow.stats.dead_letters else []
    assert fast_lines == slow_lines
    fast_events, fallbacks = _counts(fast)
    assert fast_events >= 1 and fallbacks >= 4


class _Col:
    def __init__(self, **kw: Any) -> None:
        self.unsigned = False
        self.character_set_name = None
        self.__dict__.update(kw)


def test_unsupported_types_get_no_decoder() -> None:
    json_col = _Col(type=245, length_size=4)
    assert compile_table([json_col], [ColumnDef("j", "json", is_json=True)]) is None
    old_datetime = _Col(type=12)
    assert compile_table([old_datetime], [ColumnDef("t", "datetime")]) is None
    no_charset = _Col(type=15, max_length=10)
    assert compile_table([no_charset], [ColumnDef("v", "varchar")]) is None


def test_truncated_or_overlong_images_fall_back() -> None:
    dec = compile_table([_Col(type=3)], [ColumnDef("i", "int")])
    assert dec is not None
    assert dec.rows(b"\x00\x01\x00\x00\x00", 1) == [({"i": 1},)]
    assert dec.rows(b"\x01", 1) == [({"i": None},)]
    for bad in (b"\x00\x01\x00", b"\x00\x01\x00\x00\x00\x00"):
        with pytest.raises(Fallback):
            dec.rows(bad, 1)


class _Obj:
    pass


def _rows_event(*, read: bool, pushed_back: bytes = b"") -> Any:
    from pymysql.protocol import MysqlPacket

    data = b"\x00" + b"h" * 19 + b"POSTBITMAP" + b"ROWS" + b"CRC!"
    raw = MysqlPacket(data, "utf8")
    raw._position = 30  # after the header, the post-header and the bitmap
    wrapper = _Obj()
    wrapper.packet = raw
    wrapper.read_bytes = 10
    wrapper._BinLogPacketWrapper__data_buffer = pushed_back
    ev = _Obj()
    ev.packet = wrapper
    ev.complete = True
    ev.event_size = 14  # body without header and checksum
    ev.columns_present_bitmap = b"\x01"
    ev._RowsEvent__rows = [] if read else None
    return ev


def test_rows_body_only_from_an_unread_packet() -> None:
    from replicator.sources.mysql.compat import rows_body

    assert rows_body(_rows_event(read=False)) == (b"ROWS", b"\x01", None)
    assert rows_body(_rows_event(read=True)) is None
    assert rows_body(_rows_event(read=False, pushed_back=b"x")) is None
