"""What every benchmark scenario runs on: the context (Spark, the private databases, the
work directory, the size), the engine's configuration (with the experiment overrides of
REPLICATOR_BENCH_ENGINE), the nesting of engines at one point of the change stream, and the
replicated tables' row counts."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import EngineSession
from benchmarks.procs import postmaster_pid
from replicator.config import BatchConfig, IcebergConfig, RunConfig, SourceConfig
from replicator.iceberg.tables import iceberg_table_name
from replicator.storage.fileio import file_io_properties
from spark.s3a import configure_spark

PUBLICATION = "replicator"


@dataclass
class Context:
    spark: Any
    root: Path
    size: dict[str, Any]
    seed: int
    probe_path: str | None
    log: Callable[[str], None]
    pg: Any = None  # PrivatePostgres
    mdb: Any = None  # PrivateMariaDB
    mysql_row_decoder: str = "fast"  # source.row_decoder
    _server_id: int = 5000
    _n: int = 0

    def server_id(self) -> int:
        self._server_id += 1
        return self._server_id

    def workdir(self, name: str) -> Path:
        self._n += 1
        d = self.root / f"{self._n:02d}-{name}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def memory_roots(self) -> list[int]:
        pids: list[int] = []
        if self.pg is not None:
            pids += postmaster_pid(self.pg.data_dir)
        if self.mdb is not None and self.mdb._proc is not None:
            pids.append(self.mdb._proc.pid)
        return pids


def engine_config(d: Path, source: SourceConfig, max_events: int | None = None) -> RunConfig:
    d.mkdir(parents=True, exist_ok=True)
    batch = BatchConfig() if max_events is None else BatchConfig(max_events=max_events)
    iceberg = IcebergConfig(catalog_uri=f"sqlite:///{d}/catalog.db", warehouse=str(d / "warehouse"),
                            namespace="cdc")  # fmt: skip
    cfg = RunConfig(source=source, iceberg=iceberg, batch=batch, state_dir=d / "state",
                    writer_id="bench")  # fmt: skip
    if _warming_up:
        cfg = cfg.model_copy(update={"spark": cfg.spark.model_copy(update={"driver_max_rows": 0})})
    return with_overrides(cfg, os.environ.get(ENGINE_OVERRIDES_ENV))


# True while the warm-up runs: its engines send every batch through Spark (its batches are
# small enough for the driver stage, which would leave Spark's first job, JIT and Python
# workers cold for the first measured phase).
_warming_up = False


@contextlib.contextmanager
def warming_up() -> Iterator[None]:
    """Engines configured inside send every batch through Spark (see ``_warming_up``)."""
    global _warming_up
    _warming_up = True
    try:
        yield
    finally:
        _warming_up = False


# Engine settings for experiments, as JSON merged into every engine's config, e.g.
# '{"batch": {"linger_seconds": 0.25}, "maintenance": {"enabled": false}}'. The report shows them.
ENGINE_OVERRIDES_ENV = "REPLICATOR_BENCH_ENGINE"


def with_overrides(cfg: RunConfig, overrides: str | None) -> RunConfig:
    if not overrides:
        return cfg
    data = cfg.model_dump()
    try:
        parsed = json.loads(overrides)
    except ValueError as exc:
        raise SystemExit(f"{ENGINE_OVERRIDES_ENV} is not JSON ({exc}): {overrides!r}") from None
    if not isinstance(parsed, dict):
        raise SystemExit(
            f"{ENGINE_OVERRIDES_ENV} must be a JSON object of config sections: {overrides!r}"
        )
    for section, values in parsed.items():
        if isinstance(values, dict) and isinstance(data.get(section), dict):
            data[section].update(values)
        else:
            data[section] = values
    return RunConfig.model_validate(data)


def spark_counts(ctx: Context, sess: EngineSession, source_tables: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cat = sess.rep.catalog
    for st in source_tables:
        ident = iceberg_table_name(sess.cfg.iceberg, st)
        try:
            table = cat.load_table(ident)
            meta = table.metadata_location
            # Tables on object storage: Iceberg Java reads them with the catalog's credentials.
            configure_spark(ctx.spark, meta, file_io_properties(table.io.properties))
            out[st] = {"metadata": meta,
                       "rows": int(ctx.spark.read.format("iceberg").load(meta).count())}  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - reported
            out[st] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return out


def nest(sessions: list[EngineSession], innermost: Callable[[], bool], changes: bool) -> None:
    """sessions[0] outermost ... sessions[-1] innermost; each takes its snapshot, then runs
    the next one from its idle step; the innermost step writes the changes."""

    def step_for(i: int) -> Callable[[], bool]:
        if i == len(sessions):
            return innermost

        def step() -> bool:
            sessions[i].run("snapshot", [("changes", step_for(i + 1))])
            return changes

        return step

    step_for(0)()


def write_plan(ctx: Context, label: str, plan: list[Any], applier: Any, events: int) -> float:
    """Apply a workload's transactions to its source database; the seconds it took (logged)."""
    t = time.perf_counter()
    for tx in plan:
        applier.apply(tx)
    seconds = time.perf_counter() - t
    ctx.log(f"  {label}: wrote {events:,} changes in {len(plan):,} transactions in {seconds:.1f}s")
    return seconds
