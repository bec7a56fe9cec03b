"""A seeded workload for the shop schema (``schema.sql``): inserts, updates, deletes,
primary-key updates and multi-statement transactions, reproducible from its seed.

    wl = ShopWorkload(seed=7)
    wl.populate(conn, customers=50, products=30, orders=40)
    wl.run(conn, transactions=500)

``python -m sample_dbs.mysql.workload --bench`` measures how fast ``MySQLSource`` reads row
events from a private server (prints rows/s for multi-row and single-row transactions).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import Counter
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

_NAMES = [
    "Ana",
    "Björn",
    "Chloé",
    "Dmitri",
    "Eun-ji",
    "Fatima",
    "Grace",
    "Hiro",
    "Inès",
    "José",
    "Kwame",
    "Łukasz",
    "Mia",
    "Nguyễn",
    "Olúwa",
    "Priya",
    "Zoë",
]
_EMOJI = ["😀", "🚀", "🍣", "𝄞", "🧪", "🌍"]  # 4-byte UTF-8
_STATUSES = ["new", "paid", "shipped", "delivered", "cancelled"]


class ShopWorkload:
    """Generates statements against an open pymysql connection (autocommit on)."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.customers: list[int] = []
        self.products: list[int] = []
        self.orders: dict[int, list[int]] = {}  # order id -> line numbers
        self.next_id = {"customers": 1, "products": 1, "orders": 1}
        self.counts: Counter[str] = Counter()

    # -- values -----------------------------------------------------------------------------
    def _name(self) -> str:
        r = self.rng
        return (
            f"{r.choice(_NAMES)} {r.choice(_NAMES)}{r.choice(_EMOJI) if r.random() < 0.3 else ''}"
        )

    def _when(self) -> datetime:
        base = datetime(2024, 1, 1)
        return base + timedelta(
            seconds=self.rng.randrange(0, 3 * 365 * 86400),
            microseconds=self.rng.randrange(0, 1_000_000),
        )

    def _description(self) -> str:
        # Large text: 200 B .. 60 KiB, mixed scripts.
        words = ["lorem", "ipsum", "grüße", "данные", "数据", "🍣", "naïve", "x" * 40]
        n = self.rng.choice([20, 200, 2000, 8000])
        return " ".join(self.rng.choice(words) for _ in range(n))

    def _id(self, table: str) -> int:
        i = self.next_id[table]
        self.next_id[table] += 1
        return i

    # -- statements -------------------------------------------------------------------------
    def _insert_customer(self, cur: Any) -> None:
        cid = self._id("customers")
        cur.execute(
            "INSERT INTO customers (id, email, full_name, is_active, loyalty_points, birth_date, "
            "created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (
                cid,
                f"c{cid}@example.com",
                self._name(),
                self.rng.random() < 0.8,
                self.rng.randrange(0, 4_000_000_000),
                date(1950, 1, 1) + timedelta(days=self.rng.randrange(20000))
                if self.rng.random() < 0.7
                else None,
                self._when(),
            ),
        )
        self.customers.append(cid)
        self.counts["insert"] += 1

    def _insert_product(self, cur: Any) -> None:
        pid = self._id("products")
        r = self.rng
        cur.execute(
            "INSERT INTO products (id, sku, title, price, weight_kg, rating, status, tags, attrs, "
            "description, thumbnail, stock) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                pid,
                f"SKU{pid:09d}",
                f"Product {pid} {r.choice(_EMOJI)}",
                Decimal(r.randrange(100, 99999)) / 100,
                r.uniform(0.1, 30) if r.random() < 0.9 else None,
                r.uniform(0, 5),
                r.choice(["draft", "active", "retired"]),
                ",".join(t for t in ("new", "sale", "eco", "gift") if r.random() < 0.4),
                '{"color": "' + r.choice(["red", "blå"]) + f'", "sizes": [1, 2, 3], "n": {pid}}}',
                self._description() if r.random() < 0.8 else None,
                r.randbytes(r.randrange(0, 64)),
                r.choice([0, 2**63 + r.randrange(1000), 12]),
            ),
        )
        self.products.append(pid)
        self.counts["insert"] += 1

    def _new_order(self, cur: Any) -> None:
        """A multi-statement transaction: order + items + customer points."""
        if not self.customers or not self.products:
            return
        oid = self._id("orders")
        cid = self.rng.choice(self.customers)
        lines = list(range(1, self.rng.randrange(2, 6)))
        cur.execute("BEGIN")
        cur.execute(
            "INSERT INTO orders (id, customer_id, status, total, placed_at, ship_window, note) "
            "VALUES (%s, %s, 'new', 0, %s, %s, %s)",
            (
                oid,
                cid,
                self._when().replace(microsecond=0),
                timedelta(hours=self.rng.randrange(-5, 30), minutes=self.rng.randrange(60)),
                self.rng.choice([None, "leave at door", "fragile 🧪"]),
            ),
        )
        for ln in lines:
            cur.execute(
                "INSERT INTO order_items (order_id, line_no, product_id, quantity, unit_price) "
                "VALUES (%s, %s, %s, %s, %s)",
                (
                    oid,
                    ln,
                    self.rng.choice(self.products),
                    self.rng.randrange(1, 10),
                    Decimal(self.rng.randrange(100, 9999)) / 100,
                ),
            )
        cur.execute(
            "UPDATE orders SET total = (SELECT SUM(quantity * unit_price) FROM order_items "
            "WHERE order_id = %s) WHERE id = %s",
            (oid, oid),
        )
        cur.execute(
            "UPDATE customers SET loyalty_points = loyalty_points + 10 WHERE id = %s", (cid,)
        )
        cur.execute("COMMIT")
        self.orders[oid] = lines
        self.counts["multi_statement_tx"] += 1

    def _update(self, cur: Any) -> None:
        r = self.rng
        pick = r.random()
        if pick < 0.35 and self.products:
            cur.execute(
                "UPDATE products SET price = %s, description = %s, tags = %s WHERE id = %s",
                (
                    Decimal(r.randrange(100, 99999)) / 100,
                    self._description(),
                    r.choice(["", "sale", "new,eco"]),
                    r.choice(self.products),
                ),
            )
        elif pick < 0.6 and self.customers:
            cur.execute(
                "UPDATE customers SET is_active = NOT is_active, full_name = %s WHERE id = %s",
                (self._name(), r.choice(self.customers)),
            )
        elif pick < 0.8 and self.orders:
            cur.execute(
                "UPDATE orders SET status = %s WHERE id = %s",
                (r.choice(_STATUSES), r.choice(list(self.orders))),
            )
        elif self.products:
            lo = r.choice(self.products)  # one rows event with many rows
            cur.execute(
                "UPDATE products SET stock = stock + 1 WHERE id BETWEEN %s AND %s", (lo, lo + 10)
            )
        self.counts["update"] += 1

    def _delete_order(self, cur: Any) -> None:
        if not self.orders:
            return
        oid = self.rng.choice(list(self.orders))
        cur.execute("BEGIN")
        cur.execute("DELETE FROM order_items WHERE order_id = %s", (oid,))
        cur.execute("DELETE FROM orders WHERE id = %s", (oid,))
        cur.execute("COMMIT")
        del self.orders[oid]
        self.counts["delete"] += 1

    def _pk_update(self, cur: Any) -> None:
        r = self.rng
        if r.random() < 0.5 and self.customers:
            old = r.choice(self.customers)
            new = self._id("customers")
            cur.execute("UPDATE customers SET id = %s WHERE id = %s", (new, old))
            self.customers[self.customers.index(old)] = new
        elif self.orders:
            oid = r.choice(list(self.orders))
            lines = self.orders[oid]
            if not lines:
                return
            old_ln = r.choice(lines)
            new_ln = max(lines) + 1
            cur.execute(
                "UPDATE order_items SET line_no = %s WHERE order_id = %s AND line_no = %s",
                (new_ln, oid, old_ln),
            )
            lines[lines.index(old_ln)] = new_ln
        self.counts["pk_update"] += 1

    def _delete_customer(self, cur: Any) -> None:
        if len(self.customers) > 5:
            cid = self.customers.pop(self.rng.randrange(len(self.customers)))
            cur.execute("DELETE FROM customers WHERE id = %s", (cid,))
            self.counts["delete"] += 1

    # -- driving ----------------------------------------------------------------------------
    def populate(
        self, conn: Any, *, customers: int = 20, products: int = 15, orders: int = 10
    ) -> None:
        with conn.cursor() as cur:
            for _ in range(customers):
                self._insert_customer(cur)
            for _ in range(products):
                self._insert_product(cur)
            for _ in range(orders):
                self._new_order(cur)

    def step(self, conn: Any) -> None:
        """One random transaction (autocommit statement or BEGIN..COMMIT group)."""
        r = self.rng.random()
        with conn.cursor() as cur:
            if r < 0.15:
                self._insert_customer(cur)
            elif r < 0.25:
                self._insert_product(cur)
            elif r < 0.50:
                self._new_order(cur)
            elif r < 0.75:
                self._update(cur)
            elif r < 0.85:
                self._delete_order(cur)
            elif r < 0.95:
                self._pk_update(cur)
            else:
                self._delete_customer(cur)

    def run(self, conn: Any, transactions: int) -> Counter[str]:
        for _ in range(transactions):
            self.step(conn)
        return self.counts


# -- benchmark -------------------------------------------------------------------------------


def bench(rows: int = 100_000, single: int = 20_000) -> dict[str, float]:
    """Row events/s read by MySQLSource from a private MariaDB (4-column table)."""
    from replicator.checkpoint import Checkpoints
    from replicator.events.deadletter import DeadLetterSink
    from replicator.sources.mysql import MySQLSource
    from sample_dbs.mysql.server import PrivateMariaDB

    results: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="mdb-bench-", dir="/tmp") as tmp,
        PrivateMariaDB(Path(tmp) / "db") as db,
    ):
        db.execute(
            "CREATE TABLE bench (id INT PRIMARY KEY, name VARCHAR(50), amount DECIMAL(10,2), "
            "ts DATETIME(6))",
            db="shop",
        )
        src = MySQLSource(
            db.dsn,
            dead_letters=DeadLetterSink(None),
            tables=["shop.bench"],
            progress=False,
            poll_wait_s=0.0,  # a drain ends on an empty poll: no wait for more in the rate
        )
        src.start(Checkpoints())
        assert not list(src.poll())  # empty snapshot
        conn = db.connect(db="shop")

        def drain(label: str, want: int) -> None:
            t0 = time.perf_counter()
            got = 0
            while got < want:
                n = sum(1 for _ in src.poll())
                if n == 0:
                    break
                got += n
            results[label] = got / (time.perf_counter() - t0)

        with conn.cursor() as cur:
            for lo in range(0, rows, 1000):  # 1000-row statements: few, large rows events
                cur.execute(
                    "INSERT INTO bench VALUES "
                    + ",".join(
                        f"({i}, 'name {i}', {i % 1000}.25, '2024-01-01 00:00:00.{i % 999999:06d}')"
                        for i in range(lo, lo + 1000)
                    )
                )
        drain("multi_row", rows)
        with conn.cursor() as cur:
            for i in range(rows, rows + single):  # one row per transaction
                cur.execute("INSERT INTO bench VALUES (%s, %s, 1.5, NOW(6))", (i, f"n{i}"))
        drain("single_row_tx", single)
        conn.close()
        src.close()
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", action="store_true", help="measure MySQLSource row events/s")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--single", type=int, default=20_000)
    args = ap.parse_args(argv)
    if args.bench:
        for k, v in bench(args.rows, args.single).items():
            print(f"{k}: {v:,.0f} row events/s")


if __name__ == "__main__":
    main()
