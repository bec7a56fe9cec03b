"""A real Prometheus server scrapes a running engine on a private Postgres under load.

Through Prometheus' HTTP API: events are counted per table and op, lag and retained WAL are
reported and move, and /healthz turns 503 (``replicator_healthy`` 0) when a table is stopped
by a change the engine refuses (a column whose type changes from int to text)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from tests.e2e.pg_bulk import run_changes, seed
from tests.e2e.pg_support import write_config
from tests.metrics.scrape import healthz

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
WAIT = 240.0  # bound on each wait on a loaded machine (never a timing assertion)


def _prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "prometheus"], capture_output=True, timeout=900)
        found = shutil.which("prometheus")
        if found:
            return found
    pytest.skip("the Prometheus server is not installed and could not be installed "
                "(Debian: apt-get install -y prometheus)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Callable[[int], str]]:
    binary = _prometheus_binary()
    procs: list[subprocess.Popen[bytes]] = []

    def start(target_port: int) -> str:
        port = _free_port()
        conf = tmp_path / "prometheus.yml"
        conf.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "replicator", "scrape_interval": "1s",
                                "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}],
        }))
        log = (tmp_path / "prometheus.log").open("wb")
        proc = subprocess.Popen(
            [binary, f"--config.file={conf}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        _until(lambda: _get(url + "/-/ready") is not None, "Prometheus to be ready")
        return url

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=30)


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = resp.read()
    except OSError:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body


def _until(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT:.0f}s for {what}")
        time.sleep(1)


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """Instant query -> [{metric labels..., "value": float}]."""
    got = _get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    if not isinstance(got, dict) or got.get("status") != "success":
        return []
    return [{**r["metric"], "value": float(r["value"][1])} for r in got["data"]["result"]]


@pytest.mark.slow  # make test-long: make test stays under 25 minutes (metrics are covered by the endpoint's own tests)
def test_prometheus_scrapes_the_engine_under_load(
    tmp_path: Path, pg_db: str, prometheus_factory: Callable[[int], str]
) -> None:
    seed(pg_db, 5_000)
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE victim (id int PRIMARY KEY, n int)")
        conn.execute("INSERT INTO victim VALUES (1, 1)")
    metrics_port = _free_port()
    cfg_path = write_config(tmp_path / "eng", pg_db, max_events=2_000)
    raw = yaml.safe_load(cfg_path.read_text())
    raw["metrics"] = {"listen": f"127.0.0.1:{metrics_port}", "retained_check_seconds": 1}
    cfg_path.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    engine = subprocess.Popen(
        [sys.executable, "-m", "replicator.cli.main", "--log-format", "json", "run", "--config", str(cfg_path),
         "--engine", "local"],
        stdout=subprocess.PIPE, stderr=(tmp_path / "engine.log").open("wb"), env=env,
    )  # fmt: skip
    stop = threading.Event()
    worker = threading.Thread(target=run_changes, args=(pg_db, 10**9),
                              kwargs={"seed_rows": 5_000, "stop": stop, "pause": 0.3})
    try:
        _until(lambda: healthz(metrics_port)[0] == 200 if _alive(engine) else _fail(tmp_path),
               "the engine's /healthz")
        prom = prometheus_factory(metrics_port)
        worker.start()

        # Events per table and op (snapshot rows as r, then streamed c/u/d).
        def ops() -> set[tuple[str, str]]:
            return {(r["table"], r["op"]) for r in query(prom, "replicator_events_total") if r["value"] > 0}

        want = {("public.big", "r"), ("public.big", "c"), ("public.big", "u"), ("public.big", "d"),
                ("public.side", "u"), ("public.pairs", "d")}
        _until(lambda: (_alive(engine) or _fail(tmp_path)) and want <= ops(), f"events {want}")
        files = query(prom, 'replicator_table_files{table="public.big", content="data"}')
        assert files and files[0]["value"] >= 1

        # Lag and retained WAL are reported and move under load.
        for series in ("replicator_source_retained_bytes", "replicator_source_lag_seconds",
                       "replicator_commit_lag_seconds"):
            moved = f"max_over_time({series}[5m]) - min_over_time({series}[5m])"
            _until(lambda s=moved: any(r["value"] > 0 for r in query(prom, s)), f"{series} to move")
        assert query(prom, "replicator_healthy")[0]["value"] == 1

        # A change the engine refuses stops that table: /healthz 503, visible in Prometheus.
        with psycopg.connect(pg_db, autocommit=True) as conn:
            conn.execute("ALTER TABLE victim ALTER COLUMN n TYPE text")
            conn.execute("INSERT INTO victim VALUES (2, 'two')")
        _until(lambda: [r for r in query(prom, "replicator_tables_stopped") if r["value"] == 1],
               "replicator_tables_stopped to be 1")
        _until(lambda: [r for r in query(prom, "replicator_healthy") if r["value"] == 0],
               "replicator_healthy to be 0")
        code, why = healthz(metrics_port)
        assert code == 503 and "1 table(s) stopped" in why
        # The other tables go on: events keep being counted.
        before = sum(r["value"] for r in query(prom, 'replicator_events_total{table="public.big"}'))
        _until(lambda: sum(r["value"] for r in query(prom, 'replicator_events_total{table="public.big"}')) > before,
               "events of the other tables after the stop")
    finally:
        stop.set()
        if worker.is_alive():
            worker.join()
        if engine.poll() is None:
            engine.send_signal(signal.SIGTERM)
            engine.wait(timeout=120)
    # A stopped table ends the run with exit 1 (README exit codes), after a clean stop.
    assert engine.returncode == 1, (tmp_path / "engine.log").read_text()[-3000:]
    lines = (tmp_path / "engine.log").read_text().splitlines()
    assert all(json.loads(x)["level"] for x in lines if x.startswith("{")), "--log-format json"
    assert any("stopping table public.victim" in json.loads(x)["msg"] for x in lines if x.startswith("{"))


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


def _fail(tmp_path: Path) -> bool:
    raise AssertionError("the engine exited:\n" + (tmp_path / "engine.log").read_text()[-3000:])
