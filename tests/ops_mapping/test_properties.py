"""Property tests: any history, any batching, any chunking -> the table equals the source.

Example counts come from the profiles in conftest (300 per test by default;
``HYPOTHESIS_PROFILE=long`` for 5000, ``OPS_MAPPING_EXAMPLES=N`` to override).
"""

from __future__ import annotations

from hypothesis import given

from tests.ops_mapping.opsmap_harness import Replica
from tests.ops_mapping.opsmap_properties import (
    Scenario,
    check_chunking_invariant,
    check_history,
    check_run_shape,
    ops_settings,
    scenarios,
)


@ops_settings()
@given(scenarios("valid"))
def test_valid_history_table_equals_source_after_every_batch(sc: Scenario) -> None:
    check_history(sc)


@ops_settings()
@given(scenarios("absent_deletes"))
def test_deletes_of_absent_keys_are_harmless(sc: Scenario) -> None:
    check_history(sc)


@ops_settings()
@given(scenarios("chaos"))
def test_full_upsert_policy_converges_on_any_op_sequence(sc: Scenario) -> None:
    check_history(sc)


@ops_settings()
@given(scenarios("chaos", max_events=60))
def test_no_two_live_rows_share_a_key_and_deletes_stay_in_range(sc: Scenario) -> None:
    rep = Replica(sc.layout, sc.policy)
    for events, cuts in zip(sc.batches, sc.chunk_cuts, strict=True):
        run = rep.batch(events, cuts)
        check_run_shape(run, sc.policy)
        assert rep.table.duplicate_keys() == {}


@ops_settings()
@given(scenarios("absent_deletes"))
def test_chunking_does_not_change_the_output(sc: Scenario) -> None:
    check_chunking_invariant(sc)


@ops_settings()
@given(scenarios("deferred"))
def test_key_swaps_cycles_and_shifts_under_a_deferred_key(sc: Scenario) -> None:
    """Issue 10 item 12: ``u 1->2, u 2->1`` in one batch (a DEFERRABLE primary key)."""
    check_history(sc)
