"""Issue 10 item 4 end to end (Postgres): an UPDATE whose new row cannot be converted
(a date of 'infinity') must not leave a stale row behind.

Default ``errors.on_bad_change: stop``: the table stops at the batch before it (exit 1, the
message names table, key, position and reason). After the source row is fixed and the policy
switched to ``dead-letter``, the bad change is dead-lettered with its old row deleted, the
fix applies on top, the run exits 3 and ``replicator diff`` exits 0.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from replicator.cli.main import EXIT_DEAD_LETTERS, EXIT_FAILED, main
from tests.e2e.pg_support import iceberg_metadata, load, write_config
from tests.judges import duckdb_rows, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def _rows(cfg_path: Path) -> list[dict[str, Any]]:
    loc = iceberg_metadata(load(cfg_path), "public.p")
    rows = spark_rows(loc, ["id"])
    assert rows == duckdb_rows(loc, ["id"])
    return rows


def test_bad_update_stops_then_dead_letter_deletes_old_row(
    tmp_path: Path, pg_db: str, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE p (id int PRIMARY KEY, d date)")
        conn.execute("INSERT INTO p VALUES (1, '2020-01-01'), (2, '2020-01-02')")
    cfg_path = write_config(tmp_path, pg_db)
    assert main(["run", "--config", str(cfg_path), "--until-idle"]) == 0
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("UPDATE p SET d = 'infinity' WHERE id = 1")
        conn.execute("UPDATE p SET d = '2021-01-01' WHERE id = 2")
    capsys.readouterr()
    assert main(["run", "--config", str(cfg_path), "--until-idle"]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "STOPPED public.p" in out and "key=[1]" in out and "position=postgres:" in out
    assert "infinity" in out, out
    # Nothing of the stopped batch is in the table: the state before the bad change.
    assert [(r["id"], r["d"]) for r in _rows(cfg_path)] == [
        (1, dt.date(2020, 1, 1)), (2, dt.date(2020, 1, 2))]

    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("UPDATE p SET d = '2022-02-02' WHERE id = 1")  # fixed at the source
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["errors"] = {"on_bad_change": "dead-letter"}
    cfg_path.write_text(yaml.safe_dump(cfg))
    assert main(["run", "--config", str(cfg_path), "--until-idle"]) == EXIT_DEAD_LETTERS
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("1 change(s) dead-lettered"), last
    assert [(r["id"], r["d"]) for r in _rows(cfg_path)] == [
        (1, dt.date(2022, 2, 2)), (2, dt.date(2021, 1, 1))]
    assert main(["diff", "--config", str(cfg_path), "--wait", "30"]) == 0, capsys.readouterr().out
