"""Demonstrations that the property checks catch classic bugs (injected here, on purpose).

Each test breaks something in a subclass or a harness variant, asks Hypothesis to *find* a
history the check rejects, and asserts it does (``-s`` prints the shrunk counterexample).
More mutants, of the real source, are in ``mutants.py`` (run by hand).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, find, settings
from hypothesis.errors import NoSuchExample

from ops_mapping import BatchMapper
from ops_mapping.iceberg_semantics import IcebergTableModel, batch_commit_parts
from tests.ops_mapping.opsmap_harness import Key, Replica, Row, map_batch, source_apply
from tests.ops_mapping.opsmap_properties import (
    Scenario,
    check_chunking_invariant,
    check_history,
    scenarios,
)

pytestmark = pytest.mark.ops_demo

_FIND = settings(
    max_examples=2000,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def _fails(check: Callable[[Scenario], None]) -> Callable[[Scenario], bool]:
    def fails(sc: Scenario) -> bool:
        try:
            check(sc)
        except AssertionError:
            return True
        return False

    return fails


def _counterexample(mode: str, check: Callable[[Scenario], None]) -> Scenario:
    try:
        return find(scenarios(mode), _fails(check), settings=_FIND)
    except NoSuchExample:  # pragma: no cover - this is the failure the demo guards against
        pytest.fail("the property did not notice the injected bug")


class _Forgetful(dict[Any, int]):
    """A key map that stores keys but never finds them: every delete of a key written in
    this batch becomes an equality delete, which cannot remove a row of the same commit."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default

    def pop(self, key: Any, default: Any = None) -> Any:
        super().pop(key, None)
        return default


class EqualityOnlyMapper(BatchMapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._keys.live = _Forgetful()


def test_equality_delete_instead_of_position_delete_is_caught() -> None:
    def broken(sc: Scenario) -> None:
        check_history(sc, lambda s: Replica(s.layout, s.policy, EqualityOnlyMapper))

    found = _counterexample("valid", broken)
    events = [e for b in found.batches for e in b]
    assert len(events) >= 2, found  # one event alone cannot show it
    print("counterexample:", found)


def test_merging_two_batches_into_one_commit_is_caught() -> None:
    """The writer commits batches pairwise under one sequence number: an equality delete of
    the second batch then no longer removes rows of the first."""

    def merged(sc: Scenario) -> None:
        table = IcebergTableModel(sc.layout.key_columns)
        source: dict[Key, Row] = {}
        pairs = list(zip(sc.batches, sc.chunk_cuts, strict=True))
        for start in range(0, len(pairs), 2):
            files: dict[str, list[Row]] = {}
            pos: list[tuple[str, int]] = []
            eq: list[Key] = []
            for j, (events, cuts) in enumerate(pairs[start : start + 2]):
                run = map_batch(sc.layout, events, sc.policy, cuts)
                parts = batch_commit_parts(run.chunks, run.tail, f"c{start}-b{j}-f")
                files.update(parts.data_files)
                pos += parts.position_deletes
                eq += parts.equality_deletes
                for e in events:
                    source_apply(source, sc.layout, e)
            table.commit(files, pos, eq)
            assert table.live_by_key() == source

    found = _counterexample("valid", merged)
    check_history(found)  # committed batch by batch, the same history is fine
    assert len(found.batches) >= 2, found
    print("counterexample:", found)


def test_chunk_state_reset_is_caught() -> None:
    """A mapper that forgets its key map between RecordBatches (state not carried over)."""

    class ResettingMapper(BatchMapper):
        def map_chunk(self, events: Any) -> Any:
            self._keys.live.clear()
            return super().map_chunk(events)

    def broken(sc: Scenario) -> None:
        check_chunking_invariant(sc, ResettingMapper)

    found = _counterexample("valid", broken)
    assert any(found.chunk_cuts), found
    print("counterexample:", found)
