"""A CDC batch whose runs of inserts (and of key-keeping updates) travel as 'c' ('u') block events (``events.block``),
and runs mixing inserts, updates (with their old key or not) and deletes as block events with an op column, among
per-row u/d/c events stages to the table the same events give one row at a time, so the
mapper (``ops_mapping``) writes exactly the same rows and deletes, in every policy; a bad
row anywhere (null key, a value that does not fit) sends the batch the row-by-row way,
which handles it as before."""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ops_mapping.contract import MappingPolicy
from ops_mapping.mapper import BatchMapper
from replicator.events.block import BlockEvent, RowBlock, row_events
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.pipeline.staging import BadChangeError, stage_events

COLUMNS = [("id", "long"), ("v", "string"), ("d", "decimal(9,2)"), ("f", "float")]
SRC = "postgres"


def _row(rng: random.Random, key: int | None) -> dict[str, Any]:
    return {"id": key, "v": rng.choice(["a", "", None, "x\ny"]),
            "d": rng.choice([Decimal("1.50"), None, Decimal("-3.25")]), "f": rng.random()}  # fmt: skip


def _table(rows: list[dict[str, Any] | None]) -> pa.Table:
    def col(name: str) -> list[Any]:
        return [None if x is None else x[name] for x in rows]

    return pa.table({
        "id": pa.array(col("id"), pa.int64()), "v": pa.array(col("v"), pa.large_string()),
        "d": pa.array(col("d"), pa.decimal128(9, 2)), "f": pa.array(col("f"), pa.float64()),
    })  # fmt: skip


def _mixed(rng: random.Random, n: int, bad: bool) -> tuple[RowBlock, list[tuple[Op, Any, Any]]]:
    """A block of c/u/d rows (some updates with their old key, some moving it) as a CDC
    source's run of mixed changes gives it, and its rows' (op, before, after)."""
    rows: list[tuple[Op, Any, Any]] = []
    for i in range(n):
        op, key = rng.choice([Op.CREATE, Op.UPDATE, Op.UPDATE, Op.DELETE]), rng.randrange(12)
        old = {"id": None if bad and i == 0 else rng.choice([key, rng.randrange(12)])}
        before = old if op is Op.DELETE or (op is Op.UPDATE and rng.random() < 0.5) else None
        rows.append((op, before, None if op is Op.DELETE else _row(rng, key)))
    olds = pa.table(
        {"id": pa.array([None if b is None else b["id"] for _o, b, _a in rows], pa.int64())}
    )
    ops = pa.array([o.value for o, _b, _a in rows], pa.string())
    return RowBlock(_table([a for _o, _b, a in rows]), ops, RowBlock(olds)), rows


def _batch(seed: int) -> list[ChangeEvent]:
    """Random transactions of c/u/d over a small key space; some runs of c as blocks."""
    rng = random.Random(seed)
    out: list[ChangeEvent] = []
    lsn = 100
    for tx in range(rng.randint(1, 8)):
        idx = 0
        evs: list[ChangeEvent] = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.5:
                n = rng.choice([1, 3, 8])
                run_op = Op.CREATE if rng.random() < 0.6 else Op.UPDATE  # u: keeps its key
                bad = seed % 3 == 0 and rng.random() < 0.1  # a null key: staging refuses the block
                rows = [_row(rng, None if bad and i == 0 else rng.randrange(12)) for i in range(n)]
                if rng.random() < 0.4:  # a run mixing kinds
                    block, changes = _mixed(rng, n, bad)
                    if rng.random() < 0.7:  # one event, or two slices of the block (a run in pieces)
                        cut = rng.randrange(1, n) if n > 1 and rng.random() < 0.5 else n
                        evs += [BlockEvent("public.t", None, block, a, z, SRC, (lsn,), idx + a, Op.UPDATE, 5,
                                           str(tx), False) for a, z in ((0, cut), (cut, n)) if z > a]  # fmt: skip
                    else:
                        evs += [ChangeEvent("public.t", o, b, a, position=SourcePosition(SRC, (lsn, idx + i)),
                                            ts_ms=5, tx_id=str(tx)) for i, (o, b, a) in enumerate(changes)]  # fmt: skip
                elif rng.random() < 0.7:
                    block = RowBlock(pa.table({
                        "id": pa.array([x["id"] for x in rows], pa.int64()),
                        "v": pa.array([x["v"] for x in rows], pa.large_string()),
                        "d": pa.array([x["d"] for x in rows], pa.decimal128(9, 2)),
                        "f": pa.array([x["f"] for x in rows], pa.float64()),
                    }))  # fmt: skip
                    evs.append(BlockEvent("public.t", None, block, 0, n, SRC, (lsn,), idx, run_op,
                                          5, str(tx), False))  # fmt: skip
                else:
                    evs += [ChangeEvent("public.t", run_op, None, x, position=SourcePosition(SRC, (lsn, idx + i)),
                                        ts_ms=5, tx_id=str(tx)) for i, x in enumerate(rows)]  # fmt: skip
                idx += n
                continue
            key = rng.randrange(12)
            op = Op.UPDATE if r < 0.9 else Op.DELETE
            before = {"id": key} if op is Op.DELETE or rng.random() < 0.3 else None
            after = None if op is Op.DELETE else _row(rng, key if before is None else rng.randrange(12))
            evs.append(ChangeEvent("public.t", op, before, after, position=SourcePosition(SRC, (lsn, idx)),
                                   ts_ms=5, tx_id=str(tx)))  # fmt: skip
            idx += 1
        last = evs[-1]
        if type(last) is BlockEvent:
            evs[-1] = BlockEvent("public.t", None, last.block, last.start, last.stop, SRC, (lsn,), last.first_seq,
                                 last.op, 5, str(tx), True)  # fmt: skip
        else:
            evs[-1] = last.replace(last_in_tx=True)
        out += evs
        lsn += 10
    return out


def _mapped(staged: pa.Table, policy: MappingPolicy) -> tuple[Any, ...]:
    mapper = BatchMapper(["id"], staged.select([c for c, _ in COLUMNS]).schema, policy)
    chunk = mapper.map_chunk(staged.combine_chunks().to_batches()[0])
    tail = mapper.finish()
    rows = [s.rows.to_pylist() for s in chunk.data]
    return rows, chunk.equality_deletes.to_pylist(), tail.position_deletes.to_pylist()


@pytest.mark.parametrize("seed", range(40))
def test_blocks_stage_and_map_as_rows(seed: int, tmp_path: Path) -> None:
    events = _batch(seed)
    as_rows = [e.replace(after=dict(e.after)) if e.after is not None else e for e in row_events(events)]
    try:
        slow = stage_events(as_rows, COLUMNS, ["id"], DeadLetterSink(tmp_path / "b.jsonl"), "dead-letter")
    except BadChangeError as exc:  # a u without a usable key: the batch stops, either way
        with pytest.raises(BadChangeError) as got:
            stage_events(events, COLUMNS, ["id"], DeadLetterSink(tmp_path / "a.jsonl"), "dead-letter")
        assert str(got.value) == str(exc)
        return
    fast = stage_events(events, COLUMNS, ["id"], DeadLetterSink(tmp_path / "a.jsonl"), "dead-letter")
    assert fast.table.equals(slow.table) and fast.table.schema == slow.table.schema
    assert (fast.events, fast.dead_lettered) == (slow.events, slow.dead_lettered)
    if not fast.table.num_rows:
        return
    for upsert in (False, True):
        policy = MappingPolicy(upsert_creates=upsert)
        assert _mapped(fast.table, policy) == _mapped(slow.table, policy)


@pytest.mark.parametrize("seed", range(10))
def test_one_row_runs_interleaving_blocks_stage_as_rows(seed: int, tmp_path: Path) -> None:
    """A table's rows in a batch spread over 100 tables: one-row block events taking turns
    over a few blocks (each block's rows out of order with the others'), mixed and not."""
    rng = random.Random(seed)
    mixed = [_mixed(rng, 6, False)[0] for _ in range(2)]
    inserts = RowBlock(_table([_row(rng, rng.randrange(12)) for _ in range(6)]))
    cursors = {id(b): 0 for b in [*mixed, inserts]}
    events: list[ChangeEvent] = []
    while any(at < 6 for at in cursors.values()):
        block = rng.choice([b for b in [*mixed, inserts] if cursors[id(b)] < 6])
        at = cursors[id(block)]
        stop = min(6, at + rng.choice([1, 1, 2]))
        cursors[id(block)] = stop
        op = Op.CREATE if block is inserts else Op.UPDATE
        events.append(BlockEvent("public.t", None, block, at, stop, SRC, (100,), len(events) * 8, op, 5, "1",
                                 False))  # fmt: skip
    as_rows = [e.replace(after=dict(e.after)) if e.after is not None else e for e in row_events(events)]
    slow = stage_events(as_rows, COLUMNS, ["id"], DeadLetterSink(tmp_path / "b.jsonl"), "dead-letter")
    fast = stage_events(events, COLUMNS, ["id"], DeadLetterSink(tmp_path / "a.jsonl"), "dead-letter")
    assert fast.table.equals(slow.table) and fast.table.schema == slow.table.schema


@pytest.mark.parametrize("rows_first", [False, True])
def test_block_events_with_a_polls_row_by_row_tail_stage_from_the_blocks(
    rows_first: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table's block events with the few changes a poll handed out row by row after them
    (or before them): the blocks are staged from their columns, only those changes value by
    value, and the batch is what the row-by-row build gives, in order."""
    from replicator.pipeline import staging

    rng = random.Random(7)
    block = RowBlock(_table([_row(rng, k) for k in range(6)]))
    blocks = [BlockEvent("public.t", None, block, 0, 4, SRC, (100,), 0, Op.CREATE, 5, "1", True),
              BlockEvent("public.t", None, block, 4, 6, SRC, (110,), 0, Op.CREATE, 5, "2", True)]  # fmt: skip
    rows = [ChangeEvent("public.t", Op.UPDATE, None, _row(rng, k), position=SourcePosition(SRC, (120 + k, 0)),
                        ts_ms=5, tx_id=str(3 + k), last_in_tx=True) for k in (2, 9)]  # fmt: skip
    events = [*rows, *blocks] if rows_first else [*blocks, *rows]
    built: list[int] = []
    real_build = staging._build
    monkeypatch.setattr(staging, "_build", lambda evs, *a: built.append(len(evs)) or real_build(evs, *a))
    fast = stage_events(events, COLUMNS, ["id"], DeadLetterSink(tmp_path / "a.jsonl"), "dead-letter")
    assert built == [2]  # the two changes alone: the blocks' rows were not built value by value
    as_rows = [e.replace(after=dict(e.after)) if e.after is not None else e for e in row_events(events)]
    slow = stage_events(as_rows, COLUMNS, ["id"], DeadLetterSink(tmp_path / "b.jsonl"), "dead-letter")
    assert fast.table.equals(slow.table) and fast.table.schema == slow.table.schema
    assert fast.table.column("id").to_pylist() == [e["id"] for e in (e.after for e in as_rows)]
