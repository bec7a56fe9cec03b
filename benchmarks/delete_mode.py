"""``iceberg.delete_mode`` A/B: the whole engine (``Replicator``, engine "local": stage in
this process, SQL catalog, local warehouse) on one mixed Debezium-JSON workload, once per
mode, alternating, same data:

    .venv/bin/python -m benchmarks.delete_mode [--events 60000] [--batch 3000] [--repeat 2]

Workload: a 20k-row table, then transactions of 1-4 changes: 25% inserts, 55% updates of a
random live key (most from earlier batches), 20% deletes. Maintenance is off in both runs:
equality mode's later conversion of its deletes (and readers' cost of them until then) is
not counted; position mode pays its index lookups and updates inside the run.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def workload(events: int, seed: int = 7, initial: int = 20_000) -> object:
    from tests.pipeline.dbz import ChangeLog

    rng = random.Random(seed)
    log = ChangeLog()
    live: list[int] = []
    where: dict[int, int] = {}
    for k in range(initial):
        log.insert(k, tx=0, v=f"v{k}", n=k % 10)
        where[k] = len(live)
        live.append(k)
    nxt, tx, made = initial, 1, 0
    while made < events:
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            if r < 0.25 or len(live) < 10:
                log.insert(nxt, tx=tx, v=f"v{nxt}", n=rng.randint(0, 9))
                where[nxt] = len(live)
                live.append(nxt)
                nxt += 1
            elif r < 0.80:
                log.update(rng.choice(live), tx=tx, n=rng.randint(10, 99))
            else:
                k = live[rng.randrange(len(live))]
                i = where.pop(k)
                last = live.pop()
                if last != k:
                    live[i], where[last] = last, i
                log.delete(k, tx=tx)
            made += 1
        tx += 1
    return log


def run(root: Path, log: object, mode: str, batch: int) -> tuple[float, int]:
    from replicator.config import load_config
    from replicator.pipeline.runner import Replicator

    log.write(root / "in" / "0001.jsonl")  # type: ignore[attr-defined]
    cfg = {
        "source": {"type": "debezium-json", "path": "in", "primary_keys": {"app.items": ["id"]}},
        "iceberg": {"catalog_uri": "sqlite:///catalog.db", "warehouse": "wh", "namespace": "cdc",
                    "delete_mode": mode},
        "batch": {"max_events": batch, "max_seconds": 3600},
        "state_dir": "state",
        "maintenance": {"enabled": False},
    }
    (root / "c.yaml").write_text(yaml.safe_dump(cfg))
    t0 = time.perf_counter()
    summary = Replicator(load_config(root / "c.yaml"), engine="local").run(until_idle=True)
    return time.perf_counter() - t0, summary.events_seen


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=60_000)
    ap.add_argument("--batch", type=int, default=3_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    log = workload(args.events)
    for i in range(args.repeat):
        for mode in ("equality", "position"):
            root = Path(tempfile.mkdtemp(prefix=f"rp-delmode-{mode}-"))
            seconds, events = run(root, log, mode, args.batch)
            print(f"round {i + 1} {mode:9s}: {events} events in {seconds:6.1f} s = {events / seconds:8.0f} events/s",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
