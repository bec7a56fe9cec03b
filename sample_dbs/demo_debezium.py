"""`make demo-debezium`: replicate a bundled sample change log into a local Iceberg warehouse.

Everything lives in ./.demo-debezium (SQLite catalog, warehouse, state); run it again and the engine
resumes from the positions in the tables' snapshots, committing nothing twice.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from replicator.cli.main import main as cli
from sample_dbs.debezium.generate import write

DEMO = Path(".demo-debezium")


def demo() -> int:
    DEMO.mkdir(exist_ok=True)
    changes = DEMO / "changes"
    expected = write(changes, events=3000, seed=7)
    cfg = {
        "source": {
            "type": "debezium-json",
            "path": "changes",
            "primary_keys": {"inventory.customers": ["id"], "inventory.orders": ["order_id"]},
        },
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "warehouse", "namespace": "shop"},
        "batch": {"max_events": 500, "max_seconds": 5},
        "state_dir": "state",
    }
    cfg_path = DEMO / "replicator.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    print(f"== sample change log: {sum(1 for _ in changes.glob('*.jsonl'))} files in {changes}")
    print(f"== config: {cfg_path}\n{cfg_path.read_text()}")
    print("== replicator run --until-idle")
    rc = cli(["run", "--config", str(cfg_path), "--until-idle"])
    if rc != 0:
        return rc
    print("\n== replicator status --rows  (rows counted by Apache Iceberg Java through Spark)")
    rc = cli(["status", "--config", str(cfg_path), "--rows"])
    print("\n== expected rows from the source model: "
          + ", ".join(f"{t}: {len(rows):,}" for t, rows in expected.items()))
    return rc


if __name__ == "__main__":
    sys.exit(demo())
