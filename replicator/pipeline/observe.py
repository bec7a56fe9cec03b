"""What the apply path tells a step observer about its own work: typed callbacks at fixed
points, most with the seconds the step took. The base class does nothing.

This is for measurement (``benchmarks/harness.py`` splits a batch's time with it) without
replacing names inside the engine's modules. It differs from ``replicator.metrics.observer``
(what an operator watches: a batch committed, lag, dead letters): these are the steps inside
one batch, on the run loop's thread, one call per table or per job, never per event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from replicator.events.model import ChangeEvent

# Where a batch's files were written: ONE Spark job for every table, or in this process (a
# small batch, ``spark.driver_max_rows``, or the local engine), one call per table.
WrittenBy = Literal["spark", "driver"]


class StepObserver:
    """The no-op step observer."""

    def run_started(self, *, queued: Callable[[], int], held: Callable[[], int]) -> None:
        """The run loop started. Gauges, readable from any thread while the run lasts:
        ``queued()`` the events the source reader handed over that the loop has not taken
        yet (read ahead), ``held()`` the events the batcher holds in memory."""

    def spill_started(self, events: int) -> None:
        """An open transaction outgrew the batch: its ``events`` held in memory go to the
        spill step (``pipeline.spill``), which stages them to chunk files next."""

    def chunk_written(self, table: str, *, rows: int, seconds: float) -> None:
        """One chunk file of a spilled transaction was written for ``table`` (source table);
        ``seconds`` the write's."""

    def events_staged(self, table: str, seconds: float) -> None:
        """A table's events were turned into an Arrow table (``staging.stage_events``)."""

    def files_written(self, seconds: float, *, by: WrittenBy) -> None:
        """The stage wrote files: the batch's Spark job, or one table in this process."""

    def snapshot_committed(
        self, table: str, *, seconds: float, data_files: int, position_delete_files: int,
        equality_delete_files: int,
    ) -> None:  # fmt: skip
        """The catalog accepted one row-delta snapshot of ``table`` (Iceberg identifier);
        ``seconds`` the commit call's."""

    def batch_applied(self, events: Mapping[str, Sequence[ChangeEvent]], seconds: float) -> None:
        """Every table of a batch is committed (or stopped): ``events`` per source table."""

    def maintenance_slice(self, seconds: float) -> None:
        """A maintenance slice ran between batches (successful or not)."""


NULL_STEP_OBSERVER = StepObserver()
