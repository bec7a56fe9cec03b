"""The Prometheus observer: series names as documented, /healthz's rule, scraped over HTTP."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from replicator.cli.logs import JsonFormatter
from replicator.config import load_config
from replicator.errors import ConfigError
from replicator.metrics import PrometheusObserver, parse_listen, reason_kind
from replicator.pipeline.runner import Replicator
from tests.metrics.scrape import healthz, scrape
from tests.pipeline.dbz import ChangeLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def served() -> Iterator[tuple[PrometheusObserver, Clock, int]]:
    clock = Clock()
    obs = PrometheusObserver(unhealthy_after=60, clock=clock, wall_clock=lambda: 1_700_000_010.0)
    _, port = obs.serve("127.0.0.1:0")
    yield obs, clock, port
    obs.close()


def test_series_have_the_documented_names(served: tuple[PrometheusObserver, Clock, int]) -> None:
    obs, _clock, port = served
    obs.started()
    obs.committed(seconds=0.7, events={("public.t", "c"): 3, ("public.t", "u"): 2},
                  newest_source_ms=1_700_000_004_000)
    obs.committed(seconds=1.5, events={("public.t", "c"): 1, ("public.u", "d"): 4}, newest_source_ms=None)
    obs.dead_letter("public.t", "TRUNCATE is not replicated: the Iceberg table keeps the truncated rows")
    obs.table_files("public.t", data=5, position_deletes=1, equality_deletes=2)
    obs.retained_bytes(123456)
    obs.tables_stopped(0)
    obs.maintenance_run("public.t", "compaction")
    got = scrape(port)
    assert got[("replicator_events_total", (("op", "c"), ("table", "public.t")))] == 4
    assert got[("replicator_events_total", (("op", "u"), ("table", "public.t")))] == 2
    assert got[("replicator_events_total", (("op", "d"), ("table", "public.u")))] == 4
    assert got[("replicator_batches_total", ())] == 2
    assert got[("replicator_batch_seconds_count", ())] == 2
    assert got[("replicator_batch_seconds_sum", ())] == pytest.approx(2.2)
    assert got[("replicator_commit_lag_seconds", ())] == pytest.approx(6.0)
    # Not caught up: now minus the newest committed change's source time.
    assert got[("replicator_source_lag_seconds", ())] == pytest.approx(6.0)
    assert got[("replicator_source_retained_bytes", ())] == 123456
    assert got[("replicator_dead_letters_total", (("reason", "truncate"), ("table", "public.t")))] == 1
    assert got[("replicator_tables_stopped", ())] == 0
    assert got[("replicator_table_files", (("content", "data"), ("table", "public.t")))] == 5
    assert got[("replicator_table_files", (("content", "position_deletes"), ("table", "public.t")))] == 1
    assert got[("replicator_table_files", (("content", "equality_deletes"), ("table", "public.t")))] == 2
    assert got[("replicator_maintenance_runs_total", (("kind", "compaction"), ("table", "public.t")))] == 1
    obs.loop(pending=False, caught_up=True)
    assert scrape(port)[("replicator_source_lag_seconds", ())] == 0


def test_unknown_retained_bytes_is_nan_not_zero(served: tuple[PrometheusObserver, Clock, int]) -> None:
    obs, _clock, port = served
    assert math.isnan(scrape(port)[("replicator_source_retained_bytes", ())])
    obs.retained_bytes(None)
    assert math.isnan(scrape(port)[("replicator_source_retained_bytes", ())])


def test_healthz(served: tuple[PrometheusObserver, Clock, int]) -> None:
    obs, clock, port = served
    assert healthz(port)[0] == 503  # the loop has not started
    obs.started()
    assert healthz(port) == (200, "idle\n")
    obs.loop(pending=True, caught_up=False)
    clock.now += 59
    assert healthz(port) == (200, "committing\n")
    clock.now += 2  # changes waited longer than unhealthy_after without a commit
    code, why = healthz(port)
    assert code == 503 and "without a commit" in why
    assert scrape(port)[("replicator_healthy", ())] == 0
    obs.committed(seconds=1, events={}, newest_source_ms=None)
    assert healthz(port)[0] == 200
    clock.now += 3600  # idle for long: still healthy
    obs.loop(pending=False, caught_up=True)
    assert healthz(port)[0] == 200
    obs.tables_stopped(1)
    code, why = healthz(port)
    assert code == 503 and "1 table(s) stopped" in why
    obs.tables_stopped(0)
    obs.ended()
    assert healthz(port)[0] == 503
    assert healthz(port)[1] == "the replication loop is not running\n"


def test_listen_addresses() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen(":9464") == ("0.0.0.0", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    with pytest.raises(ConfigError):
        parse_listen("9464x")


def test_port_in_use_is_a_config_error(served: tuple[PrometheusObserver, Clock, int]) -> None:
    _obs, _clock, port = served
    with pytest.raises(ConfigError, match="cannot serve metrics"):
        PrometheusObserver().serve(f"127.0.0.1:{port}")


def test_dead_letter_reasons_are_a_closed_set() -> None:
    assert reason_kind("TRUNCATE is not applied yet: the Iceberg table keeps its rows") == "truncate"
    assert reason_kind("numeric value 1e400 out of range for decimal(10,2)") == "unrepresentable"
    assert reason_kind("file 0003.jsonl grew after later files were read; ... out of position order") == "out_of_order"
    assert reason_kind("something new") == "other"


def test_metrics_config(tmp_path: Path) -> None:
    base = {"source": {"type": "debezium-json", "path": "in"},
            "iceberg": {"catalog_uri": "sqlite:///c.db", "warehouse": "wh"}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(base))
    cfg = load_config(path)
    assert cfg.metrics.listen is None  # off by default
    path.write_text(yaml.safe_dump({**base, "metrics": {"listen": "127.0.0.1:9464", "unhealthy_after_seconds": 30}}))
    assert load_config(path).metrics.listen == "127.0.0.1:9464"
    path.write_text(yaml.safe_dump({**base, "metrics": {"listen": "localhost"}}))
    with pytest.raises(ConfigError, match="HOST:PORT"):
        load_config(path)


def test_json_log_lines() -> None:
    rec = logging.LogRecord("replicator.x", logging.WARNING, __file__, 1, "lag %ds", (5,), None)
    line = orjson.loads(JsonFormatter().format(rec))
    assert line["level"] == "warning" and line["msg"] == "lag 5s" and line["logger"] == "replicator.x"
    assert line["ts"].endswith("+00:00")


def test_run_loop_reports_to_the_endpoint(tmp_path: Path) -> None:
    """A real run (Debezium files, local engine): per table and op, dead letters, files."""
    items, orders = ChangeLog("items"), ChangeLog("orders")
    for i in range(6):
        items.insert(i, tx=i)
    items.update(1, tx=10, v="x")
    items.delete(2, tx=11)
    orders.insert(1, tx=12)
    (tmp_path / "in").mkdir()
    lines = [*items.lines, *orders.lines]
    trunc = orjson.loads(orders.lines[0])
    trunc["payload"].update(op="t", before=None, after=None)
    lines.append(orjson.dumps(trunc))
    lines.append(b'{"payload": not json')  # dead-lettered: unparseable
    (tmp_path / "in" / "0001.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"app.items": ["id"], "app.orders": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 3, "max_seconds": 3600},
        "state_dir": "state",
    }))
    cfg = load_config(cfg_path)
    obs = PrometheusObserver()
    _, port = obs.serve("127.0.0.1:0")
    try:
        summary = Replicator(cfg, engine="local", observer=obs).run(until_idle=True)
        got = scrape(port)
    finally:
        obs.close()
    assert got[("replicator_events_total", (("op", "c"), ("table", "app.items")))] == 6
    assert got[("replicator_events_total", (("op", "u"), ("table", "app.items")))] == 1
    assert got[("replicator_events_total", (("op", "d"), ("table", "app.items")))] == 1
    assert got[("replicator_events_total", (("op", "c"), ("table", "app.orders")))] == 1
    assert got[("replicator_batches_total", ())] == summary.batches
    assert got[("replicator_events_total", (("op", "t"), ("table", "app.orders")))] == 1
    dead = {k: v for k, v in got.items() if k[0] == "replicator_dead_letters_total"}
    assert [v for k, v in dead.items() if ("reason", "unparseable") in k[1]] == [1], dead
    assert got[("replicator_table_files", (("content", "data"), ("table", "app.items")))] >= 1
    assert got[("replicator_commit_lag_seconds", ())] > 0  # ts_ms of the change log is 2023
    assert got[("replicator_tables_stopped", ())] == 0

    # A restart reads the files the tables already have.
    again = PrometheusObserver()
    _, port = again.serve("127.0.0.1:0")
    try:
        Replicator(cfg, engine="local", observer=again).run(until_idle=True)
        restarted = scrape(port)
    finally:
        again.close()
    for content in ("data", "position_deletes", "equality_deletes"):
        key = ("replicator_table_files", (("content", content), ("table", "app.items")))
        assert restarted[key] == got[key]
