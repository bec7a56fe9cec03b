"""``replicator diff`` with a MariaDB source: the sample shop replicated from the binlog by
the engine, compared through Iceberg Java, then changed behind the engine's back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import replicator.verify.diff as verify_diff
from replicator.cli.main import main
from tests.verify.conftest import MySQLReplicated, replicate, write_mysql_config
from tests.verify.tamper import load_table, rows, tamper

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def diff(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    rc = main(["diff", "--config", str(config), "--json", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_replicated_mysql_shop_matches(
    mysql_shop: MySQLReplicated, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, doc = diff(mysql_shop.config, capsys, "--chunk-rows", "16")
    assert rc == 0, doc
    c = doc["consistency"]
    assert c["mode"] == "quiescent" and c["source_position"].startswith("binlog "), c
    names = {t["source_table"].split(".", 1)[1] for t in doc["tables"]}
    assert names == {"customers", "products", "orders", "order_items"}
    assert all(t["source_rows"] == t["iceberg_rows"] > 0 for t in doc["tables"]), doc


def test_mysql_row_changed_and_added_in_iceberg(
    mysql_shop: MySQLReplicated, capsys: pytest.CaptureFixture[str]
) -> None:
    table = load_table(mysql_shop.config, "cdc.products")
    victim = rows(table, ["id"])[2]
    edited = dict(victim, title=victim["title"] + " (x)")
    ghost = dict(victim, id=10**8)
    tamper(table, delete=[victim], add=[edited, ghost])

    rc, doc = diff(mysql_shop.config, capsys, "--table", "products")
    assert rc == 1, doc
    (t,) = doc["tables"]
    assert (t["missing"], t["extra"], t["changed"]) == (0, 1, 1)
    assert t["extra_keys"] == [{"id": 10**8}]
    assert t["changed_rows"][0]["key"] == {"id": victim["id"]}
    assert t["changed_rows"][0]["columns"] == ["title"]

    tamper(load_table(mysql_shop.config, "cdc.products"), delete=[edited, ghost], add=[victim])
    assert diff(mysql_shop.config, capsys, "--table", "products")[0] == 0


def test_mysql_engine_behind_then_past_the_snapshot(
    mysql_shop: MySQLReplicated, spark: Any, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    conn = mysql_shop.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE customers SET full_name = CONCAT(full_name, '!') LIMIT 1")
        rc, doc = diff(mysql_shop.config, capsys, "--wait", "0")
        assert rc == 2 and "not committed yet" in doc["error"], doc

        wait = verify_diff._wait_for_engine

        def wait_then_move_on(*args: Any, **kwargs: Any) -> Any:
            state = wait(*args, **kwargs)
            with conn.cursor() as cur:  # after the diff's snapshot, replicated before the pin
                cur.execute("UPDATE products SET stock = stock + 1 WHERE id % 3 = 0")
                cur.execute("UPDATE orders SET status = 'paid' WHERE id % 4 = 0")
                cur.execute("DELETE FROM order_items WHERE line_no = 2 LIMIT 3")
            replicate(mysql_shop.config, spark)
            return state

        replicate(mysql_shop.config, spark)  # caught up with the first change
        monkeypatch.setattr(verify_diff, "_wait_for_engine", wait_then_move_on)
        rc, doc = diff(mysql_shop.config, capsys)
        assert rc == 0, doc
        c = doc["consistency"]
        assert c["mode"] == "caught-up" and c["keys_changed_after_snapshot"] > 0, c
    finally:
        conn.close()


def test_mysql_string_keys_under_a_case_insensitive_collation(
    verify_mariadb: Any, tmp_path: Path, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "vwords"
    verify_mariadb.execute(
        f"CREATE DATABASE `{name}`",
        f"CREATE TABLE `{name}`.words (k VARCHAR(20) PRIMARY KEY, n INT) "
        "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
        f"INSERT INTO `{name}`.words VALUES ('a', 1), ('B', 2), ('é', 3), ('Z', 4), ('_x', 5), "
        "('abc', 6), ('zz', 7), ('😀', 8), ('a b', 9), ('A c', 10)",
    )
    config = write_mysql_config(tmp_path, verify_mariadb.dsn_for(dbname=name))
    replicate(config, spark)
    rc, doc = diff(config, capsys, "--chunk-rows", "2")
    assert rc == 0, doc
    assert doc["tables"][0]["ranges"] == 6

    table = load_table(config, "cdc.words")
    (victim,) = [r for r in rows(table, ["k"]) if r["k"] == "é"]
    tamper(table, delete=[victim])
    rc, doc = diff(config, capsys, "--chunk-rows", "2")
    assert rc == 1 and doc["tables"][0]["missing_keys"] == [{"k": "é"}], doc
