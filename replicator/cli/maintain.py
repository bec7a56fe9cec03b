"""``replicator maintain``: run every due maintenance step on the replicated tables once."""

from __future__ import annotations

import sys
import time
from typing import Any

from replicator.config import RunConfig
from replicator.errors import ConfigError
from replicator.iceberg.cuts import replicated_tables
from replicator.iceberg.tables import SOURCE_TABLE_PROPERTY, open_catalog
from replicator.maintenance.scheduler import Maintainer
from replicator.maintenance.status import format_health, table_health
from replicator.pipeline.assembly import state_lock


def run_maintain(cfg: RunConfig, only: list[str] | None) -> int:
    """Everything due on each table (or the ``only`` ones: Iceberg or source names), with a
    line per step. Holds the engine's state lock: never runs beside the engine."""
    with state_lock(cfg.state_dir):
        tables = replicated_tables(open_catalog(cfg.iceberg), cfg.iceberg.namespace)
        if only:
            wanted = set(only)
            tables = [t for t in tables if ".".join(t.name()) in wanted or t.name()[-1] in wanted
                      or t.properties.get(SOURCE_TABLE_PROPERTY) in wanted]
            found = {".".join(t.name()) for t in tables} | {t.name()[-1] for t in tables} | {
                t.properties.get(SOURCE_TABLE_PROPERTY) for t in tables}
            if missing := wanted - found:
                raise ConfigError(f"no replicated table named {', '.join(sorted(missing))}")
        spark: list[Any] = []

        def get() -> Any:
            if not spark:
                from spark.session import get_spark

                spark.append(get_spark())
            return spark[0]

        m = Maintainer(cfg.maintenance, spark=get)
        t0 = time.monotonic()
        done = []
        for i, table in enumerate(tables, 1):
            name = ".".join(table.name())
            print(f"[{i}/{len(tables)}] {name}", flush=True)
            current = table
            for current, report in m.run_all(table):  # noqa: B007 - each step refreshes it
                state = report.detail if report.changed else "nothing to do"
                print(f"    {report.kind:<10} {state} ({report.seconds:.1f}s)", flush=True)
            done.append(table_health(current))
        print(f"maintained {len(tables)} table(s) in {time.monotonic() - t0:.1f}s", file=sys.stderr)
        if done:
            print(format_health(done))
    return 0
