"""Real tables for maintenance tests: the engine (local apply, no Spark job) replicates a
Debezium change log into a SQL-catalog table, batch by batch."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml
from pyiceberg.table import Table

from replicator.config import RunConfig, load_config
from replicator.iceberg.tables import open_catalog
from replicator.pipeline.runner import Replicator
from tests.pipeline.dbz import ChangeLog

KEYS = {"app.items": ["id"]}


def config(root: Path, *, max_events: int = 10, cut_every: float = 0.0,
           maintenance: dict[str, Any] | None = None, exactly_once: bool = True,
           format_version: int = 2, delete_mode: str = "equality") -> RunConfig:
    """``exactly_once``: inserts are inserts (at-least-once input makes every insert an upsert,
    i.e. an equality delete)."""
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": KEYS,
                   "delivery": "exactly-once" if exactly_once else "at-least-once"},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc",
                    "cut_every_seconds": cut_every, "cuts_keep": 3, "format_version": format_version,
                    "delete_mode": delete_mode},
        "batch": {"max_events": max_events, "max_seconds": 3600},
        "state_dir": "state",
        "maintenance": maintenance or {"enabled": False},
    }
    path = root / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return load_config(path)


def feed(root: Path, name: str, log: ChangeLog, start: int = 0) -> None:
    """Write the log's lines from ``start`` on as one more input file."""
    (root / "in").mkdir(exist_ok=True)
    (root / "in" / name).write_bytes(b"".join(x + b"\n" for x in log.lines[start:]))


def mixed(log: ChangeLog, rng: random.Random, txs: int, *, first_tx: int = 0) -> None:
    """Inserts, updates (some of earlier batches: equality deletes) and deletes."""
    nxt = max(log.state, default=-1) + 1
    for tx in range(first_tx, first_tx + txs):
        r = rng.random()
        if r < 0.5 or len(log.state) < 5:
            log.insert(nxt, tx=tx, v=f"v{nxt}", n=rng.randint(0, 9))
            nxt += 1
        elif r < 0.85:
            log.update(rng.choice(sorted(log.state)), tx=tx, n=rng.randint(10, 99))
        else:
            log.delete(rng.choice(sorted(log.state)), tx=tx)


def run(cfg: RunConfig) -> None:
    Replicator(cfg, engine="local").run(until_idle=True)


def table(cfg: RunConfig) -> Table:
    return open_catalog(cfg.iceberg).load_table("cdc.items")


def files_under(root: Path) -> set[Path]:
    return {p for p in (root / "wh").rglob("*") if p.is_file()}
