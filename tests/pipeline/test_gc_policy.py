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
