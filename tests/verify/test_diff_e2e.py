"""``replicator diff`` end to end: the sample shop in a private Postgres, replicated by the
engine (Spark stage), compared through Iceberg Java; then the Iceberg tables are changed
behind the engine's back and the diff must name table and key."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

import replicator.verify.diff as verify_diff
from replicator.checkpoint.model import WRITER_KEY as WRITER_PROPERTY
from replicator.cli.main import main
from sample_dbs.postgres.workload import Workload
from tests.verify.conftest import Replicated, replicate, write_config
from tests.verify.tamper import TAMPER_WRITER, load_table, rows, tamper

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SHOP_TABLES = {"public.customers", "public.products", "public.orders", "public.order_items"}


def diff(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    rc = main(["diff", "--config", str(config), *args])
    out = capsys.readouterr().out
    return rc, json.loads(out) if "--json" in args else out


def only_table(doc: dict[str, Any]) -> dict[str, Any]:
    (table,) = doc["tables"]
    return table


def test_replicated_shop_matches(shop: Replicated, capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc = diff(shop.config, capsys, "--json", "--chunk-rows", "16")
    assert rc == 0, doc
    assert doc["status"] == "match"
    c = doc["consistency"]
    assert (c["snapshot"], c["mode"]) == ("exact", "quiescent"), c
    assert {t["source_table"] for t in doc["tables"]} == SHOP_TABLES
    for t in doc["tables"]:
        assert t["status"] == "match" and t["source_rows"] == t["iceberg_rows"] > 0, t
    assert any(t["ranges"] > 2 for t in doc["tables"])  # several ranges really compared

    rc, text = diff(shop.config, capsys)
    assert rc == 0 and "all match" in text and "quiescent" in text, text


def test_row_deleted_in_iceberg_is_missing(
    shop: Replicated, capsys: pytest.CaptureFixture[str]
) -> None:
    table = load_table(shop.config, "cdc.order_items")
    victim = rows(table, ["order_id", "line_no"])[3]
    snap = tamper(table, delete=[victim])
    assert snap.summary is not None and snap.summary[WRITER_PROPERTY] == TAMPER_WRITER

    rc, doc = diff(shop.config, capsys, "--json", "--table", "order_items", "--chunk-rows", "16")
    assert rc == 1, doc
    t = only_table(doc)
    key = {"order_id": victim["order_id"], "line_no": victim["line_no"]}
    assert (t["source_table"], t["status"], t["missing"], t["extra"], t["changed"]) == (
        "public.order_items", "differs", 1, 0, 0,
    )  # fmt: skip
    assert t["missing_keys"] == [key]
    assert t["source_rows"] == t["iceberg_rows"] + 1

    rc, text = diff(shop.config, capsys, "--table", "public.order_items")
    assert rc == 1 and "DIFFERS" in text and "public.order_items" in text
    assert f"order_id={key['order_id']}, line_no={key['line_no']}" in text, text

    tamper(load_table(shop.config, "cdc.order_items"), add=[victim])  # repaired: equal again
    assert diff(shop.config, capsys, "--table", "order_items")[0] == 0


def test_row_added_in_iceberg_is_extra(
    shop: Replicated, capsys: pytest.CaptureFixture[str]
) -> None:
    table = load_table(shop.config, "cdc.orders")
    ghost = dict(rows(table, ["id"])[0], id=10**9, notes="never in the source")
    tamper(table, add=[ghost])

    rc, doc = diff(shop.config, capsys, "--json", "--table", "cdc.orders")
    assert rc == 1, doc
    t = only_table(doc)
    assert (t["iceberg_table"], t["missing"], t["extra"], t["changed"]) == ("cdc.orders", 0, 1, 0)
    assert t["extra_keys"] == [{"id": 10**9}]

    rc, text = diff(shop.config, capsys, "--table", "orders")
    assert rc == 1 and "public.orders" in text and "id=1000000000" in text, text

    tamper(load_table(shop.config, "cdc.orders"), delete=[ghost])
    assert diff(shop.config, capsys, "--table", "orders")[0] == 0


def test_row_changed_in_iceberg_names_the_columns(
    shop: Replicated, capsys: pytest.CaptureFixture[str]
) -> None:
    table = load_table(shop.config, "cdc.products")
    victim = rows(table, ["sku"])[1]
    edited = dict(victim, price=victim["price"] + Decimal("1.00"), name=victim["name"] + " (x)")
    tamper(table, delete=[victim], add=[edited])  # one commit: the delete hits the old row only

    rc, doc = diff(shop.config, capsys, "--json", "--table", "products")
    assert rc == 1, doc
    t = only_table(doc)
    assert (t["missing"], t["extra"], t["changed"]) == (0, 0, 1)
    (row,) = t["changed_rows"]
    assert row["key"] == {"sku": victim["sku"]}
    assert row["columns"] == ["name", "price"]
    assert row["source"] == {"name": victim["name"], "price": str(victim["price"])}
    assert row["iceberg"] == {"name": edited["name"], "price": str(edited["price"])}
    assert t["changed_columns"] == {"name": 1, "price": 1}

    rc, text = diff(shop.config, capsys, "--table", "products")
    assert rc == 1 and "public.products" in text and f"sku={victim['sku']!r}" in text, text

    tamper(load_table(shop.config, "cdc.products"), delete=[edited], add=[victim])
    assert diff(shop.config, capsys, "--table", "products")[0] == 0


def test_engine_behind_the_source_cannot_diff(
    shop: Replicated, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(shop.dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE customers SET name = name || '!' WHERE id = (SELECT min(id) FROM customers)"
        )
    rc, doc = diff(shop.config, capsys, "--json", "--wait", "0")
    assert rc == 2, doc
    assert doc["status"] == "error" and "still holds changes" in doc["error"], doc
    replicate(shop.config, spark)  # the engine catches up: equal again
    assert diff(shop.config, capsys, "--table", "customers")[0] == 0


def test_engine_past_the_source_snapshot_sets_changed_keys_aside(
    shop: Replicated, spark: Any, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A live source with a running engine: after the diff's snapshot, more transactions are
    committed and replicated before the Iceberg tables are pinned. Those keys are decoded from
    the diff's temporary slot and set aside; everything else must still be equal."""
    wait = verify_diff._wait_for_engine

    def wait_then_move_on(*args: Any, **kwargs: Any) -> Any:
        state = wait(*args, **kwargs)
        Workload(shop.dsn, seed=99).run(transactions=25)
        replicate(shop.config, spark)
        return state

    monkeypatch.setattr(verify_diff, "_wait_for_engine", wait_then_move_on)
    rc, doc = diff(shop.config, capsys, "--json")
    assert rc == 0, doc
    c = doc["consistency"]
    assert c["mode"] == "caught-up" and c["tables_past_snapshot"], c
    assert c["keys_changed_after_snapshot"] > 0
    assert sum(t["not_compared"] for t in doc["tables"]) > 0  # really different, set aside
    monkeypatch.undo()
    rc, doc = diff(shop.config, capsys, "--json")  # and now, quiescent again, all equal
    assert rc == 0 and doc["consistency"]["mode"] == "quiescent", doc


def test_missing_iceberg_table_and_unknown_table(
    new_database: Callable[[], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = new_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t VALUES (1, 'a')")
    config = write_config(tmp_path, dsn)  # the engine never ran
    rc, doc = diff(config, capsys, "--json")
    assert rc == 2 and "cdc.t" in doc["error"] and "does not exist" in doc["error"], doc
    rc, doc = diff(config, capsys, "--json", "--table", "nosuch")
    assert rc == 2 and "nosuch" in doc["error"], doc
