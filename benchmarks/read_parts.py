"""Where a pyiceberg full scan of a small table spends its time: the live table vs a copy of
the same rows written by one append (one snapshot, one manifest, one file).

    .venv/bin/python -m benchmarks.read_parts <metadata.json location>

Per part, the median process CPU time (all threads; steadier than wall time on a loaded
machine) of ``--runs`` runs: metadata.json parse, manifest list, planning (manifest list and
manifests, delete index), reading the planned tasks; and the same head with a metadata.json
trimmed to its own snapshot (what the history alone costs each load).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import _manifests
from pyiceberg.table import StaticTable


def cpu_ms(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times) * 1000


def parts(location: str, runs: int) -> dict[str, float]:
    t = StaticTable.from_metadata(location)
    snap = t.current_snapshot()
    assert snap is not None
    listed = snap.manifests(t.io)
    tasks = list(t.scan().plan_files())
    plan = cpu_ms(lambda: list(t.scan().plan_files()), runs)
    return {
        "snapshots": len(t.metadata.snapshots),
        "manifests": len(listed),
        "manifests with live files": sum(
            1 for m in listed if m.added_files_count or m.existing_files_count
        ),
        "data files": len(tasks),
        "delete files / vectors": sum(len(x.delete_files) for x in tasks),
        "total (load + scan) ms": cpu_ms(
            lambda: StaticTable.from_metadata(location).scan().to_arrow(), runs
        ),
        "metadata.json parse ms": cpu_ms(lambda: StaticTable.from_metadata(location), runs),
        "manifest list ms": cpu_ms(lambda: _manifests(t.io, snap.manifest_list), runs),
        "plan ms": plan,
        "read tasks ms": cpu_ms(lambda: t.scan().to_arrow(), runs) - plan,
    }


def trimmed(location: str, out: Path) -> str:
    """The same head, its metadata.json holding only its own snapshot."""
    meta = json.loads(StaticTable.from_metadata(location).io.new_input(location).open().read())
    head = meta["current-snapshot-id"]
    meta["snapshots"] = [s for s in meta["snapshots"] if s["snapshot-id"] == head]
    meta["snapshot-log"], meta["metadata-log"] = [], []
    meta["refs"] = {k: v for k, v in meta["refs"].items() if v["snapshot-id"] == head}
    path = out / "trimmed.metadata.json"
    path.write_text(json.dumps(meta))
    return path.as_uri()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("location")
    p.add_argument("--runs", type=int, default=41)
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="read-parts-"))
    arrow = StaticTable.from_metadata(args.location).scan().to_arrow()
    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp}/c.db", warehouse=tmp.as_uri())
    catalog.create_namespace("db")
    copy = catalog.create_table("db.copy", schema=arrow.schema, properties={"format-version": "2"})
    copy.append(arrow)
    columns = {"live": parts(args.location, args.runs), "live, history trimmed": parts(trimmed(args.location, tmp), args.runs),
               "copy": parts(copy.metadata_location, args.runs)}  # fmt: skip
    print(f"{arrow.num_rows} rows; median CPU ms of {args.runs} runs")
    print(f"{'':32s}" + "".join(f"{k:>24s}" for k in columns))
    for key in columns["live"]:
        print(f"{key:32s}" + "".join(f"{c[key]:24.2f}" for c in columns.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
