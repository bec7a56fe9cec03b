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
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import baselines as B
from benchmarks import partitioned as P
from benchmarks import position_mode as DM
from benchmarks import workloads as W
from benchmarks.harness import EngineSession
from benchmarks.lagwriter import lag_workload
from benchmarks.phase_result import phase_dict
from benchmarks.procs import postmaster_pid
from benchmarks.readcost import read_cost
from replicator.config import (
    BatchConfig,
    IcebergConfig,
    MySQLSourceConfig,
    PostgresSourceConfig,
    RunConfig,
    SourceConfig,
)
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import SourcePosition
from replicator.iceberg.tables import iceberg_table_name

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


METRICS_VARIANT = "default + /metrics scraped every 1 s"
ROWWISE_VARIANT = "snapshot row by row (snapshot_copy: false)"


def engine_config(d: Path, source: SourceConfig, max_events: int | None = None) -> RunConfig:
    d.mkdir(parents=True, exist_ok=True)
    batch = BatchConfig() if max_events is None else BatchConfig(max_events=max_events)
    iceberg = IcebergConfig(catalog_uri=f"sqlite:///{d}/catalog.db", warehouse=str(d / "warehouse"),
                            namespace="cdc")  # fmt: skip
    cfg = RunConfig(source=source, iceberg=iceberg, batch=batch, state_dir=d / "state",
                    writer_id="bench")  # fmt: skip
    if _WARMING_UP:
        cfg = cfg.model_copy(update={"spark": cfg.spark.model_copy(update={"driver_max_rows": 0})})
    return with_overrides(cfg, os.environ.get(ENGINE_OVERRIDES_ENV))


# True while the warm-up runs: its engines send every batch through Spark (its batches are
# small enough for the driver stage, which would leave Spark's first job, JIT and Python
# workers cold for the first measured phase).
_WARMING_UP = False


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
        raise SystemExit(f"{ENGINE_OVERRIDES_ENV} must be a JSON object of config sections: {overrides!r}")
    for section, values in parsed.items():
        if isinstance(values, dict) and isinstance(data.get(section), dict):
            data[section].update(values)
        else:
            data[section] = values
    return RunConfig.model_validate(data)


# -- results ----------------------------------------------------------------------------------


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


# -- helpers ----------------------------------------------------------------------------------


def _spark_counts(ctx: Context, sess: EngineSession, source_tables: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cat = sess.rep.catalog
    for st in source_tables:
        ident = iceberg_table_name(sess.cfg.iceberg, st)
        try:
            meta = cat.load_table(ident).metadata_location
            out[st] = {"metadata": meta,
                       "rows": int(ctx.spark.read.format("iceberg").load(meta).count())}  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - reported
            out[st] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return out


def _nest(sessions: list[EngineSession], innermost: Callable[[], bool], changes: bool) -> None:
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


# -- Postgres ---------------------------------------------------------------------------------


def pg_workload(ctx: Context, w: W.Workload, *, baselines: bool, sweep: list[int],
                read_costs: bool, metrics_cost: bool = False,
                partition_by: tuple[str, ...] | None = None,
                delete_modes: tuple[str, ...] = ()) -> WorkloadResult:  # fmt: skip
    import psycopg

    res = WorkloadResult("postgres", workload_info(w))
    d = ctx.workdir(f"pg-{w.name}")
    with psycopg.connect(ctx.pg.dsn_for("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{w.name}"')
    dsn = ctx.pg.dsn_for(w.name)
    conn = psycopg.connect(dsn, autocommit=True)
    applier = W.PgApplier(conn, w)
    t0 = time.perf_counter()
    applier.create()
    res.setup_seconds = time.perf_counter() - t0
    ctx.log(f"  postgres/{w.name}: {w.initial_rows:,} initial rows in {res.setup_seconds:.1f}s")

    variants: list[tuple[str, int | None]] = [(f"max_events={b:,}", b) for b in sweep]
    variants.append(("default", None))
    if partition_by:
        # Inner to the default one, so it reads the backlog before it (the second reader
        # finds the WAL in the page cache: that must not favour the partitioned tables).
        variants.append((P.LABEL, None))
    if not w.snapshot_only:  # inner to the default one too, for the same reason
        variants += [(DM.label(m), None) for m in delete_modes]
    if w.snapshot_only:
        # Inner, so it reads second: it finds the table in the page cache (the conservative
        # order for the COPY path it is the baseline of).
        variants.append((ROWWISE_VARIANT, None))
    if metrics_cost:
        # The default engine again with the Prometheus endpoint on and scraped every second:
        # its rate next to the default one is the cost of metrics (same backlog, same run).
        # Innermost, so it reads the backlog first: the one that reads second finds the WAL
        # in the page cache (measured: +15-26% at load 12-15), which must not favour metrics.
        variants.append((METRICS_VARIANT, None))
    sessions: list[EngineSession] = []
    for label, b in variants:
        slot = ("eng_metrics" if label == METRICS_VARIANT else "eng_rowwise" if label == ROWWISE_VARIANT
                else "eng_parts" if label == P.LABEL else DM.SLOT_PREFIX + (DM.mode_of(label) or "")
                if DM.mode_of(label) else "eng_default" if b is None else f"eng_b{b}")  # fmt: skip
        src = PostgresSourceConfig(type="postgres", dsn=dsn, slot=slot, publication=PUBLICATION,
                           snapshot_copy=label != ROWWISE_VARIANT)  # fmt: skip
        cfg = engine_config(d / slot, src, b)
        if label == P.LABEL and partition_by:
            cfg = P.with_partitions(cfg, [f"public.{t.name}" for t in w.tables], partition_by)
        if DM.mode_of(label):
            cfg = DM.with_delete_mode(cfg, DM.mode_of(label) or "")
        sessions.append(EngineSession(
            cfg, ctx.spark, poll_max=b,
            memory_roots=ctx.memory_roots, probe_path=ctx.probe_path,
            metrics=label == METRICS_VARIANT,
        ))  # fmt: skip
    sinks: list[Any] = []
    slots: dict[str, int] = {}

    def innermost() -> bool:
        if baselines:
            sinks.append(B.SparkMergeSink(ctx.spark, d / "merge", w.tables))
            sinks.append(B.PyIcebergSink(d / "pyiceberg", w.tables))
            slots["bl_merge"] = B.pg_create_slot(dsn, "bl_merge")
            slots["bl_pyiceberg"] = B.pg_create_slot(dsn, "bl_pyiceberg")
            for t in w.tables:
                rows = B.pg_source_rows(dsn, t)
                for s in sinks:
                    s.bootstrap(t.name, rows)
        if w.snapshot_only:
            return False
        for name in ("raw_peek", "raw_stream"):
            slots[name] = B.pg_create_slot(dsn, name)
        t_gen = time.perf_counter()
        for tx in w.plan:
            applier.apply(tx)
        res.generate_seconds = time.perf_counter() - t_gen
        ctx.log(f"  postgres/{w.name}: wrote {w.events:,} changes in {len(w.plan):,} "
                f"transactions in {res.generate_seconds:.1f}s")  # fmt: skip
        return True

    _nest(sessions, innermost, not w.snapshot_only)
    parted: EngineSession | None = None
    by_mode: dict[str, EngineSession] = {}
    main = next(s for (label, _b), s in zip(variants, sessions, strict=True) if label == "default")
    for (label, b), sess in zip(variants, sessions, strict=True):
        phases = {p.name: p for p in sess.phases}
        if label == ROWWISE_VARIANT:
            if "snapshot" in phases:
                res.snapshot_rowwise = phase_dict(phases["snapshot"], label=label)
        elif label == METRICS_VARIANT:
            if "changes" in phases:
                v = phase_dict(phases["changes"], label=label)
                v["max_events"] = BatchConfig().max_events
                v["scrapes"] = sess.scrapes
                res.variants.append(v)
        elif DM.mode_of(label):
            by_mode[DM.mode_of(label) or ""] = sess
            if "changes" in phases:
                res.variants.append({**phase_dict(phases["changes"], label=label),
                                     "delete_mode": DM.mode_of(label)})  # fmt: skip
        elif label == P.LABEL:
            parted = sess
            if "changes" in phases:
                v = phase_dict(phases["changes"], label=label)
                v["partition_by"] = list(partition_by or ())
                res.variants.append(v)
        elif b is None:
            if "snapshot" in phases:
                res.snapshot = phase_dict(phases["snapshot"], label="default")
            if "changes" in phases:
                res.engine = phase_dict(phases["changes"], label="default")
        elif "changes" in phases:
            v = phase_dict(phases["changes"], label=label)
            v["max_events"] = b
            res.variants.append(v)
    m = res.measured
    if m:
        ctx.log(f"  postgres/{w.name}: engine {m['events']:,} events in {m['seconds']:.1f}s = "
                f"{m['rate']:,.0f} events/s (load {m['loadavg']})")  # fmt: skip
    if res.snapshot_rowwise and res.snapshot:
        rw = res.snapshot_rowwise
        ctx.log(f"  postgres/{w.name}: row-by-row snapshot {rw['events']:,} rows in "
                f"{rw['seconds']:.1f}s = {rw['rate']:,.0f} rows/s; COPY / row by row = "
                f"{res.snapshot['rate'] / rw['rate']:.2f}x")  # fmt: skip
    for v in res.variants:
        ctx.log(f"  postgres/{w.name}: engine {v['label']}: {v['rate']:,.0f} events/s, "
                f"{v['events_per_batch']:,.0f} events/batch")  # fmt: skip

    source_tables = [f"public.{t.name}" for t in w.tables]
    if not w.snapshot_only:
        for sink, slot in zip(sinks, ("bl_merge", "bl_pyiceberg"), strict=False):
            src = _pg_source(dsn, slot)
            committed = {st: SourcePosition(source="postgres", parts=(slots[slot], 0))
                         for st in source_tables}  # fmt: skip
            run = B.run_sink_loop(sink.name, src, committed, main.cfg.batch, sink.apply,
                                  expected=w.events, time_cap=ctx.size["baseline_cap"])  # fmt: skip
            bd = asdict(run)
            bd["rate"] = run.rate
            with contextlib.suppress(Exception):
                bd["rows"] = {t.name: sink.count(t.name) for t in w.tables}
            res.baselines.append(bd)
            ctx.log(f"  postgres/{w.name}: {sink.name}: {run.events:,} events in "
                    f"{run.seconds:.1f}s = {run.rate:,.0f} events/s"
                    + (" (time cap)" if run.capped else "") + (f" ERROR {run.error}" if run.error else ""))
        for fn, slot in ((B.pg_raw_peek, "raw_peek"), (B.pg_raw_stream, "raw_stream")):
            try:
                r = fn(dsn, slot, PUBLICATION)
                res.raw.append({**asdict(r), "rate": r.rate, "message_rate": r.message_rate})
                ctx.log(f"  postgres/{w.name}: {r.name}: {r.row_messages:,} row messages "
                        f"({r.messages:,} in all) in {r.seconds:.2f}s = {r.rate:,.0f}/s")  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - reported
                res.errors.append(f"{slot}: {exc}")

    # Correctness: the replicated tables must hold the source's rows.
    src_counts = {f"public.{t.name}": _one(conn, f"SELECT count(*) FROM {t.name}")
                  for t in w.tables}  # fmt: skip
    ice = _spark_counts(ctx, main, source_tables)
    res.check = {
        "source_rows": src_counts,
        "iceberg_rows": {k: v.get("rows") for k, v in ice.items()},
        "equal": all(ice[k].get("rows") == n for k, n in src_counts.items()),
    }
    if parted is not None and partition_by:
        pice = _spark_counts(ctx, parted, source_tables)
        res.check["partitioned_rows"] = {k: v.get("rows") for k, v in pice.items()}
        res.check["equal"] = res.check["equal"] and all(
            pice[k].get("rows") == n for k, n in src_counts.items())  # fmt: skip
        first = source_tables[0]
        try:
            res.partition_reads = P.partition_reads(
                ctx.spark, ice[first].get("metadata"), pice[first].get("metadata"), partition_by)
            for x in res.partition_reads:
                ctx.log(f"  postgres/{w.name}: one month of {first}, {x['label']}: "
                        f"{x['metrics'].get('resultDataFiles')} of {x['data_files']} data files scanned")
        except Exception as exc:  # noqa: BLE001 - reported
            res.errors.append(f"partitioned read: {type(exc).__name__}: {exc}"[:400])
    if by_mode:
        _delete_mode_checks(ctx, res, w, by_mode, ice, src_counts)
    if not res.check["equal"]:
        ctx.log(f"  WARNING postgres/{w.name}: row counts differ {res.check}")
    if read_costs and not w.snapshot_only:
        t = w.tables[0]
        meta = ice[f"public.{t.name}"].get("metadata")
        if meta:
            try:
                rows = B.pg_source_rows(dsn, t)
                key = int(rows.column("id")[rows.num_rows // 2].as_py()) if rows.num_rows else 1
                rc = read_cost(ctx.spark, d / "readcost", t.name, meta, rows, key)
                res.read_cost = asdict(rc)
                ctx.log(f"  postgres/{w.name}: read cost of {t.name}: count "
                        f"{rc.replicated.count_best:.2f}s replicated / "
                        f"{rc.compacted.count_best:.2f}s compacted / {rc.plain.count_best:.2f}s plain")
            except Exception as exc:  # noqa: BLE001 - reported
                res.errors.append(f"read cost: {type(exc).__name__}: {exc}"[:400])
    conn.close()
    _pg_drop_slots(ctx, w.name)
    return res


def _delete_mode_checks(ctx: Context, res: WorkloadResult, w: W.Workload, by_mode: dict[str, EngineSession],
                        ice: dict[str, Any], src_counts: dict[str, int]) -> None:  # fmt: skip
    """The other delete modes' tables: row counts against the source, then one table's read
    cost after the run next to the default engine's (benchmarks/position_mode.py)."""
    source_tables = list(src_counts)
    first = source_tables[0]
    metas = {DM.DEFAULT_MODE: ice[first].get("metadata")}
    for mode, sess in by_mode.items():
        counts = _spark_counts(ctx, sess, source_tables)
        res.check[f"{mode}_rows"] = {k: v.get("rows") for k, v in counts.items()}
        res.check["equal"] = res.check["equal"] and all(counts[k].get("rows") == n for k, n in src_counts.items())
        metas[mode] = counts[first].get("metadata")
    try:
        key = w.initial_rows // 2 + 1
        for mode, meta in metas.items():
            if meta:
                res.delete_mode_reads.append(DM.read_after(ctx.spark, meta, key, mode))
                t = res.delete_mode_reads[-1]
                ctx.log(f"  postgres/{w.name}: read after the run, {mode}: count {t['count_best']:.2f}s, "
                        f"lookup {t['lookup_best']:.2f}s, files {t['files']}")
    except Exception as exc:  # noqa: BLE001 - reported
        res.errors.append(f"delete mode read: {type(exc).__name__}: {exc}"[:400])


def _one(conn: Any, sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def _pg_source(dsn: str, slot: str) -> Any:
    from replicator.sources.postgres.source import PostgresSource

    return PostgresSource(dsn, dead_letters=DeadLetterSink(None), slot=slot,
                          publication=PUBLICATION, progress=False)  # fmt: skip


def _pg_drop_slots(ctx: Context, dbname: str) -> None:
    import psycopg

    with psycopg.connect(ctx.pg.dsn_for("postgres"), autocommit=True) as admin:
        for _ in range(50):
            try:
                admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                              " WHERE database = %s", (dbname,))  # fmt: skip
                return
            except psycopg.errors.ObjectInUse:
                time.sleep(0.1)


# -- MariaDB ----------------------------------------------------------------------------------


def mysql_workload(ctx: Context, w: W.Workload) -> WorkloadResult:
    res = WorkloadResult("mariadb", workload_info(w))
    d = ctx.workdir(f"mdb-{w.name}")
    ctx.mdb.execute(f"CREATE DATABASE `{w.name}`")
    conn = ctx.mdb.connect(db=w.name)
    applier = W.MySQLApplier(conn, w)
    t0 = time.perf_counter()
    applier.create()
    res.setup_seconds = time.perf_counter() - t0
    ctx.log(f"  mariadb/{w.name}: {w.initial_rows:,} initial rows in {res.setup_seconds:.1f}s")
    source_tables = [f"{w.name}.{t.name}" for t in w.tables]
    src = MySQLSourceConfig(type="mysql", dsn=ctx.mdb.dsn_for(dbname=w.name), tables=tuple(source_tables),
                       server_id=ctx.server_id(), row_decoder=ctx.mysql_row_decoder)  # fmt: skip
    sess = EngineSession(engine_config(d / "engine", src), ctx.spark, memory_roots=ctx.memory_roots,
                         probe_path=ctx.probe_path)  # fmt: skip
    position: list[tuple[str, int]] = []

    def innermost() -> bool:
        if w.snapshot_only:
            return False
        position.append(B.mysql_binlog_position(ctx.mdb))
        t = time.perf_counter()
        for tx in w.plan:
            applier.apply(tx)
        res.generate_seconds = time.perf_counter() - t
        ctx.log(f"  mariadb/{w.name}: wrote {w.events:,} changes in {len(w.plan):,} "
                f"transactions in {res.generate_seconds:.1f}s")  # fmt: skip
        return True

    _nest([sess], innermost, not w.snapshot_only)
    phases = {p.name: p for p in sess.phases}
    if "snapshot" in phases:
        res.snapshot = phase_dict(phases["snapshot"], label="default")
    if "changes" in phases:
        res.engine = phase_dict(phases["changes"], label="default")
    m = res.measured
    if m:
        ctx.log(f"  mariadb/{w.name}: engine {m['events']:,} events in {m['seconds']:.1f}s = "
                f"{m['rate']:,.0f} events/s (load {m['loadavg']})")  # fmt: skip
    if position:
        try:
            r = B.mysql_raw(ctx.mdb.dsn_for(dbname=w.name), ctx.server_id(), position[0], w.name)
            res.raw.append({**asdict(r), "rate": r.rate, "message_rate": r.message_rate})
            ctx.log(f"  mariadb/{w.name}: {r.name}: {r.row_messages:,} rows in {r.seconds:.2f}s"
                    f" = {r.rate:,.0f}/s")  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - reported
            res.errors.append(f"raw binlog: {type(exc).__name__}: {exc}"[:400])
    with conn.cursor() as cur:
        src_counts = {}
        for t in w.tables:
            cur.execute(f"SELECT count(*) FROM `{t.name}`")
            src_counts[f"{w.name}.{t.name}"] = cur.fetchone()[0]
    ice = _spark_counts(ctx, sess, source_tables)
    res.check = {
        "source_rows": src_counts,
        "iceberg_rows": {k: v.get("rows") for k, v in ice.items()},
        "equal": all(ice[k].get("rows") == n for k, n in src_counts.items()),
    }
    if not res.check["equal"]:
        ctx.log(f"  WARNING mariadb/{w.name}: row counts differ {res.check}")
    conn.close()
    return res


# -- lag at a fixed offered rate --------------------------------------------------------------


LOW_LATENCY = {"batch": {"linger_seconds": 0.3}}  # the lag scenario's second setting


def lag_scenario(ctx: Context, kind: str, setting: dict[str, Any] | None = None) -> dict[str, Any]:
    """``setting``: engine settings over the defaults (a second run, its own database)."""
    from benchmarks import lagwriter

    rate = float(ctx.size["lag_rate"])
    seconds = float(ctx.size["lag_seconds"])
    events = int(rate * seconds)
    keyspace = int(ctx.size["lag_keyspace"])
    seed = ctx.seed + 100
    w = lag_workload(events, seed, keyspace)
    db = "lag" if setting is None else f"lag{ctx.server_id()}"
    d = ctx.workdir(f"{kind}-{db}")
    if kind == "postgres":
        import psycopg

        with psycopg.connect(ctx.pg.dsn_for("postgres"), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{db}"')
        dsn = ctx.pg.dsn_for(db)
        with psycopg.connect(dsn, autocommit=True) as conn:
            W.PgApplier(conn, w).create()
        src: SourceConfig = PostgresSourceConfig(
            type="postgres", dsn=dsn, slot=f"eng_{db}", publication=PUBLICATION
        )
        writer_dsn = dsn
    else:
        ctx.mdb.execute(f"CREATE DATABASE `{db}`")
        conn = ctx.mdb.connect(db=db)
        W.MySQLApplier(conn, w).create()
        conn.close()
        src = MySQLSourceConfig(type="mysql", dsn=ctx.mdb.dsn_for(dbname=db),
                           tables=tuple(f"{db}.{t.name}" for t in w.tables),
                           server_id=ctx.server_id(), row_decoder=ctx.mysql_row_decoder)  # fmt: skip
        writer_dsn = ctx.mdb.dsn_for("root", "", dbname=db)
    cfg = engine_config(d / "engine", src)
    if setting is not None:
        cfg = with_overrides(cfg, json.dumps(setting))
    sess = EngineSession(cfg, ctx.spark, memory_roots=ctx.memory_roots,
                         probe_path=ctx.probe_path)  # fmt: skip
    seen: list[tuple[int, float]] = []

    def after_apply(events: Any, commit: Any) -> None:
        if commit is None:
            return
        for ev in events:
            a = ev.after
            if a is not None and a.get("txn"):
                seen.append((int(a["txn"]), commit.wall))

    sess.timings.after_apply = after_apply
    out = d / "writer.json"
    procs: list[Any] = []

    def start_writer() -> bool:
        mp = multiprocessing.get_context("spawn")
        p = mp.Process(target=lagwriter.write, name="bench-lag-writer",
                       args=(kind, writer_dsn, events, seed, keyspace, rate, str(out)))  # fmt: skip
        p.start()
        procs.append(p)
        return True

    sess.run(None, [("lag", start_writer)], hold=lambda: bool(procs) and procs[0].is_alive())
    for p in procs:
        p.join(timeout=60)
    result: dict[str, Any] = {"source": kind, "rate": rate, "seconds": seconds, "events": events,
                              "setting": _setting_text(setting)}  # fmt: skip
    try:
        wr = json.loads(out.read_text())
    except (OSError, ValueError) as exc:
        result["error"] = f"writer produced no result: {exc}"
        return result
    commits = {int(k): float(v) for k, v in wr["commits"].items()}
    start = float(wr["start"])
    samples = sorted((commits[txn] - start, wall - commits[txn]) for txn, wall in seen
                     if txn in commits)  # fmt: skip
    lags = sorted(s[1] for s in samples)
    phase = next((p for p in sess.phases if p.name == "lag"), None)
    result.update({
        "writer": {k: wr[k] for k in ("seconds", "events", "transactions", "late_transactions")},
        "achieved_rate": wr["events"] / max(wr["seconds"], 1e-9),
        "samples": len(lags),
        "p50": _pct(lags, 50), "p90": _pct(lags, 90), "p99": _pct(lags, 99),
        "max": lags[-1] if lags else None, "mean": sum(lags) / len(lags) if lags else None,
        "series": _thin(samples, 2000),
        "engine": phase_dict(phase, label="lag") if phase else None,
        "workload": workload_info(w),
    })  # fmt: skip
    ctx.log(f"  {kind}/lag{' (' + result['setting'] + ')' if setting else ''}: offered {rate:,.0f} events/s for {seconds:.0f}s "
            f"(achieved {result['achieved_rate']:,.0f}); lag p50 {result['p50']:.2f}s "
            f"p99 {result['p99']:.2f}s max {result['max']:.2f}s over {len(lags):,} rows")
    return result


def _setting_text(setting: dict[str, Any] | None) -> str:
    if not setting:
        return ""
    return ", ".join(f"{sec}.{k}: {v}" for sec, vals in setting.items() for k, v in vals.items())


def _pct(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[i]


def _thin(samples: list[tuple[float, float]], n: int) -> list[tuple[float, float]]:
    if len(samples) <= n:
        return samples
    step = len(samples) / n
    return [samples[int(i * step)] for i in range(n)]


# -- warm-up ----------------------------------------------------------------------------------


def warm_up(ctx: Context) -> float:
    """JIT and class loading, Python workers, a MERGE: not measured."""
    t0 = time.perf_counter()
    w = W.mixed(3000, seed=ctx.seed + 7, tables=2, keyspace=4000)
    w.name = "warmup"
    saved = dict(ctx.size)
    ctx.size["baseline_cap"] = 60
    global _WARMING_UP
    _WARMING_UP = True
    try:
        pg_workload(ctx, w, baselines=True, sweep=[], read_costs=False)
    finally:
        _WARMING_UP = False
        ctx.size.clear()
        ctx.size.update(saved)
    return time.perf_counter() - t0
