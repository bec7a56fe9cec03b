"""The tables of a batch grouped into Spark tasks: every table in exactly one group (one
ordered worker), at most one group per slot, groups balanced by staged rows."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ops_mapping import MappingPolicy
from spark.apply_stage import ONE_TASK_MAX_ROWS, StageSpec, StageTask, group_tasks


def _task(i: int, rows: int) -> StageTask:
    spec = StageSpec(writer=None, key_columns=("id",), data_columns=("id",), policy=MappingPolicy())  # type: ignore[arg-type]
    return StageTask(staged_path=f"/s/{i}.parquet", spec=spec, rows=rows)


@given(st.lists(st.integers(0, 10_000), max_size=120), st.integers(1, 16))
def test_every_table_once_and_at_most_one_group_per_slot(rows: list[int], slots: int) -> None:
    tasks = [_task(i, n) for i, n in enumerate(rows)]
    groups = group_tasks(tasks, slots, one_task_max_rows=ONE_TASK_MAX_ROWS)
    small = sum(rows) <= ONE_TASK_MAX_ROWS  # one task: a second costs more than it saves
    assert len(groups) == (1 if small else max(1, min(slots, len(tasks))))
    indexes = sorted(i for g in groups for i, _ in g)
    assert indexes == list(range(len(tasks)))
    for g in groups:
        assert all(tasks[i] is t for i, t in g)


def test_balanced_by_rows() -> None:
    tasks = [_task(0, 90_000), *(_task(i, 10_000) for i in range(1, 10))]
    groups = group_tasks(tasks, 2)
    loads = sorted(sum(t.rows for _, t in g) for g in groups)
    assert loads == [90_000, 90_000]


def test_a_small_batch_is_one_task() -> None:
    tasks = [_task(0, 1_500), _task(1, 1_400)]
    assert [sorted(i for i, _ in g) for g in group_tasks(tasks, 2, one_task_max_rows=20_000)] == [[0, 1]]
    assert len(group_tasks(tasks, 2)) == 2  # on a cluster: tables spread over executors

