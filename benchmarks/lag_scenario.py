"""Lag at a fixed offered rate: a writer process commits at the rate while the engine runs;
each row's lag is its apply time minus its source commit time."""

from __future__ import annotations

import json
import multiprocessing
import time
from typing import Any

from benchmarks import workloads as W
from benchmarks.harness import EngineSession
from benchmarks.lagwriter import lag_workload
from benchmarks.phase_result import phase_dict
from benchmarks.scenario_context import PUBLICATION, Context, engine_config, with_overrides
from benchmarks.scenario_result import workload_info
from replicator.config import MySQLSourceConfig, PostgresSourceConfig, SourceConfig
from replicator.events.block import row_count

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
                # a block event stands for its rows, all of one statement of one transaction
                seen.extend([(int(a["txn"]), commit.wall)] * row_count(ev))

    sess.timings.after_apply = after_apply
    trace = _Trace(sess)
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
        "trace": trace.summary(commits, start),
    })  # fmt: skip
    ctx.log(
        f"  {kind}/lag{' (' + result['setting'] + ')' if setting else ''}: offered {rate:,.0f} events/s for {seconds:.0f}s "
        f"(achieved {result['achieved_rate']:,.0f}); lag p50 {result['p50']:.2f}s "
        f"p99 {result['p99']:.2f}s max {result['max']:.2f}s over {len(lags):,} rows"
    )
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


class _Trace:
    """Per batch, poll and maintenance slice of the run (monotonic times): which batches are
    late and what the run loop did before them (``result["trace"]``)."""

    def __init__(self, sess: EngineSession) -> None:
        self.batches: list[dict[str, Any]] = []
        self.polls: list[tuple[float, float, int]] = []  # start, end, events
        self.slices: list[tuple[float, float]] = []  # end, seconds
        steps = sess.rep.env.steps
        applied, sliced, poll = steps.batch_applied, steps.maintenance_slice, sess.ctl.poll

        def batch_applied(events: Any, seconds: float) -> None:
            applied(events, seconds)
            txns = {int(ev.after["txn"]) for evs in events.values() for ev in evs
                    if ev.after is not None and ev.after.get("txn")}  # fmt: skip
            self.batches.append({"end": time.monotonic(), "wall": time.time(), "apply": seconds,
                                 "events": sum(len(e) for e in events.values()), "txns": txns})  # fmt: skip

        def maintenance_slice(seconds: float) -> None:
            sliced(seconds)
            self.slices.append((time.monotonic(), seconds))

        def traced_poll() -> Any:
            t0, n = time.monotonic(), 0
            for ev in poll():
                n += 1
                yield ev
            self.polls.append((t0, time.monotonic(), n))

        steps.batch_applied = batch_applied  # type: ignore[method-assign]
        steps.maintenance_slice = maintenance_slice  # type: ignore[method-assign]
        sess.ctl.poll = traced_poll  # type: ignore[method-assign]

    def summary(self, commits: dict[int, float], start: float) -> dict[str, Any]:
        """Per batch: when it was committed (s after the writer started), events, apply
        seconds, its oldest row's lag, and the polls / empty polls / maintenance slices
        since the batch before."""
        out: list[dict[str, Any]] = []
        prev = self.batches[0]["end"] - 10 if self.batches else 0.0
        for b in self.batches:
            lags = [b["wall"] - commits[t] for t in b["txns"] if t in commits]
            polls = [p for p in self.polls if prev <= p[1] < b["end"]]
            slices = [s for s in self.slices if prev <= s[0] < b["end"]]
            out.append({
                "at": round(b["wall"] - start, 3), "events": b["events"], "apply": round(b["apply"], 3),
                "max_lag": round(max(lags), 3) if lags else None,
                "polls": len(polls), "empty_polls": sum(1 for p in polls if p[2] == 0),
                "poll_seconds": round(sum(p[1] - p[0] for p in polls), 3),
                "longest_poll": round(max((p[1] - p[0] for p in polls), default=0.0), 3),
                "maintenance": [round(s[1], 3) for s in slices],
            })  # fmt: skip
            prev = b["end"]
        return {"batches": out}
