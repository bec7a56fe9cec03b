"""Hypothesis strategies for CDC histories and the property checks run on them.

A history is a list of events over a tiny key space (so keys collide), cut into batches at
random points and each batch into random RecordBatch chunks. Three modes:

- ``valid``: what a real database emits: inserts of absent keys, updates / deletes of present
  keys, key changes to absent keys; plus snapshot re-reads ('r') of present keys when the
  policy upserts reads and re-sent creates of present keys when it upserts creates (replays);
- ``absent_deletes``: ``valid`` plus deletes of keys that are not there;
- ``chaos``: any op on any key with the full upsert policy (replays, reordered snapshots):
  the table must still converge to the source's upsert semantics;
- ``deferred``: ``valid`` plus key permutations under a DEFERRABLE primary key, each within
  one batch (one transaction): swaps and cycles of present keys (``UPDATE t SET id = 3 - id``)
  and shifts onto an absent key (``SET id = id + 1``), their updates in any order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import currently_in_test_context, event, settings
from hypothesis import strategies as st

from ops_mapping import BatchMapper, MappingPolicy
from ops_mapping.contract import MIB
from tests.ops_mapping.opsmap_harness import (
    COMPOSITE,
    SIMPLE,
    BatchRun,
    Ev,
    Key,
    Layout,
    Replica,
    map_batch,
    pos_deletes,
)

KEYSPACE: dict[str, list[Key]] = {
    "simple": [(i,) for i in range(6)],
    "composite": [(t, i) for t in ("a", "b") for i in range(3)],
}
LAYOUTS = {"simple": SIMPLE, "composite": COMPOSITE}
LAYOUT_NAMES = ("simple", "composite")  # simplest first: Hypothesis shrinks towards it
TARGETS = [1, 30, 64, 200, 128 * MIB]
MODES = ("valid", "absent_deletes", "chaos", "deferred")

# Strategies built once: building one per draw costs more than the test itself.
_INDEX: dict[int, st.SearchStrategy[int]] = {n: st.integers(0, n - 1) for n in range(1, 64)}
_BOOL = st.booleans()


def _pick(draw: st.DrawFn, items: Sequence[Any]) -> Any:
    """``draw(st.sampled_from(items))`` without building a strategy (shrinks to items[0])."""
    return items[draw(_INDEX[len(items)])]


def ops_settings(**overrides: Any) -> settings:
    """The active ops_mapping profile (see conftest), with per-test overrides."""
    name = f"ops_mapping-{os.environ.get('HYPOTHESIS_PROFILE', 'default')}"
    try:
        parent = settings.get_profile(name)
    except Exception:  # another suite's profile name: use ours
        parent = settings.get_profile("ops_mapping-default")
    if "OPS_MAPPING_EXAMPLES" in os.environ:
        overrides.setdefault("max_examples", int(os.environ["OPS_MAPPING_EXAMPLES"]))
    return settings(parent, **overrides)


@dataclass(frozen=True)
class Scenario:
    layout_name: str
    policy: MappingPolicy
    batches: tuple[tuple[Ev, ...], ...]
    chunk_cuts: tuple[tuple[int, ...], ...]

    @property
    def layout(self) -> Layout:
        return LAYOUTS[self.layout_name]


def _row(layout_name: str, key: Key, seq: int, pad: int) -> dict[str, Any]:
    if layout_name == "simple":
        return {"id": key[0], "val": f"{seq}:" + "x" * pad}
    return {"tenant": key[0], "id": key[1], "val": seq, "note": "n" * pad if pad else None}


@st.composite
def scenarios(draw: st.DrawFn, mode: str = "valid", max_events: int = 40) -> Scenario:
    layout_name = _pick(draw, LAYOUT_NAMES)
    keys = KEYSPACE[layout_name]
    target = _pick(draw, TARGETS)
    if mode == "chaos":
        policy = MappingPolicy(target, upsert_creates=True, upsert_reads=True)
    elif mode == "deferred":
        # Key moves onto held keys are told apart from replays only without upserted creates
        # (replayed batches upsert; a permutation is never in the replayed overlap).
        policy = MappingPolicy(target, upsert_creates=False, upsert_reads=draw(_BOOL))
    else:
        policy = MappingPolicy(target, draw(_BOOL), draw(_BOOL))
    chaos = _chaos_steps(keys)
    n = draw(st.integers(0, max_events))
    present: set[Key] = set()
    events: list[Ev] = []
    spans: list[tuple[int, int]] = []  # [start, end) of each deferred permutation
    seq = 0
    while seq < n:
        if mode == "deferred" and len(present) >= 2 and draw(_BOOL):
            start = len(events)
            for before, after in _permutation(draw, keys, present):
                seq += 1
                row = _row(layout_name, after, seq, (seq * 7) % 13)
                events.append(Ev(seq, "u", before, row, deferred=True))
            spans.append((start, len(events)))
            continue
        seq += 1
        # One draw per event keeps generation cheap; pad (row size) just varies with seq.
        steps = chaos if mode == "chaos" else _valid_steps(mode, policy, keys, present)
        op, before, after = _pick(draw, steps)
        if before is not None:
            present.discard(before)
        row = None
        if after is not None:
            row = _row(layout_name, after, seq, (seq * 7) % 13)
            present.add(after)
        events.append(Ev(seq, op, before, row))
    n = len(events)
    # A permutation is one transaction: batches close at transaction boundaries only.
    cut_points = [b for b in draw(st.lists(st.integers(0, n), max_size=5))
                  if not any(a < b < e for a, e in spans)]
    bounds = [0, *sorted(cut_points), n]
    batches = tuple(tuple(events[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))
    cuts = tuple(
        tuple(draw(st.lists(st.integers(0, len(b)), max_size=3))) if b else () for b in batches
    )
    return Scenario(layout_name, policy, batches, cuts)


Step = tuple[str, Key | None, Key | None]  # (op, before key, after key)


def _permutation(draw: st.DrawFn, keys: list[Key], present: set[Key]) -> list[tuple[Key, Key]]:
    """(before, after) key moves of one deferred-check transaction, in a drawn order: a
    cycle of present keys, or a chain of present keys whose last one moves to an absent key.
    Updates ``present``."""
    pres = [k for k in keys if k in present]
    absent = [k for k in keys if k not in present]
    chain = draw(st.lists(st.sampled_from(pres), min_size=2, max_size=min(4, len(pres)), unique=True))
    if absent and draw(_BOOL):  # shift: c0 -> c1 -> ... -> absent
        target = _pick(draw, absent)
        moves = [(a, b) for a, b in zip(chain, chain[1:], strict=False)] + [(chain[-1], target)]
        present.discard(chain[0])
        present.add(target)
    else:  # swap / cycle
        moves = [(a, b) for a, b in zip(chain, chain[1:] + chain[:1], strict=True)]
    order = draw(st.permutations(range(len(moves))))
    return [moves[i] for i in order]


def _chaos_steps(keys: list[Key]) -> list[Step]:
    steps: list[Step] = [(op, None, k) for k in keys for op in ("c", "r")]
    steps += [("d", k, None) for k in keys]
    steps += [("u", b, a) for b in keys for a in keys]
    return steps


def _valid_steps(
    mode: str, policy: MappingPolicy, keys: list[Key], present: set[Key]
) -> list[Step]:
    """Events a real source could send now (simplest first, for shrinking)."""
    pres = [k for k in keys if k in present]
    absent = [k for k in keys if k not in present]
    steps: list[Step] = [("u", k, k) for k in pres] + [("d", k, None) for k in pres]
    steps += [("c", None, k) for k in absent]
    steps += [("r", None, k) for k in absent]  # initial snapshot
    steps += [("u", k, a) for k in pres for a in absent]  # primary-key change
    if policy.upsert_reads:
        steps += [("r", None, k) for k in pres]  # snapshot overlapping the stream
    if policy.upsert_creates:
        steps += [("c", None, k) for k in pres]  # replayed insert
    if mode == "absent_deletes":
        steps += [("d", k, None) for k in absent]
    return steps


# -- checks --------------------------------------------------------------------------------


def check_run_shape(run: BatchRun, policy: MappingPolicy) -> None:
    """What one batch's output promises, whatever the events were."""
    rows = run.tail.file_rows
    pds = pos_deletes(run)
    assert pds == sorted(set(pds)), "position deletes unsorted or duplicated"
    for f, p in pds:
        assert 0 <= f < len(rows) and 0 <= p < rows[f], f"position delete {(f, p)} past rows"
    for n_rows, nbytes in zip(rows, run.tail.file_estimated_bytes, strict=True):
        assert n_rows >= 1
        assert nbytes <= policy.target_file_bytes or n_rows == 1, "file over target"
    assert run.tail.stats.live_rows_written >= 0


ReplicaFactory = Callable[[Scenario], Replica]


def default_replica(sc: Scenario) -> Replica:
    return Replica(sc.layout, sc.policy)


def check_history(sc: Scenario, make_replica: ReplicaFactory = default_replica) -> None:
    """After every batch the table's live rows equal the source, one row per key."""
    rep = make_replica(sc)
    for number, (events, cuts) in enumerate(zip(sc.batches, sc.chunk_cuts, strict=True)):
        run = rep.batch(events, cuts)
        check_run_shape(run, sc.policy)
        assert rep.table.duplicate_keys() == {}, f"duplicate keys after batch {number}"
        assert rep.live() == rep.source, f"table differs from source after batch {number}"
        _note_coverage(run, events)


def _note_coverage(run: BatchRun, events: Sequence[Ev]) -> None:
    """Label what the example exercised (``--hypothesis-show-statistics`` shows the mix)."""
    if not currently_in_test_context():  # e.g. a demo re-checking a found example
        return
    stats = run.tail.stats
    if stats.position_deletes:
        event("position deletes")
    if stats.equality_deletes:
        event("equality deletes")
    if stats.data_files > 1:
        event("rolled to several files")
    if len(run.chunks) > 1:
        event("several chunks")
    if any(e.op == "u" and e.after is not None and e.before != _key(e) for e in events):
        event("key change")


def _key(e: Ev) -> Key:
    assert e.after is not None
    return tuple(v for k, v in e.after.items() if k in ("tenant", "id"))


def check_chunking_invariant(
    sc: Scenario, mapper_cls: Callable[..., BatchMapper] = BatchMapper
) -> None:
    """Cutting a batch into RecordBatches does not change what it writes or deletes."""
    for events, cuts in zip(sc.batches, sc.chunk_cuts, strict=True):
        whole = map_batch(sc.layout, events, sc.policy, (), mapper_cls)
        parts = map_batch(sc.layout, events, sc.policy, cuts, mapper_cls)
        assert _summary(whole) == _summary(parts)


def _summary(run: BatchRun) -> tuple[Any, ...]:
    files: dict[int, list[dict[str, Any]]] = {}
    for c in run.chunks:
        for s in c.data:
            files.setdefault(s.file_index, []).extend(s.rows.to_pylist())
    eq = [row for c in run.chunks for row in c.equality_deletes.to_pylist()]
    return files, eq, pos_deletes(run), run.tail.stats, run.tail.file_estimated_bytes
