"""A seeded workload against ``schema.sql``: inserts, updates, deletes, primary-key updates
and multi-statement transactions. The same seed on the same starting data gives the same
statements, so a test or a demo can be replayed.

    python -m sample_dbs.postgres.workload "<dsn>" --seed 7 --transactions 200
"""

from __future__ import annotations

import argparse
import random
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import psycopg

WORDS = [
    "alpine",
    "anchor",
    "basalt",
    "cedar",
    "copper",
    "delta",
    "ember",
    "fable",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kelp",
    "lumen",
    "marble",
    "nectar",
    "onyx",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "timber",
    "umber",
    "velvet",
    "willow",
    "xenon",
    "yarrow",
]


@dataclass
class WorkloadStats:
    transactions: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    pk_updates: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class Workload:
    """Drives the shop schema. ``seed_data`` fills it, ``run`` applies random transactions."""

    def __init__(self, dsn: str, *, seed: int = 0) -> None:
        self.dsn = dsn
        self.rng = random.Random(seed)
        self.stats = WorkloadStats()
        self._sku_counter = 0

    # -- value generators -----------------------------------------------------------------------
    def _text(self, n_words: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n_words))

    def _description(self) -> str:
        # Random letters compress badly, so even without STORAGE EXTERNAL these stay large.
        size = self.rng.randint(3000, 8000)
        return "".join(self.rng.choices(string.ascii_letters + "     ", k=size))

    def _new_sku(self) -> str:
        self._sku_counter += 1
        return f"SKU-{self.rng.randint(0, 99999):05d}-{self._sku_counter}"

    def _pick(self, cur: psycopg.Cursor[Any], sql: str) -> Any:
        rows = cur.execute(sql).fetchall()
        return self.rng.choice(rows)[0] if rows else None

    # -- seed -----------------------------------------------------------------------------------
    def seed_data(self, *, customers: int = 40, products: int = 25, orders: int = 60) -> None:
        with psycopg.connect(self.dsn) as conn, conn.cursor() as cur:
            for _ in range(customers):
                self._insert_customer(cur)
            for _ in range(products):
                self._insert_product(cur)
            for _ in range(orders):
                self._new_order(cur)
        self.stats.transactions += 1

    def _insert_customer(self, cur: psycopg.Cursor[Any]) -> None:
        name = f"{self.rng.choice(WORDS).title()} {self.rng.choice(WORDS).title()}"
        cur.execute(
            "INSERT INTO customers (email, name, tier, is_active, birthday, external_id, preferences)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)",
            (
                f"{name.replace(' ', '.').lower()}.{self.rng.randint(1, 10**9)}@example.com",
                name,
                self.rng.choice(["bronze", "silver", "gold"]),
                self.rng.random() < 0.9,
                date(1950, 1, 1) + timedelta(days=self.rng.randint(0, 20000)),
                uuid.UUID(int=self.rng.getrandbits(128), version=4),
                f'{{"newsletter": {str(self.rng.random() < 0.5).lower()}, "lang": "en"}}',
            ),
        )
        self.stats.inserts += 1

    def _insert_product(self, cur: psycopg.Cursor[Any]) -> None:
        cur.execute(
            "INSERT INTO products (sku, name, price, weight_kg, rating, stock, tags, thumbnail,"
            " description) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                self._new_sku(),
                self._text(3),
                Decimal(self.rng.randint(100, 99999)) / 100,
                round(self.rng.uniform(0.1, 30), 3),
                self.rng.uniform(1, 5),
                self.rng.randint(0, 500),
                [self.rng.choice(WORDS) for _ in range(self.rng.randint(0, 3))],
                self.rng.randbytes(self.rng.randint(0, 64)),
                self._description(),
            ),
        )
        self.stats.inserts += 1

    def _new_order(self, cur: psycopg.Cursor[Any]) -> None:
        customer = self._pick(cur, "SELECT id FROM customers ORDER BY id")
        skus = [r[0] for r in cur.execute("SELECT sku FROM products ORDER BY sku").fetchall()]
        if customer is None or not skus:
            return
        (order_id,) = cur.execute(
            "INSERT INTO orders (customer_id, ship_by, delivery_slot, handling, notes)"
            " VALUES (%s, current_date + %s, %s::time, %s::interval, %s) RETURNING id",
            (
                customer,
                self.rng.randint(1, 14),
                f"{self.rng.randint(8, 20)}:00",
                f"{self.rng.randint(1, 72)} hours",
                self._text(5),
            ),
        ).fetchone()  # type: ignore[misc]
        self.stats.inserts += 1
        for line in range(1, self.rng.randint(1, 5) + 1):
            cur.execute(
                "INSERT INTO order_items (order_id, line_no, sku, quantity, unit_price, discount)"
                " SELECT %s, %s, sku, %s, price, %s FROM products WHERE sku = %s",
                (
                    order_id,
                    line,
                    self.rng.randint(1, 5),
                    Decimal(self.rng.randint(0, 300)) / 1000,
                    self.rng.choice(skus),
                ),
            )
            self.stats.inserts += 1
        cur.execute(
            "UPDATE orders SET total = (SELECT coalesce(sum(quantity * unit_price), 0)"
            " FROM order_items WHERE order_id = %s) WHERE id = %s",
            (order_id, order_id),
        )
        self.stats.updates += 1

    # -- transactions ---------------------------------------------------------------------------
    def _advance_order(self, cur: psycopg.Cursor[Any]) -> None:
        order = self._pick(
            cur, "SELECT id FROM orders WHERE status IN ('new','paid','shipped') ORDER BY id"
        )
        if order is not None:
            cur.execute(
                "UPDATE orders SET status = CASE status WHEN 'new' THEN 'paid' WHEN 'paid' THEN"
                " 'shipped' ELSE 'delivered' END WHERE id = %s",
                (order,),
            )
            self.stats.updates += 1

    def _cancel_order(self, cur: psycopg.Cursor[Any]) -> None:
        order = self._pick(cur, "SELECT id FROM orders WHERE status = 'new' ORDER BY id")
        if order is not None:  # cascades to its items: one statement, several deletes
            cur.execute("DELETE FROM orders WHERE id = %s", (order,))
            self.stats.deletes += 1

    def _reprice(self, cur: psycopg.Cursor[Any]) -> None:
        # Leaves the large description untouched: "unchanged TOAST" in the stream.
        sku = self._pick(cur, "SELECT sku FROM products ORDER BY sku")
        if sku is not None:
            cur.execute(
                "UPDATE products SET price = price * %s, stock = stock + %s,"
                " updated_at = localtimestamp WHERE sku = %s",
                (Decimal(self.rng.randint(90, 110)) / 100, self.rng.randint(-3, 10), sku),
            )
            self.stats.updates += 1

    def _rewrite_description(self, cur: psycopg.Cursor[Any]) -> None:
        sku = self._pick(cur, "SELECT sku FROM products ORDER BY sku")
        if sku is not None:
            cur.execute(
                "UPDATE products SET description = %s WHERE sku = %s", (self._description(), sku)
            )
            self.stats.updates += 1

    def _rename_sku(self, cur: psycopg.Cursor[Any]) -> None:
        sku = self._pick(cur, "SELECT sku FROM products ORDER BY sku")
        if sku is not None:  # primary-key update, cascaded to order_items
            cur.execute("UPDATE products SET sku = %s WHERE sku = %s", (self._new_sku(), sku))
            self.stats.pk_updates += 1

    def _restock_many(self, cur: psycopg.Cursor[Any]) -> None:
        cur.execute("UPDATE products SET stock = stock + 1 WHERE stock < 50")  # multi-row
        self.stats.updates += cur.rowcount

    def _edit_customer(self, cur: psycopg.Cursor[Any]) -> None:
        cust = self._pick(cur, "SELECT id FROM customers ORDER BY id")
        if cust is not None:
            cur.execute(
                "UPDATE customers SET tier = %s, is_active = %s WHERE id = %s",
                (self.rng.choice(["bronze", "silver", "gold"]), self.rng.random() < 0.8, cust),
            )
            self.stats.updates += 1

    def _drop_item(self, cur: psycopg.Cursor[Any]) -> None:
        row = cur.execute("SELECT order_id, line_no FROM order_items ORDER BY 1, 2").fetchall()
        if row:
            o, line = self.rng.choice(row)
            cur.execute("DELETE FROM order_items WHERE order_id = %s AND line_no = %s", (o, line))
            self.stats.deletes += 1

    def run(self, transactions: int = 100, *, max_ops: int = 4) -> WorkloadStats:
        kinds: list[tuple[Callable[[psycopg.Cursor[Any]], None], int]] = [
            (self._new_order, 5),
            (self._advance_order, 4),
            (self._reprice, 4),
            (self._cancel_order, 1),
            (self._rewrite_description, 1),
            (self._rename_sku, 1),
            (self._restock_many, 1),
            (self._edit_customer, 2),
            (self._drop_item, 1),
            (self._insert_customer, 1),
            (self._insert_product, 1),
        ]
        funcs = [k for k, _ in kinds]
        weights = [w for _, w in kinds]
        with psycopg.connect(self.dsn) as conn:
            for _ in range(transactions):
                with conn.transaction(), conn.cursor() as cur:
                    for _ in range(self.rng.randint(1, max_ops)):
                        fn = self.rng.choices(funcs, weights)[0]
                        fn(cur)
                        self.stats.by_kind[fn.__name__] = self.stats.by_kind.get(fn.__name__, 0) + 1
                self.stats.transactions += 1
        return self.stats


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dsn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--transactions", type=int, default=100)
    ap.add_argument("--seed-data", action="store_true", help="insert starting rows first")
    args = ap.parse_args(argv)
    w = Workload(args.dsn, seed=args.seed)
    if args.seed_data:
        w.seed_data()
    print(w.run(args.transactions))


if __name__ == "__main__":
    main()
