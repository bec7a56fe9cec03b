"""A workload's results on one source: every consumer's phases, the checks, the read costs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmarks import workloads as W


@dataclass
class WorkloadResult:
    source: str
    workload: dict[str, Any]
    setup_seconds: float = 0.0
    generate_seconds: float = 0.0
    snapshot: dict[str, Any] | None = None  # the default engine's initial snapshot phase
    # The same snapshot read row by row (source.snapshot_copy: false), same run: the baseline
    # of the COPY path (Postgres snapshot workload only).
    snapshot_rowwise: dict[str, Any] | None = None
    engine: dict[str, Any] | None = None  # the default engine's change phase
    variants: list[dict[str, Any]] = field(default_factory=list)
    baselines: list[dict[str, Any]] = field(default_factory=list)
    raw: list[dict[str, Any]] = field(default_factory=list)
    check: dict[str, Any] = field(default_factory=dict)
    read_cost: dict[str, Any] | None = None
    # One month read from the default and the partitioned engine's table (benchmarks/partitioned.py).
    partition_reads: list[dict[str, Any]] = field(default_factory=list)
    # Reading the first table after the run, per delete mode (benchmarks/position_mode.py).
    delete_mode_reads: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def measured(self) -> dict[str, Any] | None:
        """The number that stands for this workload: the change phase, or the snapshot."""
        return self.engine if self.engine is not None else self.snapshot


def workload_info(w: W.Workload) -> dict[str, Any]:
    return {
        "name": w.name, "title": w.title, "description": w.description, "events": w.events,
        "transactions": len(w.plan), "ops": w.op_counts(), "initial_rows": w.initial_rows,
        "tables": [t.name for t in w.tables], "columns": len(w.tables[0].columns),
        "seed": w.seed,
    }  # fmt: skip
