"""A poll's changes as block events (``ChangeAssembler.change_raw``, ``change_group``): inserts,
updates and deletes of several tables across transactions, decoded per table in one pass,
without a server: any stream, with polls ending anywhere, gives, row for row, the events,
dead letters, positions and transaction ends the row-by-row path gives (bad values, skipped
positions, rows big enough for the row cache, relation changes, other tables and truncates
in between)."""

from __future__ import annotations

import random
from typing import Any

import pg_testkit as kit
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicator.events.block import BlockEvent, row_events
from replicator.events.deadletter import DeadLetterSink
from replicator.sources.postgres.changes import ChangeAssembler, SourceStats
from replicator.sources.postgres.pgoutput import decode
from replicator.sources.postgres.position import PgPosition
from replicator.sources.postgres.setup import TableInfo
from replicator.sources.postgres.toast import ROW_CACHE_MIN_CHARS, RowCache
from replicator.sources.postgres.types import TypeMapper

COLS = [(1, "id", 20, -1), (0, "n", 23, -1), (0, "ts", 1184, -1), (0, "s", 25, -1),
        (0, "c", 1700, (12 << 16 | 2) + 4), (0, "f", 701, -1), (0, "b", 16, -1), (0, "j", 17, -1)]  # fmt: skip
WIDER = [*COLS, (0, "extra", 1082, -1)]
TABLES = {f"public.t{i}": TableInfo(16400 + i, "public", f"t{i}", "d", ("id",)) for i in range(2)}


class _Sink(DeadLetterSink):
    def __init__(self) -> None:
        super().__init__(None)
        self.got: list[Any] = []

    def put(self, dl: Any) -> None:  # type: ignore[override]
        self.got.append((dl.table, dl.key, dl.position, dl.raw))


def _row(rng: random.Random, key: int, wide: bool) -> list[Any]:
    bad = rng.random() < 0.03
    row: list[Any] = [
        str(key), "x" if bad else (None if rng.random() < 0.1 else str(rng.randint(-(2**31), 2**31 - 1))),
        rng.choice(["2024-03-04 05:06:07.123456+00", "1999-12-31 23:59:59+00", None]),
        rng.choice(["", "a,b", 'q"uo\nte', "ünï", None, "s" * (ROW_CACHE_MIN_CHARS if rng.random() < 0.05 else 3)]),
        rng.choice(["1.50", "-0.01", "NaN" if rng.random() < 0.2 else "3.00", None]),
        rng.choice(["1.5", "-Infinity", "1e-07", "123456789.123", None]),
        rng.choice(["t", "f", None]), rng.choice(["\\x00ff", "\\x", None]),
    ]  # fmt: skip
    if wide:
        row.append(rng.choice(["2024-01-01", None]))
    return row


def _update(rng: random.Random, rel: int, key: int, wide: bool) -> bytes:
    """An update keeping its key (no old tuple), moving it (old key 'K', now and then null),
    or with its whole old row ('O', REPLICA IDENTITY FULL: row by row)."""
    new, r = _row(rng, key, wide), rng.random()
    if r < 0.5:
        return kit.update(rel, new)
    if r < 0.85:
        old = [rng.choice([str(key + 1), str(key), None if r < 0.52 else "7"])] + [None] * (
            len(new) - 1
        )
        return kit.update(rel, new, old, "K")
    return kit.update(rel, new, _row(rng, key + 1, wide), "O")


def _stream(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    # t2: not selected; t1's relation first comes with its first change, as Postgres sends it
    msgs = [kit.relation(16400 + i, "public", f"t{i}", COLS) for i in (0, 2)]
    wide = {16400: False, 16401: False, 16402: False}
    lsn = 0x1000
    for tx in range(25):
        msgs.append(kit.begin(lsn, tx, 100 + tx))
        for _ in range(rng.choice([1, 3, 20, 60])):
            rel, key, r = 16400 + rng.choice([0, 0, 0, 1, 2]), rng.randrange(200), rng.random()
            if rel == 16401 and not any(m[0] == ord("R") and m[1:5] == rel.to_bytes(4, "big") for m in msgs):
                msgs.append(kit.relation(rel, "public", "t1", COLS))
            if r < 0.6:
                msgs.extend(kit.insert(rel, _row(rng, key, wide[rel])) for _ in range(rng.choice([1, 5, 30])))
            elif r < 0.8:
                msgs.extend(_update(rng, rel, key, wide[rel]) for _ in range(rng.choice([1, 1, 8])))
            elif r < 0.9:
                nulls = [None] * (len(COLS) - 1 + wide[rel])
                msgs.extend(
                    kit.delete(rel, [str(key + i)] + nulls) for i in range(rng.choice([1, 1, 6]))
                )
            elif r < 0.95:
                msgs.append(kit.truncate([rel]))
            elif r < 0.975:  # re-sent as it is (Postgres does after an invalidation)
                i = rel - 16400
                msgs.append(kit.relation(rel, "public", f"t{i}", WIDER if wide[rel] else COLS))
            else:
                wide[rel] = not wide[rel]
                i = rel - 16400
                msgs.append(kit.relation(rel, "public", f"t{i}", WIDER if wide[rel] else COLS))
        msgs.append(kit.commit(lsn, lsn + 8, tx))
        lsn += 0x100
    return msgs


def _run(msgs: list[bytes], blocks: int, committed: dict[str, PgPosition], poll: int = 10**9) -> tuple[Any, ...]:
    """The events as a source hands them out, ending a poll every ``poll`` messages."""
    sink, stats = _Sink(), SourceStats()
    asm = ChangeAssembler(
        tables=TABLES, mapper=TypeMapper(None), committed=committed, toast=RowCache(1 << 20),
        stats=stats, dead_letters=sink, fetch_current=lambda *a: None,
    )  # fmt: skip
    asm.change_blocks = blocks
    out = []
    for i, m in enumerate(msgs):
        if blocks and m[0] in b"IUD":
            if not asm.keep_raw(m):
                out.extend(asm.change_raw(m))
        else:
            out.extend(asm.handle(decode(m), len(m)))
        if i % poll == poll - 1:
            out.extend(asm.flush_run())
    out.extend(asm.flush_run())
    return out, sink.got, stats, asm.tx_ends, asm.last_out


def _plain(ev: Any) -> tuple[Any, ...]:
    """An event with its images as (value, type) pairs (1 == 1.0 == True otherwise)."""
    def img(m: Any) -> Any:
        return None if m is None else sorted((k, repr(v), type(v).__name__) for k, v in m.items())

    return (ev.table, ev.op, img(ev.before), img(ev.after), ev.position, ev.schema_, ev.ts_ms,
            ev.tx_id, ev.last_in_tx, ev.error)  # fmt: skip


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("blocks", [1, 4])
def test_blocks_give_the_row_by_row_events(seed: int, blocks: int) -> None:
    msgs = _stream(seed)
    committed = {"public.t1": PgPosition(0x1000 + 0x100 * 5, 10)} if seed % 2 else {}
    rows, rows_dead, rows_stats, rows_ends, rows_last = _run(msgs, 0, committed)
    got, dead, stats, ends, last = _run(msgs, blocks, committed, poll=[10**9, 7, 50][seed % 3])
    assert any(type(ev) is BlockEvent for ev in got)
    assert any(type(ev) is BlockEvent and ev.block.ops is not None for ev in got)  # mixed kinds
    assert [_plain(e) for e in row_events(got)] == [_plain(e) for e in rows]
    assert dead == rows_dead and ends == rows_ends and last == rows_last
    assert (stats.changes, stats.skipped, stats.dead_letters) == (
        rows_stats.changes, rows_stats.skipped, rows_stats.dead_letters,
    )  # fmt: skip


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), blocks=st.sampled_from([1, 2, 16]), skip=st.booleans(),
       poll=st.sampled_from([1, 3, 40, 10**9]))  # fmt: skip
def test_random_streams_give_the_row_by_row_events(seed: int, blocks: int, skip: bool, poll: int) -> None:
    """Inserts, updates (old key or not), deletes of tables with a key in any mix: the
    blocks' rows, expanded, are the row-by-row events."""
    msgs = _stream(seed)
    committed = {"public.t0": PgPosition(0x1000 + 0x100 * 7, 3)} if skip else {}
    rows, rows_dead, rows_stats, rows_ends, rows_last = _run(msgs, 0, committed)
    got, dead, stats, ends, last = _run(msgs, blocks, committed, poll)
    assert [_plain(e) for e in row_events(got)] == [_plain(e) for e in rows]
    assert dead == rows_dead and ends == rows_ends and last == rows_last
    assert (stats.changes, stats.skipped) == (rows_stats.changes, rows_stats.skipped)


def test_a_run_of_deletes_is_one_block() -> None:
    """Deletes only (every column but the key null in the block, booleans too)."""
    nulls = [None] * (len(COLS) - 1)
    msgs = [kit.relation(16400, "public", "t0", COLS), kit.begin(0x1000, 1, 100)]
    msgs += [kit.delete(16400, [str(k)] + nulls) for k in range(5)] + [kit.commit(0x1000, 0x1008, 1)]
    got = _run(msgs, 2, {})[0]
    assert [(type(e), e.rows) for e in got] == [(BlockEvent, 5)]
    assert [(e.op.value, e.before, e.after) for e in row_events(got)] == [("d", {"id": k}, None) for k in range(5)]


def test_a_poll_spread_over_many_tables_is_one_block_per_table() -> None:
    """20,000 inserts over 100 tables in one poll: each table's 200 changes are one block
    (a block's fixed cost pays only past ~100 rows), however they interleave. A group capped
    at 8,192 rows split them into ~82 per table, under ``change_blocks`` 128: row by row."""
    tables = {f"public.m{i}": TableInfo(16500 + i, "public", f"m{i}", "d", ("id",)) for i in range(100)}
    msgs = [kit.relation(16500 + i, "public", f"m{i}", COLS) for i in range(100)]
    msgs.append(kit.begin(0x1000, 1, 100))
    row = ["1", "2", None, "s", "1.50", "1.5", "t", None]
    msgs += [kit.insert(16500 + k % 100, [str(k), *row[1:]]) for k in range(20_000)]
    msgs.append(kit.commit(0x1000, 0x1008, 1))
    asm = ChangeAssembler(
        tables=tables, mapper=TypeMapper(None), committed={}, toast=RowCache(1 << 20),
        stats=SourceStats(), dead_letters=_Sink(), fetch_current=lambda *a: None,
    )  # fmt: skip
    asm.change_blocks = 128
    got = []
    for m in msgs:
        if m[0] in b"IUD":
            if not asm.keep_raw(m):
                got.extend(asm.change_raw(m))
        else:
            got.extend(asm.handle(decode(m), len(m)))
    got.extend(asm.flush_run())
    assert all(type(ev) is BlockEvent for ev in got)
    assert len({id(ev.block) for ev in got}) == 100
    assert [int(ev.after["id"]) for ev in row_events(got)] == list(range(20_000))


def test_a_relation_sent_again_between_kept_changes_keeps_one_block_per_table() -> None:
    """A table's first Relation message comes with its first change, and Postgres re-sends
    it after any invalidation of the table (each autoanalyze of a busy one): new or
    unchanged, it does not end the poll's group (before: every Relation message handed the
    group out, its tables' few rows each row by row), and an unchanged one is not built
    again; changed (a new column), the rows after it take the new schema."""
    row = ["2", None, "s", "1.50", "1.5", "t", None]
    msgs = [kit.relation(16400, "public", "t0", COLS), kit.begin(0x1000, 1, 100)]
    for k in range(400):
        if k == 1:  # a table's first Relation message comes with its first change
            msgs.append(kit.relation(16401, "public", "t1", COLS))
        if k % 50 == 25:
            msgs.append(kit.relation(16400 + k % 2, "public", f"t{k % 2}", COLS))
        msgs.append(kit.insert(16400 + k % 2, [str(k), *row]))
    commit = kit.commit(0x1000, 0x1008, 1)
    got = _run([*msgs, commit], 64, {})[0]
    assert all(type(ev) is BlockEvent for ev in got)
    assert len({id(ev.block) for ev in got}) == 2
    assert [int(ev.after["id"]) for ev in row_events(got)] == list(range(400))

    asm = ChangeAssembler(
        tables=TABLES, mapper=TypeMapper(None), committed={}, toast=RowCache(1 << 20),
        stats=SourceStats(), dead_letters=_Sink(), fetch_current=lambda *a: None,
    )  # fmt: skip
    states = set()
    for m in msgs[:1] + [kit.relation(16400, "public", "t0", COLS)] * 3:
        list(asm.handle(decode(m), len(m)))
        states.add(id(asm._rels[16400]))
    assert len(states) == 1  # built once

    wider = [*msgs, kit.relation(16400, "public", "t0", WIDER), kit.insert(16400, ["400", *row, "2024-01-01"]), commit]
    plain, _d, _s, ends, _l = _run(wider, 0, {})
    got, _d, _s, blocks_ends, _l = _run(wider, 64, {})
    assert [_plain(e) for e in row_events(got)] == [_plain(e) for e in plain] and blocks_ends == ends
    assert row_events(got)[-1].after["extra"] is not None


def test_keeping_while_changes_wait_for_their_block() -> None:
    """``keeping`` (the source's ``receiving``): changes read, none handed out yet; not while
    a transaction is merely open (a silent walsender decoding a large one)."""
    asm = ChangeAssembler(
        tables=TABLES, mapper=TypeMapper(None), committed={}, toast=RowCache(1 << 20),
        stats=SourceStats(), dead_letters=_Sink(), fetch_current=lambda *a: None,
    )  # fmt: skip
    asm.change_blocks = 1
    row = ["1", "2", None, "s", "1.50", "1.5", "t", None]
    for m in (kit.relation(16400, "public", "t0", COLS), kit.begin(0x1000, 1, 100)):
        list(asm.handle(decode(m), len(m)))
    assert not asm.keeping and asm.in_transaction
    m = kit.insert(16400, row)
    assert asm.keep_raw(m) or list(asm.change_raw(m)) == []
    assert asm.keeping
    assert [e.rows for e in asm.flush_run()] == []  # held back: is it the transaction's last?
    assert not asm.keeping and asm.in_transaction


def test_a_group_goes_out_once_its_tables_have_a_block_each() -> None:
    """One table: out at GROUP_MIN_ROWS (the engine waits for a group, so no later); 100
    tables: at GROUP_ROWS_PER_TABLE each on average; never past GROUP_MAX_ROWS."""
    from replicator.sources.postgres import change_group as cg

    def rows_until_full(tables: int) -> int:
        group = cg.ChangeGroup(_TxCount())
        rels = [object() for _ in range(tables)]
        n = 0
        while not group.full:
            group.keep(rels[n % tables], b"I" * 40)
            n += 1
        return n

    assert rows_until_full(1) == cg.GROUP_MIN_ROWS
    assert rows_until_full(100) == 100 * cg.GROUP_ROWS_PER_TABLE
    assert rows_until_full(1000) == cg.GROUP_MAX_ROWS


class _TxCount:
    index = 0
