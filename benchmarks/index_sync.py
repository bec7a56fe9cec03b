"""The primary-key index's per-change durability cost: fsyncs and wall time of
``apply_batch`` with small batches (what position mode pays per table per batch), for the
index code of two git revisions side by side (each run in its own process, alternating).

    .venv/bin/python -m benchmarks.index_sync [--revs OLD NEW] [--batches 200] [--rows 1000]

Each change: ``--rows`` keys drawn from a 20k keyspace, the ones already live removed first
(updates) and all added in a new file. Reported per revision: fsyncs per change (os.fsync
counted) and the median / mean milliseconds per change, over ``--repeat`` alternating runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _child(batches: int, rows: int, directory: str) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa

    from replicator.index.pk_index import FileRows, PrimaryKeyIndex

    real = os.fsync
    calls = [0]

    def counting(fd: int) -> None:
        calls[0] += 1
        real(fd)

    os.fsync = counting
    index = PrimaryKeyIndex.create(Path(directory) / "index")
    rng = np.random.default_rng(7)
    live: set[int] = set()
    snap: int | None = None
    times = []
    for b in range(1, batches + 1):
        keys = rng.choice(20_000, rows, replace=False)
        removed = pa.array([k for k in keys.tolist() if k in live], pa.int64())
        t0 = time.perf_counter()
        index.apply_batch(snap, b, [FileRows(f"f{b}", [pa.array(keys, pa.int64())])], removed=[removed])
        times.append(time.perf_counter() - t0)
        live |= set(keys.tolist())
        snap = b
    return {"fsyncs_per_change": calls[0] / batches, "ms": [t * 1000 for t in times]}


def _tree(rev: str, into: Path) -> Path:
    """The repository's ``replicator`` package at ``rev`` (WORKTREE: this checkout)."""
    if rev == "WORKTREE":
        return REPO
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "replicator"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--revs", nargs=2, default=["HEAD~1", "WORKTREE"], metavar=("OLD", "NEW"))
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_child(int(args.child[0]), int(args.child[1]), args.child[2])))
        return 0
    with tempfile.TemporaryDirectory(prefix="index-sync-") as tmp:
        trees = {rev: _tree(rev, Path(tmp) / f"src{i}") for i, rev in enumerate(args.revs)}
        results: dict[str, list[dict[str, Any]]] = {rev: [] for rev in args.revs}
        for k in range(args.repeat):
            for rev, tree in trees.items():
                work = Path(tmp) / f"run-{k}-{abs(hash(rev))}"
                work.mkdir()
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(REPO)])}
                out = subprocess.run([sys.executable, "-m", "benchmarks.index_sync", "--child", str(args.batches),
                                      str(args.rows), str(work)], check=True, capture_output=True, text=True,
                                     env=env, cwd=tree)
                results[rev].append(json.loads(out.stdout))
    print(f"apply_batch, {args.batches} changes of {args.rows} keys, {args.repeat} alternating runs; "
          f"load average {Path('/proc/loadavg').read_text().split()[:3]}")
    print("| revision | fsyncs / change | median ms / change | mean ms / change |")
    print("| --- | --- | --- | --- |")
    for rev, runs in results.items():
        ms = [m for r in runs for m in r["ms"]]
        print(f"| {rev} | {runs[0]['fsyncs_per_change']:.1f} | {statistics.median(ms):.1f} | "
              f"{statistics.mean(ms):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
