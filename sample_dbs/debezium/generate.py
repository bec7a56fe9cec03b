"""Generate a realistic Debezium change log (seeded, reproducible) and its final state.

Two tables of a shop, written the way Debezium's Postgres connector writes them (schema +
payload envelopes, ``transaction`` blocks, semantic types for decimals, dates and zoned
timestamps), with inserts, updates, deletes, a primary-key change, multi-row transactions
and a column added half way through. ``expected_state`` returns the source tables' final
rows, so the demo and tests can check what the engine wrote.

Run ``python -m sample_dbs.debezium.generate OUT_DIR [--events N] [--seed S]``.
"""

from __future__ import annotations

import argparse
import base64
import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

CUSTOMER_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "string", "optional": True, "field": "email"},
    {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "field": "created_at"},
]
ORDER_FIELDS = [
    {"type": "int64", "optional": False, "field": "order_id"},
    {"type": "int32", "optional": True, "field": "customer_id"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
     "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "amount"},
    {"type": "string", "optional": True, "field": "status"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "order_date"},
]
NOTE_FIELD = {"type": "string", "optional": True, "field": "note"}


def _decimal_b64(v: Decimal, scale: int) -> str:
    unscaled = int(v.scaleb(scale))
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


class _Log:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lines: list[bytes] = []
        self.lsn = 20_000_000
        self.tx = 500
        self.ts = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def transaction(self, changes: list[tuple[str, str, dict | None, dict | None, list[dict]]]) -> None:
        self.tx += 1
        for i, (table, op, before, after, fields) in enumerate(changes):
            self.lsn += 64
            self.ts += timedelta(milliseconds=self.rng.randint(1, 900))
            ts_ms = int(self.ts.timestamp() * 1000)
            row_schema = {"type": "struct", "optional": True, "fields": fields, "name": f"shop.inventory.{table}.Value"}
            schema = {
                "type": "struct",
                "name": f"shop.inventory.{table}.Envelope",
                "optional": False,
                "fields": [
                    {**row_schema, "field": "before"},
                    {**row_schema, "field": "after"},
                    {"type": "struct", "optional": False, "field": "source", "fields": []},
                    {"type": "string", "optional": False, "field": "op"},
                    {"type": "int64", "optional": True, "field": "ts_ms"},
                ],
            }
            payload = {
                "before": before,
                "after": after,
                "source": {"connector": "postgresql", "db": "shop", "schema": "inventory", "table": table,
                           "txId": self.tx, "lsn": self.lsn, "ts_ms": ts_ms},
                "op": op,
                "ts_ms": ts_ms,
                "transaction": {"id": f"{self.tx}:{self.lsn}", "total_order": i + 1, "data_collection_order": i + 1},
            }
            self.lines.append(orjson.dumps({"schema": schema, "payload": payload}))


def generate(events: int = 2000, seed: int = 7) -> tuple[list[bytes], dict[str, dict[Any, dict[str, Any]]]]:
    """Return (Debezium lines, expected final rows per source table keyed by primary key)."""
    rng = random.Random(seed)
    log = _Log(rng)
    customers: dict[int, dict[str, Any]] = {}
    orders: dict[int, dict[str, Any]] = {}
    next_cust, next_order = 1, 1000
    with_note = False

    def cust_wire(row: dict[str, Any]) -> dict[str, Any]:
        return {**row, "created_at": row["created_at"].isoformat().replace("+00:00", "Z")}

    def order_wire(row: dict[str, Any]) -> dict[str, Any]:
        out = {**row, "amount": _decimal_b64(row["amount"], 2),
               "order_date": (row["order_date"] - date(1970, 1, 1)).days}
        return out

    def order_fields() -> list[dict]:
        return ORDER_FIELDS + ([NOTE_FIELD] if with_note else [])

    emitted = 0
    while emitted < events:
        if not with_note and emitted >= events // 2:
            with_note = True  # ALTER TABLE orders ADD COLUMN note text
            for row in orders.values():
                row["note"] = None
        changes: list[tuple[str, str, dict | None, dict | None, list[dict]]] = []
        for _ in range(rng.choice([1, 1, 1, 2, 3, 5])):
            r = rng.random()
            if r < 0.2 or not customers:
                cid = next_cust
                next_cust += 1
                row = {"id": cid, "name": f"customer {cid}", "email": f"c{cid}@example.com",
                       "created_at": log.ts.replace(microsecond=0)}
                customers[cid] = row
                changes.append(("customers", "c", None, cust_wire(row), CUSTOMER_FIELDS))
            elif r < 0.55 or not orders:
                oid = next_order
                next_order += 1
                row = {"order_id": oid, "customer_id": rng.choice(list(customers)),
                       "amount": Decimal(rng.randint(100, 99999)) / 100, "status": "new",
                       "order_date": date(2026, 1, 1) + timedelta(days=rng.randint(0, 60))}
                if with_note:
                    row["note"] = rng.choice([None, "gift", "rush"])
                orders[oid] = row
                changes.append(("orders", "c", None, order_wire(row), order_fields()))
            elif r < 0.85:
                oid = rng.choice(list(orders))
                before = dict(orders[oid])
                row = orders[oid]
                row["status"] = rng.choice(["paid", "shipped", "returned"])
                row["amount"] = row["amount"] + Decimal("1.25")
                changes.append(("orders", "u", order_wire(before), order_wire(row), order_fields()))
            elif r < 0.93:
                oid = rng.choice(list(orders))
                before = orders.pop(oid)
                changes.append(("orders", "d", order_wire(before), None, order_fields()))
            elif r < 0.97:
                cid = rng.choice(list(customers))
                before = dict(customers[cid])
                customers[cid]["email"] = f"new{cid}.{rng.randint(0, 999)}@example.com"
                changes.append(("customers", "u", cust_wire(before), cust_wire(customers[cid]), CUSTOMER_FIELDS))
            else:
                # Primary-key change: UPDATE orders SET order_id = <new> WHERE order_id = <old>
                oid = rng.choice(list(orders))
                before = orders.pop(oid)
                row = {**before, "order_id": next_order}
                next_order += 1
                orders[row["order_id"]] = row
                changes.append(("orders", "u", order_wire(before), order_wire(row), order_fields()))
        log.transaction(changes)
        emitted += len(changes)
    expected = {
        "inventory.customers": {k: dict(v) for k, v in customers.items()},
        "inventory.orders": {k: {**v, **({} if "note" in v else {"note": None})} for k, v in orders.items()},
    }
    return log.lines, expected


def write(out_dir: Path, events: int = 2000, seed: int = 7, files: int = 2) -> dict[str, dict[Any, dict[str, Any]]]:
    lines, expected = generate(events, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    per = -(-len(lines) // files)
    for i in range(files):
        chunk = lines[i * per:(i + 1) * per]
        (out_dir / f"changes-{i + 1:04d}.jsonl").write_bytes(b"\n".join(chunk) + b"\n")
    return expected


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    expected = write(args.out_dir, args.events, args.seed)
    print(f"wrote {args.out_dir}: " + ", ".join(f"{t}: {len(r)} rows" for t, r in expected.items()))


if __name__ == "__main__":
    main()
