"""Real Debezium output for end-to-end tests: a scenario of source changes captured by the
Debezium 3.6 embedded engine (``sample_dbs.debezium.capture``, in a child process), the
source's expected rows after each phase, and the Debezium-side value mapping of those rows.

Phases (the same for Postgres and MariaDB):

1. before the capture starts: rows for the initial snapshot;
2. capture run 1 (snapshot + stream): inserts, updates, deletes, key changes, a TRUNCATE and
   rows after it; stopped gracefully (offsets flushed) -> ``0001.jsonl``;
3. capture run 2: more changes, then the capture is KILLED and the offsets it committed are
   lost (the offset files are put back as run 1 left them: a worker crash before its offset
   commit was durable; Postgres engines run with ``flush.lsn.source=false`` so the slot does
   not run ahead of the offsets) -> ``0002.jsonl``;
4. capture run 3: Debezium redelivers phase 3 (at-least-once), then more changes ->
   ``0003.jsonl``.

(Killing alone does not make the redelivery deterministic: the engine commits its offsets
after the first batch of a run, whatever ``offset.flush.interval.ms`` says.)

Each engine writes its own folder (``<out>/<engine>/000N.jsonl``), in the Kafka pair shape
the file source reads.
"""

from __future__ import annotations

import base64
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from sample_dbs.debezium.capture import Capture, EngineSpec

Row = dict[str, Any]
TABLES = ("items", "full_t", "trunc_t")
PG_TABLES = (*TABLES, "toast_t", "parts_t")

_EPOCH = datetime(1970, 1, 1)
_EPOCH_DAY = date(1970, 1, 1)


@dataclass
class Captured:
    """What a scenario produced: per engine its folder of capture files and its mode, and
    the source's rows (raw driver values) per phase and table."""

    out: Path
    engines: dict[str, str]  # engine name -> mode ("precise" or "string-schemaless")
    expected: dict[int, dict[str, list[Row]]] = field(default_factory=dict)

    def files(self, engine: str) -> list[Path]:
        return sorted((self.out / engine).glob("*.jsonl"))

    def input_dir(self, engine: str, dest: Path, upto: int) -> Path:
        """A folder holding the engine's first ``upto`` capture files."""
        dest.mkdir(parents=True, exist_ok=True)
        for f in self.files(engine)[:upto]:
            shutil.copy(f, dest / f.name)
        return dest


class Scenario:
    """Runs the phases (see module doc) against one source: ``start()`` runs phases 1-2
    (capture run 1); ``restarts()`` runs phases 3-4 (runs 2 and 3), once, on demand (they
    cost two more engine starts, so only the tests that need them pay)."""

    def __init__(
        self,
        out: Path,
        engines: dict[str, tuple[str, dict[str, str]]],
        sql: Callable[..., None],
        rows: Callable[[str], list[Row]],
        phase_sql: dict[int, list[str]],
        tables: tuple[str, ...] = TABLES,
    ) -> None:
        """``engines``: name -> (mode, properties); ``sql(*statements)`` runs statements on
        the source; ``rows(table)`` reads a table ordered by key."""
        self.tables = tables
        self.engines = engines
        self.sql = sql
        self.rows = rows
        self.phase_sql = phase_sql
        self.captured = Captured(out, {n: mode for n, (mode, _) in engines.items()})
        self._marker = 0
        self._saved: dict[Path, bytes] = {}
        self._restarted = False

    def _capture(self, run: int) -> Capture:
        out = self.captured.out
        specs = [EngineSpec(n, props, out / n / f"{run:04d}.jsonl")
                 for n, (_, props) in self.engines.items()]
        return Capture(out / f"capture-{run}", specs).start()

    def _mark(self, cap: Capture) -> None:
        self._marker += 1
        self.sql(f"INSERT INTO marker VALUES ({self._marker})")
        cap.wait_for_marker("marker", self._marker, timeout=180)

    def _expect(self, phase: int) -> None:
        self.captured.expected[phase] = {t: self.rows(t) for t in self.tables}

    def start(self) -> Captured:
        self.sql(*self.phase_sql[1])
        cap = self._capture(1)
        try:
            self._mark(cap)  # snapshot done and streaming
            self.sql(*self.phase_sql[2])
            self._mark(cap)
            self._expect(2)
            cap.stop()
        finally:
            cap.kill()
        self._saved = {p: p.read_bytes() for p in self.captured.out.glob("offsets-*.dat")}
        return self.captured

    def restarts(self) -> Captured:
        if self._restarted:
            return self.captured
        self._restarted = True
        cap = self._capture(2)
        try:
            self._mark(cap)
            self.sql(*self.phase_sql[3])
            self._mark(cap)
            cap.kill()  # a crash ...
            for p, data in self._saved.items():  # ... before run 2's offsets were durable
                p.write_bytes(data)
            cap = self._capture(3)
            self._mark(cap)
            self.sql(*self.phase_sql[4])
            self._mark(cap)
            self._expect(4)
            cap.stop()
        finally:
            cap.kill()
        return self.captured


# --------------------------------------------------------------------------- Postgres

PG_DDL = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    """CREATE TABLE items (id bigint PRIMARY KEY, si smallint, i integer, n numeric(12,3),
        nu numeric, r real, d double precision, b boolean, t text, c char(4), by bytea,
        u uuid, j json, jb jsonb, dt date, tm time, ts timestamp, tstz timestamptz,
        arr int[], e mood)""",
    "CREATE TABLE full_t (id int PRIMARY KEY, v text, n int)",
    "ALTER TABLE full_t REPLICA IDENTITY FULL",
    "CREATE TABLE trunc_t (id int PRIMARY KEY, v text)",
    "CREATE TABLE marker (id int PRIMARY KEY)",
    # Large values stored out of line: an UPDATE that leaves them alone does not carry them
    # (REPLICA IDENTITY DEFAULT), and Debezium sends its unavailable-value placeholder.
    "CREATE TABLE toast_t (id int PRIMARY KEY, small int, big text, bb bytea, arr text[], js jsonb)",
    "ALTER TABLE toast_t ALTER big SET STORAGE EXTERNAL, ALTER bb SET STORAGE EXTERNAL, "
    "ALTER arr SET STORAGE EXTERNAL, ALTER js SET STORAGE EXTERNAL",
    # Replicated into a table partitioned by day(created) and bucket(8, id) (issue 24):
    # REPLICA IDENTITY DEFAULT, so a change carries only the old key, not the old day.
    "CREATE TABLE parts_t (id bigint PRIMARY KEY, created timestamp NOT NULL, amount numeric(10,2), note text)",
]
TOAST_INSERT = (
    "INSERT INTO toast_t SELECT g, 0, repeat('x', 3000) || g, decode(repeat('ab', 3000), 'hex'), "
    "array_fill('y' || g, ARRAY[600]), (SELECT jsonb_agg(h) FROM generate_series(1, 800) h) "
    "FROM generate_series({lo}, {hi}) g"
)


def pg_item(i: int) -> str:
    """One row of ``items``; row 1 has no nulls (schemaless inference types columns by their
    first value), every 9th row has NaN/Infinity floats, every 11th mostly nulls."""
    if i % 11 == 10:
        return f"({i}, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
    r, d = ("'NaN'", "'-Infinity'") if i % 9 == 8 else (f"{i}.5", f"{i}.25")
    return (
        f"({i}, {i - 100}, {i * 1000003}, {i}123.45{i % 10}, {i}.{'0' * (i % 13)}1234567891234, "
        f"{r}, {d}, {str(i % 2 == 0).lower()}, 'tëxt {i} \"q\"', 'c{i % 10}', "
        f"'\\x{i:02x}ff00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd38{i:04d}', '{{\"a\": [{i}, 2]}}', "
        f"'{{\"b\": {i}, \"a\": 2}}', DATE '2024-02-29' + {i}, TIME '12:34:56.789012' + interval '{i} min', "
        f"TIMESTAMP '2024-01-01 12:34:56.789' + interval '{i} hour', "
        f"TIMESTAMPTZ '2024-06-01 12:00:00.5+02' + interval '{i} day', '{{{i},NULL,3}}', "
        f"'{['sad', 'ok', 'happy'][i % 3]}')"
    )


# Changes of parts_t that move rows across partitions: to other days, deleted and
# re-inserted on a day the table had no rows on, re-keyed into other buckets, moved twice
# in one transaction (the second move deletes a row written in the same batch).
PARTS_MOVES = [
    "UPDATE parts_t SET created = created + (id % 5 + 1) * interval '1 day', note = 'moved' WHERE id % 10 = 0",
    "DELETE FROM parts_t WHERE id % 10 = 7",
    "INSERT INTO parts_t SELECT g, TIMESTAMP '2025-11-01' + g * interval '1 minute', 1.5, 're'"
    " FROM generate_series(7, 400, 20) g",
    "UPDATE parts_t SET id = id + 100000 WHERE id % 20 = 3",
    "BEGIN; UPDATE parts_t SET created = created - interval '3 days' WHERE id % 20 = 11; "
    "UPDATE parts_t SET created = created - interval '1 day', amount = 0 WHERE id % 20 = 11; COMMIT",
]

PG_PHASES: dict[int, list[str]] = {
    1: [
        *PG_DDL,
        "INSERT INTO items VALUES " + ", ".join(pg_item(i) for i in range(1, 41)),
        "INSERT INTO full_t SELECT g, 'v' || g, g FROM generate_series(1, 20) g",
        "INSERT INTO trunc_t SELECT g, 'old' || g FROM generate_series(1, 10) g",
        TOAST_INSERT.format(lo=1, hi=3),
        "INSERT INTO parts_t SELECT g, TIMESTAMP '2026-01-01' + (g % 12) * interval '1 day'"
        " + g * interval '1 second', g / 7.0, 'n' || g FROM generate_series(1, 400) g",
    ],
    2: [
        TOAST_INSERT.format(lo=4, hi=5),
        "UPDATE toast_t SET small = small + 1",  # rows 1-3: snapshot image; 4-5: this stream
        "UPDATE toast_t SET small = small + 1 WHERE id = 2",
        "UPDATE toast_t SET id = 20 WHERE id = 5",  # key change: d + c with placeholders
        "INSERT INTO items VALUES " + ", ".join(pg_item(i) for i in range(41, 61)),
        "UPDATE items SET t = 'changed ' || id, nu = nu * 3, r = 'Infinity' WHERE id % 3 = 0",
        "DELETE FROM items WHERE id % 7 = 0",
        "UPDATE items SET id = id + 1000 WHERE id IN (2, 5, 44)",  # key changes
        "UPDATE full_t SET v = 'w' || id, n = NULL WHERE id % 2 = 0",
        "DELETE FROM full_t WHERE id % 5 = 0",
        "UPDATE full_t SET id = id + 100 WHERE id IN (1, 3)",
        "BEGIN; INSERT INTO full_t VALUES (200, 'tx', 1); UPDATE full_t SET n = 2 WHERE id = 200; COMMIT",
        "TRUNCATE trunc_t",
        "INSERT INTO trunc_t VALUES (100, 'new'), (101, 'new')",
        *PARTS_MOVES,
    ],
    3: [
        "INSERT INTO items VALUES " + ", ".join(pg_item(i) for i in range(61, 71)),
        "UPDATE items SET si = 7 WHERE id BETWEEN 61 AND 65",
        "INSERT INTO full_t VALUES (300, 'redelivered', 3)",
        "DELETE FROM full_t WHERE id = 4",
    ],
    4: [
        "INSERT INTO items VALUES " + ", ".join(pg_item(i) for i in range(71, 76)),
        "DELETE FROM items WHERE id = 62",
        "UPDATE full_t SET v = 'after restart' WHERE id = 300",
    ],
}

# Columns whose text form is the Debezium value (exact decimal text, JSON text, enums).
PG_TEXT_COLUMNS = {"nu", "j", "jb", "e"}


def pg_select(table: str) -> str:
    if table == "toast_t":
        return "SELECT id, small, big, bb, arr, js::text AS js FROM toast_t ORDER BY id"
    if table != "items":
        return f"SELECT * FROM {table} ORDER BY id"
    cols = ["id", "si", "i", "n", "nu", "r", "d", "b", "t", "c", "by", "u", "j", "jb", "dt",
            "tm", "ts", "tstz", "arr", "e"]
    exprs = [f"{c}::text AS {c}" if c in PG_TEXT_COLUMNS else c for c in cols]
    return f"SELECT {', '.join(exprs)} FROM items ORDER BY id"


def _time_text(t: time | timedelta) -> str:
    if isinstance(t, timedelta):
        us = t // timedelta(microseconds=1)
    else:
        us = ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
    sign = "-" if us < 0 else ""
    secs, frac = divmod(abs(us), 1_000_000)
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    text = f"{sign}{h:02d}:{m:02d}:{s:02d}"
    return f"{text}.{frac:06d}" if frac else text


def _micros(t: time | timedelta) -> int:
    if isinstance(t, timedelta):
        return t // timedelta(microseconds=1)
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def pg_expected(row: Row, mode: str) -> Row:
    """A Postgres row (psycopg values, text columns already text) as the engine stores it
    from this Debezium mode (docs/types.md, Debezium section)."""
    out: Row = {}
    for k, v in row.items():
        if v is None:
            out[k] = None
        elif k in ("u",):
            out[k] = str(v)
        elif k == "arr":
            out[k] = orjson.dumps(v).decode()
        elif mode == "precise":
            if k == "tm":
                out[k] = _time_text(v)
            elif k == "tstz":
                out[k] = v.astimezone(UTC)
            else:
                out[k] = v
        else:  # decimal.handling.mode=string, schemas.enable=false: inferred JSON types
            if isinstance(v, Decimal):
                out[k] = f"{v:f}"
            elif k == "by":
                out[k] = base64.b64encode(v).decode()
            elif k == "dt":
                out[k] = (v - _EPOCH_DAY).days
            elif k == "tm":
                out[k] = _micros(v)
            elif k == "ts":
                out[k] = (v - _EPOCH) // timedelta(microseconds=1)
            elif k == "tstz":
                out[k] = v.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            elif k in ("r", "d") or isinstance(v, float):
                out[k] = float(v)
            else:
                out[k] = v
    return out


# --------------------------------------------------------------------------- MariaDB

MY_DDL = [
    """CREATE TABLE items (id bigint PRIMARY KEY, ti tinyint, si smallint, i int,
        bu bigint unsigned, dc decimal(12,4), f float, d double, c char(4), vc varchar(20),
        tx text, vb varbinary(10), bl blob, j json, e enum('a','b'), st set('x','y','z'),
        yr year, dt date, dtm datetime(6), ts timestamp(3) NULL, tm time(6))""",
    "CREATE TABLE full_t (id int PRIMARY KEY, v text, n int)",
    "CREATE TABLE trunc_t (id int PRIMARY KEY, v text)",
    "CREATE TABLE marker (id int PRIMARY KEY)",
]


def my_item(i: int) -> str:
    if i % 11 == 10:
        return f"({i}" + ", NULL" * 20 + ")"
    return (
        f"({i}, {i % 100 - 50}, {i - 100}, {i * 1000003}, {i * 1000}, {i}123.45{i % 10}, "
        f"{i}.5, {i}.25, 'c{i % 10}', 'v{i}', 'tëxt {i}', X'{i:02x}ff00', 'blob{i}', "
        f"'{{\"a\": [{i}, 2]}}', '{'ab'[i % 2]}', 'x,z', {2000 + i}, "
        f"DATE('2024-02-29') + INTERVAL {i} DAY, "
        f"TIMESTAMP('2024-01-01 12:34:56.789012') + INTERVAL {i} HOUR, "
        f"TIMESTAMP('2024-06-01 12:00:00.123') + INTERVAL {i} DAY, "
        "'-01:30:00.500000')"
    )


MY_PHASES: dict[int, list[str]] = {
    1: [
        *MY_DDL,
        "INSERT INTO items VALUES " + ", ".join(my_item(i) for i in range(1, 41)),
        "INSERT INTO full_t SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_20",
        "INSERT INTO trunc_t SELECT seq, CONCAT('old', seq) FROM seq_1_to_10",
    ],
    2: [
        "INSERT INTO items VALUES " + ", ".join(my_item(i) for i in range(41, 61)),
        "UPDATE items SET tx = CONCAT('changed ', id), dc = -dc WHERE id % 3 = 0",
        "DELETE FROM items WHERE id % 7 = 0",
        "UPDATE items SET id = id + 1000 WHERE id IN (2, 5, 44)",
        "UPDATE full_t SET v = CONCAT('w', id), n = NULL WHERE id % 2 = 0",
        "DELETE FROM full_t WHERE id % 5 = 0",
        "UPDATE full_t SET id = id + 100 WHERE id IN (1, 3)",
        "TRUNCATE TABLE trunc_t",
        "INSERT INTO trunc_t VALUES (100, 'new'), (101, 'new')",
    ],
    3: [
        "INSERT INTO items VALUES " + ", ".join(my_item(i) for i in range(61, 71)),
        "UPDATE items SET si = 7 WHERE id BETWEEN 61 AND 65",
        "INSERT INTO full_t VALUES (300, 'redelivered', 3)",
        "DELETE FROM full_t WHERE id = 4",
    ],
    4: [
        "INSERT INTO items VALUES " + ", ".join(my_item(i) for i in range(71, 76)),
        "DELETE FROM items WHERE id = 62",
        "UPDATE full_t SET v = 'after restart' WHERE id = 300",
    ],
}


def my_expected(row: Row, mode: str) -> Row:
    """A MariaDB row (pymysql values, session time zone UTC) as the engine stores it."""
    out: Row = {}
    for k, v in row.items():
        if v is None:
            out[k] = None
        elif k == "st":
            out[k] = v if isinstance(v, str) else ",".join(sorted(v))
        elif mode == "precise":
            if k == "tm":
                out[k] = _time_text(v)
            elif k == "ts":
                out[k] = v.replace(tzinfo=UTC)
            elif k in ("vb", "bl"):
                out[k] = bytes(v)
            elif isinstance(v, float):
                out[k] = v
            else:
                out[k] = v
        else:
            if k == "dc":
                out[k] = f"{v:f}"
            elif k in ("vb", "bl"):
                out[k] = base64.b64encode(bytes(v)).decode()
            elif k == "dt":
                out[k] = (v - _EPOCH_DAY).days
            elif k == "dtm":
                out[k] = (v - _EPOCH) // timedelta(microseconds=1)
            elif k == "ts":
                out[k] = v.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            elif k == "tm":
                out[k] = _micros(v)
            elif isinstance(v, float):
                out[k] = v
            elif isinstance(v, Decimal):
                out[k] = f"{v:f}"
            else:
                out[k] = v
    return out
