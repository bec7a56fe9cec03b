"""One workload on MariaDB: the default engine's snapshot and change phases, the raw binlog
read, and row counts."""

from __future__ import annotations

import time
from dataclasses import asdict

from benchmarks import baselines as B
from benchmarks import workloads as W
from benchmarks.harness import EngineSession
from benchmarks.phase_result import phase_dict
from benchmarks.scenario_context import Context, engine_config, nest, spark_counts, write_plan
from benchmarks.scenario_result import WorkloadResult, workload_info
from replicator.config import MySQLSourceConfig


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
        res.generate_seconds = write_plan(ctx, f"mariadb/{w.name}", w.plan, applier, w.events)
        return True

    nest([sess], innermost, not w.snapshot_only)
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
    ice = spark_counts(ctx, sess, source_tables)
    res.check = {
        "source_rows": src_counts,
        "iceberg_rows": {k: v.get("rows") for k, v in ice.items()},
        "iceberg_errors": {k: v["error"] for k, v in ice.items() if "error" in v},
        "equal": all(ice[k].get("rows") == n for k, n in src_counts.items()),
    }
    if not res.check["equal"]:
        ctx.log(f"  WARNING mariadb/{w.name}: row counts differ {res.check}")
    conn.close()
    return res
