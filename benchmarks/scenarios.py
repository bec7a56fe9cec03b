"""One workload on one source, measured end to end: setup, every consumer's starting point,
the change stream written once, then each consumer reads it in turn.

Order inside a scenario (Postgres; MariaDB is the same without baselines):

1. a database with the workload's tables and initial rows;
2. every engine (the default configuration, plus batch-size variants) starts and takes its
   initial snapshot: they nest (an engine that is idle after its snapshot runs the next one
   from its scenario step), so all of them begin at the same point of the change stream;
3. innermost: logical slots for the baselines and the raw reads are created and the
   baselines' tables loaded with the same initial rows; then the changes are written while
   every engine waits (not measured: the backlog is the offered load);
4. the engines read the backlog one after another (innermost, the default engine, first);
   then the baselines, then the raw reads, then correctness checks and read costs.

The pieces: ``scenario_context`` (context, engine configuration, nesting), ``scenario_result``
(what a workload reports), ``pg_scenario``, ``mysql_scenario``, ``lag_scenario``; this module
is what ``benchmarks.run`` calls, plus the warm-up.
"""

from __future__ import annotations

import time

from benchmarks import workloads as W
from benchmarks.lag_scenario import LOW_LATENCY, lag_scenario
from benchmarks.mysql_scenario import mysql_workload
from benchmarks.pg_scenario import pg_workload
from benchmarks.scenario_context import ENGINE_OVERRIDES_ENV, Context, warming_up

__all__ = ["ENGINE_OVERRIDES_ENV", "LOW_LATENCY", "Context", "lag_scenario", "mysql_workload", "pg_workload",
           "warm_up"]  # fmt: skip


def warm_up(ctx: Context) -> float:
    """JIT and class loading, Python workers, a MERGE: not measured."""
    t0 = time.perf_counter()
    w = W.mixed(3000, seed=ctx.seed + 7, tables=2, keyspace=4000)
    w.name = "warmup"
    saved = dict(ctx.size)
    ctx.size["baseline_cap"] = 60
    try:
        with warming_up():
            pg_workload(ctx, w, baselines=True, sweep=[], read_costs=False)
    finally:
        ctx.size.clear()
        ctx.size.update(saved)
    return time.perf_counter() - t0
