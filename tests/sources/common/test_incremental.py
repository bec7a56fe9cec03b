"""The incremental snapshot's reconciliation, pure: chunks read while the source changes,
reconciled with the stream between the read and the HIGH watermark, applied in stream order
as upserts, end equal to the source (hypothesis drives the interleaving)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.sources.common.incremental import (
    ChunkDone,
    ChunkLedger,
    ChunkWindow,
    IncrementalState,
    RecentTransactions,
    Watermark,
    chunk_consistent,
)

KEYS = st.integers(0, 30)
# A source change: (op, key, value); "i" insert-or-update, "d" delete, "t" truncate.
OPS = st.sampled_from(["i", "i", "i", "d", "d", "t"])
CHANGES = st.lists(st.tuples(OPS, KEYS, st.integers(0, 9)), max_size=60)


def _simulate(
    initial: dict[int, int], changes: list[tuple[str, int, int]], chunk_rows: int,
    gaps: list[tuple[int, int]],
) -> tuple[dict[int, int], dict[int, int]]:  # fmt: skip
    """The source changes one by one; the stream hands out each change right away; a chunk
    is read after ``gap[0]`` further changes and its HIGH mark arrives after ``gap[1]`` more.
    Returns (source, target) at the end. The target starts empty (a table added to the
    engine): only stream events and chunk rows fill it."""
    source = dict(initial)
    target: dict[int, int] = {}
    queue = list(changes)
    frontier = -1
    gap_i = 0

    def step() -> None:
        op, key, value = queue.pop(0)
        if op == "t":
            source.clear()
            target.clear()
            if window is not None:
                window.truncated("t")
            return
        if op == "i":
            source[key] = value
            target[key] = value  # the stream's upsert
        else:
            source.pop(key, None)
            target.pop(key, None)
        if window is not None:
            window.on_change("t", [key])

    window: ChunkWindow[int, tuple[int, int]] | None = None
    while True:
        before_read, before_high = gaps[gap_i % len(gaps)] if gaps else (0, 0)
        gap_i += 1
        for _ in range(before_read):
            if queue:
                step()
        keys = sorted(k for k in source if k > frontier)[:chunk_rows]
        window = ChunkWindow("t", gap_i, [(k, (k, source[k])) for k in keys])
        for _ in range(before_high):
            if queue:
                step()
        for k, v in window.close():  # at HIGH: 'r' rows as upserts
            target[k] = v
        window = None
        if len(keys) < chunk_rows:
            break
        frontier = keys[-1]
    while queue:
        step()
    return source, target


@settings(max_examples=300, deadline=None)
@given(
    initial=st.dictionaries(KEYS, st.integers(0, 9), max_size=25),
    changes=CHANGES,
    chunk_rows=st.integers(1, 8),
    gaps=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=6),
)
def test_chunks_reconciled_with_the_stream_end_equal_to_the_source(
    initial: dict[int, int], changes: list[tuple[str, int, int]], chunk_rows: int,
    gaps: list[tuple[int, int]],
) -> None:  # fmt: skip
    source, target = _simulate(initial, changes, chunk_rows, gaps)
    assert target == source


def test_without_the_window_a_chunk_row_overwrites_a_newer_change() -> None:
    # The reconciliation is what makes it right: the same interleaving with no drop loses
    # the change made between the read and the HIGH mark.
    window: ChunkWindow[int, int] = ChunkWindow("t", 1, [(1, 10), (2, 20)])
    window.on_change("t", [1])  # key 1 changed after the read: the stream's version wins
    window.on_change("other", [2])  # another table's key 2 is not this chunk's
    assert window.close() == [20]
    assert (window.read, window.dropped) == (2, 1)


def test_a_truncate_between_read_and_high_empties_the_window() -> None:
    window: ChunkWindow[int, int] = ChunkWindow("t", 1, [(1, 10), (2, 20)])
    window.truncated("other")
    assert window.dropped == 0
    window.truncated("t")
    assert window.close() == [] and window.dropped == 2


def test_watermark_round_trip_and_foreign_messages() -> None:
    wm = Watermark("high", "run-1", 7, "public.b")
    assert Watermark.decode(wm.encode()) == wm
    assert Watermark.decode(b"not json") is None
    assert Watermark.decode('{"kind": "other", "run": "r", "chunk": 1, "table": "t"}') is None


def test_a_read_that_missed_a_streamed_transaction_is_refused() -> None:
    recent = RecentTransactions(size=2)
    for xid in (5, 6, 7):
        recent.add(xid)
    assert 5 not in recent and 7 in recent
    assert chunk_consistent([8, 9], recent)
    assert not chunk_consistent([7], recent)


def test_ledger_frontier_moves_only_when_rows_are_committed() -> None:
    ledger = ChunkLedger()
    state = IncrementalState(tables=[], frontier={})
    assert state.add("b", "added") and not state.add("b", "added")
    ledger.handed_out(ChunkDone("b", (100, 9), [10], False))
    ledger.handed_out(ChunkDone("b", None, [20], False))  # every row dropped: with the one before
    ledger.handed_out(ChunkDone("b", (120, 3), [25], True))
    assert ledger.committed((100, 8)) == []
    done = ledger.committed((100, 9))
    assert [d.last_key for d in done] == [[10], [20]]
    assert [state.advance(d) for d in done] == [False, False]
    assert state.frontier["b"] == [20]
    (last,) = ledger.committed((200, 0))
    assert state.advance(last) and state.tables == [] and "b" not in state.frontier
