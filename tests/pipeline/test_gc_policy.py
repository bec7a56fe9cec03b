import gc

import pytest

from replicator.pipeline.gc_policy import GEN0_THRESHOLD, run_thresholds


@pytest.fixture(autouse=True)
def _keep_thresholds():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_raises_the_young_threshold_for_the_run_and_restores_it() -> None:
    gc.set_threshold(700, 10, 10)
    with run_thresholds():
        assert gc.get_threshold() == (GEN0_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_restores_even_when_the_run_raises() -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), run_thresholds():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_never_lowers_a_higher_threshold() -> None:
    gc.set_threshold(GEN0_THRESHOLD * 5, 20, 30)
    with run_thresholds():
        assert gc.get_threshold() == (GEN0_THRESHOLD * 5, 20, 30)
    assert gc.get_threshold() == (GEN0_THRESHOLD * 5, 20, 30)


@pytest.fixture()
def _unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("_unfrozen")
def test_the_objects_alive_at_the_start_are_left_out_of_full_collections() -> None:
    # Without the freeze, a full collection walks every start-up object (the engine's
    # libraries: ~200,000, a 0.12-0.2 s pause on the benchmark machine) again and again.
    alive = object(), [1, 2]
    # (No assertion on what the run allocates: another engine thread of the test process may
    # start a run meanwhile and freeze it too, as a nested run does.)
    with run_thresholds():
        assert gc.get_freeze_count() > 0
        assert not any(o is alive[1] for o in gc.get_objects())  # a frozen list is not walked
    assert gc.get_freeze_count() == 0
    assert any(o is alive[1] for o in gc.get_objects())


@pytest.mark.usefixtures("_unfrozen")
def test_nested_runs_unfreeze_when_the_outermost_ends() -> None:
    with run_thresholds():
        with run_thresholds():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


@pytest.mark.usefixtures("_unfrozen")
def test_objects_frozen_before_the_run_stay_frozen() -> None:
    gc.freeze()  # the embedding application's own choice
    with run_thresholds():
        pass
    assert gc.get_freeze_count() > 0
