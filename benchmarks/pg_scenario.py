"""One workload on Postgres: the default engine and its variants (batch sizes, partitioned,
delete modes, row-by-row snapshot, metrics on), the baselines and the raw slot reads, all
from one point of the change stream; then row counts and read costs."""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict
from typing import Any

from benchmarks import baselines as B
from benchmarks import partitioned as P
from benchmarks import position_mode as DM
from benchmarks import workloads as W
from benchmarks.harness import EngineSession
from benchmarks.phase_result import phase_dict
from benchmarks.readcost import read_cost
from benchmarks.scenario_context import (
    PUBLICATION,
    Context,
    engine_config,
    nest,
    spark_counts,
    write_plan,
)
from benchmarks.scenario_result import WorkloadResult, workload_info
from benchmarks.targets import REPEAT_LABEL
from replicator.config import BatchConfig, PostgresSourceConfig
from replicator.events.deadletter import DeadLetterSink
from replicator.events.model import SourcePosition

METRICS_VARIANT = "default + /metrics scraped every 1 s"
ROWWISE_VARIANT = "snapshot row by row (snapshot_copy: false)"


def pg_workload(ctx: Context, w: W.Workload, *, baselines: bool, sweep: list[int],
                read_costs: bool, metrics_cost: bool = False,
                partition_by: tuple[str, ...] | None = None,
                delete_modes: tuple[str, ...] = (), repeats: int = 1) -> WorkloadResult:  # fmt: skip
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
    # The default engine again on slots of its own, the same backlog (``repeats`` in all):
    # inner to the default one, so the first of them reads the WAL from disk and the default
    # one reads it last; the verdict takes the median (``targets.engine_runs``).
    variants += [(f"{REPEAT_LABEL} {i}", None) for i in range(2, repeats + 1)]
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
        slot = (f"eng_rep{label.split()[-1]}" if label.startswith(REPEAT_LABEL)
                else "eng_metrics" if label == METRICS_VARIANT else "eng_rowwise" if label == ROWWISE_VARIANT
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
        res.generate_seconds = write_plan(ctx, f"postgres/{w.name}", w.plan, applier, w.events)
        return True

    nest(sessions, innermost, not w.snapshot_only)
    parted: EngineSession | None = None
    by_mode: dict[str, EngineSession] = {}
    main = next(s for (label, _b), s in zip(variants, sessions, strict=True) if label == "default")
    for (label, b), sess in zip(variants, sessions, strict=True):
        phases = {p.name: p for p in sess.phases}
        if label.startswith(REPEAT_LABEL):
            if "changes" in phases:
                res.variants.append({**phase_dict(phases["changes"], label=label),
                                     "repeat": int(label.split()[-1])})  # fmt: skip
        elif label == ROWWISE_VARIANT:
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
    if w.snapshot_only:
        _raw_copy(ctx, res, dsn, w, conn)
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
            ctx.log(
                f"  postgres/{w.name}: {sink.name}: {run.events:,} events in "
                f"{run.seconds:.1f}s = {run.rate:,.0f} events/s"
                + (" (time cap)" if run.capped else "")
                + (f" ERROR {run.error}" if run.error else "")
            )
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
    ice = spark_counts(ctx, main, source_tables)
    res.check = {
        "source_rows": src_counts,
        "iceberg_rows": {k: v.get("rows") for k, v in ice.items()},
        "iceberg_errors": {k: v["error"] for k, v in ice.items() if "error" in v},
        "equal": all(ice[k].get("rows") == n for k, n in src_counts.items()),
    }
    if parted is not None and partition_by:
        pice = spark_counts(ctx, parted, source_tables)
        res.check["partitioned_rows"] = {k: v.get("rows") for k, v in pice.items()}
        res.check["equal"] = res.check["equal"] and all(
            pice[k].get("rows") == n for k, n in src_counts.items())  # fmt: skip
        first = source_tables[0]
        try:
            res.partition_reads = P.partition_reads(
                ctx.spark, ice[first].get("metadata"), pice[first].get("metadata"), partition_by
            )
            for x in res.partition_reads:
                ctx.log(
                    f"  postgres/{w.name}: one month of {first}, {x['label']}: "
                    f"{x['metrics'].get('resultDataFiles')} of {x['data_files']} data files scanned"
                )
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
                ctx.log(
                    f"  postgres/{w.name}: read cost of {t.name}: count "
                    f"{rc.replicated.count_best:.2f}s replicated / "
                    f"{rc.compacted.count_best:.2f}s compacted / {rc.plain.count_best:.2f}s plain"
                )
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
        counts = spark_counts(ctx, sess, source_tables)
        res.check[f"{mode}_rows"] = {k: v.get("rows") for k, v in counts.items()}
        res.check["equal"] = res.check["equal"] and all(
            counts[k].get("rows") == n for k, n in src_counts.items()
        )
        metas[mode] = counts[first].get("metadata")
    try:
        key = w.initial_rows // 2 + 1
        for mode, meta in metas.items():
            if meta:
                res.delete_mode_reads.append(DM.read_after(ctx.spark, meta, key, mode))
                t = res.delete_mode_reads[-1]
                ctx.log(
                    f"  postgres/{w.name}: read after the run, {mode}: count {t['count_best']:.2f}s, "
                    f"lookup {t['lookup_best']:.2f}s, files {t['files']}"
                )
    except Exception as exc:  # noqa: BLE001 - reported
        res.errors.append(f"delete mode read: {type(exc).__name__}: {exc}"[:400])


def _raw_copy(ctx: Context, res: WorkloadResult, dsn: str, w: W.Workload, conn: Any) -> None:
    """The snapshot's baseline, after the engines (the table in the page cache: the
    conservative order for the ratio), best of two."""
    t = w.tables[0]
    rows = int(_one(conn, f"SELECT count(*) FROM {t.name}"))
    try:
        r = min((B.pg_raw_copy(dsn, t.name, "id", rows) for _ in range(2)), key=lambda x: x.seconds)
    except Exception as exc:  # noqa: BLE001 - reported
        res.errors.append(f"raw COPY: {exc}")
        return
    res.raw.append({**asdict(r), "rate": r.rate, "message_rate": r.message_rate})
    ctx.log(f"  postgres/{w.name}: {r.name}: {rows:,} rows in {r.seconds:.2f}s = {r.rate:,.0f}/s")


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
