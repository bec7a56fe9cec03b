"""Seeded change workloads and how to apply them to PostgreSQL and MariaDB.

A workload is a list of tables (with their initial rows) and a *plan*: transactions of row
operations (insert / update / delete of a key). The plan is a pure function of the seed and
the sizes; row values are a pure function of (seed, transaction number, table), so the same
plan applied to Postgres and to MariaDB produces the same change stream, and a second run
with the same seed produces the same one again.

Every table has ``id bigint`` as its primary key and ``txn bigint``: the number of the plan
transaction that wrote the row (the lag measurement maps it to the writer's commit time).
Within one transaction a key is touched at most once, so applying a transaction set-wise
(all deletes, then all updates, then all inserts of a table) gives the plan's final state.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np

# Column kinds -> (Postgres type, MariaDB type).
KINDS: dict[str, tuple[str, str]] = {
    "bigint": ("bigint", "BIGINT"),
    "int": ("integer", "INT"),
    "text": ("text", "VARCHAR(200)"),
    "num": ("numeric(12,2)", "DECIMAL(12,2)"),
    "float": ("double precision", "DOUBLE"),
    "ts": ("timestamptz", "DATETIME(6)"),
    "bool": ("boolean", "BOOLEAN"),
    "date": ("date", "DATE"),
}
# Postgres array casts for unnest(): one per kind.
_PG_ARRAY = {
    "bigint": "bigint[]",
    "int": "integer[]",
    "text": "text[]",
    "num": "numeric[]",
    "float": "float8[]",
    "ts": "timestamptz[]",
    "bool": "boolean[]",
    "date": "date[]",
}

_WORDS = ["alpine", "anchor", "basalt", "cedar", "copper", "delta", "ember", "fable", "garnet", "harbor", "indigo", "juniper", "kelp", "lumen", "marble", "nectar", "onyx", "pepper", "quartz", "raven", "saffron", "timber", "umber", "velvet", "willow"]
_BASE_TS = datetime(2026, 1, 1, tzinfo=UTC)
_BASE_DATE = date(2000, 1, 1)


@dataclass(frozen=True)
class TableDef:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, kind); columns[0] is ("id", "bigint")

    @property
    def names(self) -> list[str]:
        return [c for c, _ in self.columns]

    def pg_ddl(self) -> str:
        cols = ", ".join(f"{c} {KINDS[k][0]}" for c, k in self.columns)
        return f"CREATE TABLE {self.name} ({cols}, PRIMARY KEY (id))"

    def mysql_ddl(self) -> str:
        cols = ", ".join(f"`{c}` {KINDS[k][1]}" for c, k in self.columns)
        return f"CREATE TABLE `{self.name}` ({cols}, PRIMARY KEY (id)) ENGINE=InnoDB"


def narrow_table(name: str) -> TableDef:
    return TableDef(
        name,
        (("id", "bigint"), ("txn", "bigint"), ("a", "int"), ("b", "text"), ("c", "num"),
         ("d", "ts"), ("e", "float"), ("f", "bool")),
    )  # fmt: skip


def wide_table(name: str, extra_columns: int = 58) -> TableDef:
    cycle = ("int", "text", "num", "float", "ts", "bool", "date", "bigint")
    cols = [("id", "bigint"), ("txn", "bigint")]
    cols += [(f"c{i:02d}", cycle[i % len(cycle)]) for i in range(extra_columns)]
    return TableDef(name, tuple(cols))


@dataclass
class TxOps:
    """One source transaction: per table, keys deleted / updated / inserted."""

    txn: int
    ops: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def add(self, table: str, kind: str, key: int) -> None:
        self.ops.setdefault(table, {"d": [], "u": [], "i": []})[kind].append(key)

    @property
    def events(self) -> int:
        return sum(len(v) for per in self.ops.values() for v in per.values())


@dataclass
class Workload:
    name: str
    title: str
    tables: list[TableDef]
    initial: dict[str, list[int]]  # table -> keys present before the measured changes
    plan: list[TxOps]
    seed: int
    description: str = ""
    snapshot_only: bool = False  # workload (a): the measured part is the initial snapshot

    @property
    def events(self) -> int:
        return sum(tx.events for tx in self.plan)

    @property
    def initial_rows(self) -> int:
        return sum(len(v) for v in self.initial.values())

    def table(self, name: str) -> TableDef:
        return next(t for t in self.tables if t.name == name)

    def op_counts(self) -> dict[str, int]:
        out = {"i": 0, "u": 0, "d": 0}
        for tx in self.plan:
            for per in tx.ops.values():
                for k, v in per.items():
                    out[k] += len(v)
        return out


class KeySet:
    """A set of ints with O(1) add, remove and uniform random choice."""

    def __init__(self, items: Sequence[int] = ()) -> None:
        self.items: list[int] = list(items)
        self.index = {k: i for i, k in enumerate(self.items)}

    def __len__(self) -> int:
        return len(self.items)

    def add(self, k: int) -> None:
        self.index[k] = len(self.items)
        self.items.append(k)

    def remove(self, k: int) -> None:
        i = self.index.pop(k)
        last = self.items.pop()
        if i < len(self.items):
            self.items[i] = last
            self.index[last] = i

    def choice(self, rng: random.Random) -> int:
        return self.items[rng.randrange(len(self.items))]


def _tx_size(rng: random.Random) -> int:
    """60% single-row, 30% 2-20 rows, 10% 50-500 rows (mean about 31)."""
    r = rng.random()
    if r < 0.6:
        return 1
    if r < 0.9:
        return rng.randint(2, 20)
    return rng.randint(50, 500)


def _plan_random(
    rng: random.Random,
    tables: list[str],
    live: dict[str, KeySet],
    absent: dict[str, KeySet],
    events: int,
    weights: tuple[float, float, float],  # insert, update, delete
    tx_size: Callable[[random.Random], int],
    first_txn: int = 1,
) -> list[TxOps]:
    plan: list[TxOps] = []
    done = 0
    txn = first_txn
    while done < events:
        tx = TxOps(txn)
        used: set[tuple[str, int]] = set()
        for _ in range(min(tx_size(rng), events - done)):
            table = tables[rng.randrange(len(tables))]
            r = rng.random()
            kind = "i" if r < weights[0] else "u" if r < weights[0] + weights[1] else "d"
            if kind == "i" and not absent[table]:
                kind = "u"
            if kind != "i" and not live[table]:
                kind = "i"
            for _attempt in range(8):
                pool = absent[table] if kind == "i" else live[table]
                key = pool.choice(rng)
                if (table, key) not in used:
                    break
            else:
                continue  # a tiny key space fully used by this transaction
            used.add((table, key))
            if kind == "i":
                absent[table].remove(key)
                live[table].add(key)
            elif kind == "d":
                live[table].remove(key)
                absent[table].add(key)
            tx.add(table, kind, key)
            done += 1
        if tx.ops:
            plan.append(tx)
            txn += 1
    return plan


def _split_keys(rng: random.Random, keyspace: int, initial: int) -> tuple[list[int], list[int]]:
    keys = list(range(1, keyspace + 1))
    rng.shuffle(keys)
    return sorted(keys[:initial]), keys[initial:]


def mixed(events: int, *, seed: int, tables: int = 4, keyspace: int = 100_000,
          initial_fraction: float = 0.4) -> Workload:
    """(b) steady mixed CDC: 50% inserts, 40% updates, 10% deletes over ``keyspace`` keys
    split across ``tables`` tables, transactions of 1 to 500 rows spanning tables."""
    rng = random.Random(seed)
    names = [f"mixed_{i}" for i in range(tables)]
    per = max(keyspace // tables, 1)
    live, absent, initial = {}, {}, {}
    for n in names:
        ini, rest = _split_keys(rng, per, int(per * initial_fraction))
        initial[n] = ini
        live[n], absent[n] = KeySet(ini), KeySet(rest)
    plan = _plan_random(rng, names, live, absent, events, (0.5, 0.4, 0.1), _tx_size)
    return Workload(
        "mixed", "steady mixed CDC", [narrow_table(n) for n in names], initial, plan, seed,
        description=f"{tables} tables x 8 columns, key space {keyspace:,} "
        f"({int(initial_fraction * 100)}% present at start); 50% inserts, 40% updates, "
        "10% deletes; transactions of 1 row (60%), 2-20 rows (30%), 50-500 rows (10%)",
    )  # fmt: skip


def spread(events: int, *, seed: int, tables: int, keyspace: int) -> Workload:
    """(e) the same mixed changes over ``tables`` tables: with ``tables=1`` and ``tables=100``
    side by side, the cost of a change stream touching many tables per batch."""
    w = mixed(events, seed=seed, tables=tables, keyspace=keyspace)
    return Workload(
        f"tables{tables}", f"mixed CDC over {tables} table(s)", w.tables, w.initial, w.plan,
        seed, description=w.description,
    )  # fmt: skip


def hot_keys(events: int, *, seed: int, keys: int = 100) -> Workload:
    """(c) update-heavy: 96% updates, 2% deletes, 2% re-inserts on ``keys`` hot keys."""
    rng = random.Random(seed)
    initial = list(range(1, keys + 1))
    live = {"hot": KeySet(initial)}
    absent = {"hot": KeySet()}
    plan = _plan_random(rng, ["hot"], live, absent, events, (0.02, 0.96, 0.02),
                        lambda r: r.randint(1, 10))  # fmt: skip
    return Workload(
        "hot", "update-heavy, hot keys", [narrow_table("hot")], {"hot": initial}, plan, seed,
        description=f"1 table x 8 columns, {keys} keys all present at start; 96% updates, "
        "2% deletes, 2% re-inserts; transactions of 1-10 rows",
    )


def wide(events: int, *, seed: int, keyspace: int = 50_000, initial_fraction: float = 0.2,
         extra_columns: int = 58) -> Workload:
    """(d) a wide table (60 columns): 40% inserts, 50% updates, 10% deletes."""
    rng = random.Random(seed)
    ini, rest = _split_keys(rng, keyspace, int(keyspace * initial_fraction))
    live, absent = {"wide": KeySet(ini)}, {"wide": KeySet(rest)}
    plan = _plan_random(rng, ["wide"], live, absent, events, (0.4, 0.5, 0.1), _tx_size)
    t = wide_table("wide", extra_columns)
    return Workload(
        "wide", "wide table", [t], {"wide": ini}, plan, seed,
        description=f"1 table x {len(t.columns)} columns (int, text, numeric, double, "
        f"timestamp, boolean, date, bigint), key space {keyspace:,} "
        f"({int(initial_fraction * 100)}% present); 40% inserts, 50% updates, 10% deletes",
    )  # fmt: skip


def snapshot(rows: int, *, seed: int) -> Workload:
    """(a) the initial snapshot of ``rows`` rows (no changes)."""
    return Workload(
        "snapshot", "initial snapshot", [narrow_table("snap")],
        {"snap": list(range(1, rows + 1))}, [], seed,
        description=f"1 table x 8 columns, {rows:,} rows read by the engine's initial snapshot",
        snapshot_only=True,
    )  # fmt: skip


# -- values ------------------------------------------------------------------------------------


def column_values(kind: str, n: int, rng: np.random.Generator, txn: int) -> list[Any]:
    """``n`` values of one column kind (Python objects the drivers accept)."""
    if kind == "bigint":
        return rng.integers(0, 2**40, n).tolist()
    if kind == "int":
        return rng.integers(-(2**31), 2**31 - 1, n).tolist()
    if kind == "text":
        words = rng.integers(0, len(_WORDS), (n, 3))
        nums = rng.integers(0, 10**6, n)
        return [f"{_WORDS[a]} {_WORDS[b]} {_WORDS[c]} #{x}" for (a, b, c), x in
                zip(words.tolist(), nums.tolist(), strict=True)]  # fmt: skip
    if kind == "num":
        return [f"{v / 100:.2f}" for v in rng.integers(-(10**11), 10**11, n).tolist()]
    if kind == "float":
        return (rng.random(n) * 1e6).tolist()
    if kind == "ts":
        us = rng.integers(0, 86_400 * 365 * 10**6, n).tolist()
        return [_BASE_TS + timedelta(microseconds=u) for u in us]
    if kind == "bool":
        return (rng.random(n) < 0.5).tolist()
    if kind == "date":
        return [_BASE_DATE + timedelta(days=d) for d in rng.integers(0, 20_000, n).tolist()]
    raise ValueError(kind)


def rows_for(
    table: TableDef, keys: Sequence[int], seed: int, txn: int, salt: int = 0
) -> list[list[Any]]:
    """Column-major values for ``keys`` written by transaction ``txn`` (0: initial rows)."""
    rng = np.random.default_rng([seed, txn, salt, sum(map(ord, table.name))])
    cols: list[list[Any]] = [list(keys), [txn] * len(keys)]
    for _, kind in table.columns[2:]:
        cols.append(column_values(kind, len(keys), rng, txn))
    return cols


def initial_chunks(w: Workload, table: TableDef, chunk: int = 20_000) -> Iterator[list[list[Any]]]:
    keys = w.initial[table.name]
    for i in range(0, len(keys), chunk):
        yield rows_for(table, keys[i : i + chunk], w.seed, 0, salt=1 + i // chunk)


# -- applying to Postgres ----------------------------------------------------------------------


class PgApplier:
    """Applies a workload to a Postgres database (psycopg 3, set-based statements)."""

    def __init__(self, conn: Any, workload: Workload) -> None:
        self.conn = conn
        self.w = workload
        self.sql: dict[str, tuple[str, str, str]] = {}
        for t in workload.tables:
            names = t.names
            arrays = ", ".join(f"%s::{_PG_ARRAY[k]}" for _, k in t.columns)
            ins = f"INSERT INTO {t.name} ({', '.join(names)}) SELECT * FROM unnest({arrays})"
            sets = ", ".join(f"{c} = u.{c}" for c in names[1:])
            upd = (f"UPDATE {t.name} SET {sets} FROM unnest({arrays}) AS u({', '.join(names)})"
                   f" WHERE {t.name}.id = u.id")  # fmt: skip
            dele = f"DELETE FROM {t.name} WHERE id = ANY(%s::bigint[])"
            self.sql[t.name] = (ins, upd, dele)

    def create(self) -> None:
        with self.conn.transaction():
            for t in self.w.tables:
                self.conn.execute(t.pg_ddl())
        for t in self.w.tables:
            for cols in initial_chunks(self.w, t):
                with self.conn.transaction():
                    self.conn.execute(self.sql[t.name][0], cols)
        self.conn.execute("ANALYZE")

    def apply(self, tx: TxOps) -> None:
        with self.conn.transaction():
            for table, per in tx.ops.items():
                ins, upd, dele = self.sql[table]
                t = self.w.table(table)
                if per["d"]:
                    self.conn.execute(dele, (per["d"],))
                if per["u"]:
                    self.conn.execute(upd, rows_for(t, per["u"], self.w.seed, tx.txn))
                if per["i"]:
                    self.conn.execute(ins, rows_for(t, per["i"], self.w.seed, tx.txn))


# -- applying to MariaDB -----------------------------------------------------------------------


def _mysql_value(v: Any) -> Any:
    # DATETIME(6) holds no zone: write the UTC wall time.
    if isinstance(v, datetime) and v.tzinfo is not None:
        return v.astimezone(UTC).replace(tzinfo=None)
    return v


class MySQLApplier:
    """Applies a workload to a MariaDB database (pymysql; multi-row statements)."""

    def __init__(self, conn: Any, workload: Workload) -> None:
        self.conn = conn
        self.w = workload
        self.sql: dict[str, tuple[str, str]] = {}
        for t in workload.tables:
            cols = ", ".join(f"`{c}`" for c in t.names)
            ph = ", ".join(["%s"] * len(t.columns))
            ins = f"INSERT INTO `{t.name}` ({cols}) VALUES ({ph})"
            odku = ", ".join(f"`{c}` = VALUES(`{c}`)" for c in t.names[1:])
            self.sql[t.name] = (ins, f"{ins} ON DUPLICATE KEY UPDATE {odku}")

    @staticmethod
    def _rows(cols: list[list[Any]]) -> list[tuple[Any, ...]]:
        return [tuple(_mysql_value(v) for v in row) for row in zip(*cols, strict=True)]

    def create(self) -> None:
        with self.conn.cursor() as cur:
            for t in self.w.tables:
                cur.execute(t.mysql_ddl())
            for t in self.w.tables:
                for cols in initial_chunks(self.w, t, chunk=5000):
                    cur.executemany(self.sql[t.name][0], self._rows(cols))

    def apply(self, tx: TxOps) -> None:
        self.conn.begin()
        with self.conn.cursor() as cur:
            for table, per in tx.ops.items():
                ins, upsert = self.sql[table]
                t = self.w.table(table)
                if per["d"]:
                    cur.execute(
                        f"DELETE FROM `{table}` WHERE id IN ({', '.join(['%s'] * len(per['d']))})",
                        per["d"],
                    )
                if per["u"]:  # existing keys: logged as UPDATE row events
                    cur.executemany(upsert, self._rows(rows_for(t, per["u"], self.w.seed, tx.txn)))
                if per["i"]:
                    cur.executemany(ins, self._rows(rows_for(t, per["i"], self.w.seed, tx.txn)))
        self.conn.commit()


def build(name: str, size: dict[str, int], seed: int) -> Workload:
    if name == "snapshot":
        return snapshot(size["snapshot_rows"], seed=seed)
    if name == "mixed":
        return mixed(size["mixed_events"], seed=seed, keyspace=size["keyspace"])
    if name == "hot":
        return hot_keys(size["hot_events"], seed=seed, keys=size["hot_keys"])
    if name.startswith("tables") and name[6:].isdigit():  # tables1, tables100
        return spread(size["spread_events"], seed=seed, tables=int(name[6:]),
                      keyspace=size["keyspace"])  # fmt: skip
    if name == "wide":
        return wide(size["wide_events"], seed=seed, keyspace=size["wide_keyspace"])
    raise ValueError(f"unknown workload {name!r}")
