"""Opt-in memory trace of a benchmark's engine process (``bigtx --trace``): where driver RSS goes.

Splits the process's resident memory into the parts that can grow while one huge transaction
is staged in chunks, sampled at every spill step's start and after every chunk file (the
engine's step observer hooks, ``replicator.pipeline.observe``) and every ``interval`` seconds
by a thread:

* ``rss``/``hwm``: ``VmRSS``/``VmHWM`` of the process (``/proc/self/status``);
* ``arrow``: bytes the Arrow default pool has handed out (``bytes_allocated``), and the
  pool's backend;
* ``py_blocks``: live pymalloc blocks (``sys.getallocatedblocks``), the Python object heap;
* ``arenas``: pymalloc arenas held (1 MiB each), at ``spill``/``chunk``/``end`` samples
  (``sys._debugmallocstats``);
* glibc ``mallinfo2``: ``heap`` (main + thread arenas, bytes from ``brk``/``mmap`` for small
  requests), ``mmapped`` (large ``mmap`` blocks), ``used`` / ``free`` (in-use / free bytes
  inside the arenas: ``free`` that stays high is fragmentation or retained pages);
* ``queued_events``: events the source reader has handed over that the run loop has not
  taken yet (read ahead; traces before 2026-11-27 have ``queued``, in reader items of up to
  ``CHUNK_EVENTS`` events), ``held``: events the batcher holds in memory, ``spilling``: the
  events a spill step stages (sampled at its start, ``spill``, and after each file, ``chunk``);
* with ``tracemalloc`` on (``BIGTX_TRACEMALLOC=1``, slow): ``traced``, the bytes Python
  allocations hold, and at the end the source lines whose allocations grew most between the
  5th chunk and the last.

Nothing in the engine changes: the observer only reads counters. Lines go to ``path`` as JSON.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from replicator.pipeline.observe import StepObserver

_MALLINFO2_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")  # fmt: skip


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]


def _mallinfo() -> dict[str, int]:
    try:
        libc = ctypes.CDLL("libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _Mallinfo2
    mi = fn()
    return {"heap": mi.arena, "mmapped": mi.hblkhd, "used": mi.uordblks, "free": mi.fordblks}


def _pymalloc_arenas() -> dict[str, int]:
    """Python's small-object allocator: arenas held now (each ``ARENA_SIZE``, 1 MiB on 64-bit
    3.10+, returned to the OS only when every pool in it is empty) and their high-water
    mark, parsed from ``sys._debugmallocstats`` (it writes to the C stderr: redirected for
    the call; another thread's log line in that moment lands in the parse and is lost)."""
    import tempfile

    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("# arenas allocated current"):
            out["arenas"] = int(line.split("=")[1].replace(",", ""))
        elif line.startswith("# arenas highwater mark"):
            out["arenas_hwm"] = int(line.split("=")[1].replace(",", ""))
        elif line.startswith("# bytes in allocated blocks"):
            out["py_bytes"] = int(line.split("=")[1].replace(",", ""))
    return out


def _status() -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out


class MemTrace(StepObserver):
    """A step observer that samples the process's memory at the engine's spill steps."""

    def __init__(self, path: str, interval: float = 0.5) -> None:
        # Open for the process's life (closed by ``finish``), line-buffered: a killed run keeps its lines.
        self.out = Path(path).open("w", buffering=1)  # noqa: SIM115
        self.interval = interval
        self.t0 = time.perf_counter()
        self.chunks = 0
        self.lock = threading.Lock()
        self.tracing = os.environ.get("BIGTX_TRACEMALLOC") == "1"
        self.first_snapshot: tracemalloc.Snapshot | None = None
        # Gauges the run loop hands over when it starts (``run_started``).
        self.queued: Callable[[], int] | None = None
        self.held: Callable[[], int] | None = None
        if self.tracing:
            tracemalloc.start(8)

    def sample(self, event: str, **extra: Any) -> None:
        import pyarrow as pa

        pool = pa.default_memory_pool()
        st = _status()
        row: dict[str, Any] = {
            "t": round(time.perf_counter() - self.t0, 2), "event": event, "chunks": self.chunks,
            "rss": st.get("VmRSS"), "hwm": st.get("VmHWM"), "anon": st.get("RssAnon"),
            "file": st.get("RssFile"), "arrow": pool.bytes_allocated(), "arrow_max": pool.max_memory(),
            "arrow_backend": pool.backend_name, "py_blocks": sys.getallocatedblocks(), **_mallinfo(), **extra,
        }  # fmt: skip
        if self.queued is not None and self.held is not None:
            row["queued_events"], row["held"] = self.queued(), self.held()
        if event != "tick":
            row.update(_pymalloc_arenas())
        if self.tracing:
            row["traced"] = tracemalloc.get_traced_memory()[0]
        with self.lock:
            if not self.out.closed:
                self.out.write(json.dumps(row) + "\n")

    # -- the step observer's hooks (``replicator.pipeline.observe``) ------------------------
    def run_started(self, *, queued: Callable[[], int], held: Callable[[], int]) -> None:
        self.queued, self.held = queued, held

    def spill_started(self, events: int) -> None:
        self.sample("spill", spilling=events)

    def chunk_written(self, table: str, *, rows: int, seconds: float) -> None:
        self.chunks += 1
        self.sample("chunk")
        if self.tracing and self.chunks == 5:
            self.first_snapshot = tracemalloc.take_snapshot()

    def start(self) -> None:
        """Start the ``tick`` sampler thread."""
        threading.Thread(target=self._loop, name="memtrace", daemon=True).start()

    def _loop(self) -> None:
        while not self.out.closed:
            time.sleep(self.interval)
            self.sample("tick")

    def finish(self) -> None:
        self.sample("end")
        self.lock.acquire()
        if self.tracing and self.first_snapshot is not None:
            diff = tracemalloc.take_snapshot().compare_to(self.first_snapshot, "traceback")
            for stat in diff[:15]:
                frames = [f"{f.filename}:{f.lineno}" for f in stat.traceback][:6]
                self.out.write(json.dumps({"event": "growth", "size_diff": stat.size_diff,
                                           "count_diff": stat.count_diff, "at": frames}) + "\n")  # fmt: skip
        self.out.close()
        self.lock.release()


def summary(path: Path, every: int = 10) -> str:
    """The peak and every ``every``-th chunk of a trace, one line each (MiB)."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        rows = [json.loads(line) for line in fh]
    rows = [r for r in rows if r.get("event") != "growth"]
    mib = 1 << 20

    def line(r: dict[str, Any]) -> str:
        other = (r["anon"] - r.get("heap", 0) - r.get("mmapped", 0)) / mib
        return (f"{r['event']:5} t={r['t']:7.1f}s chunks={r['chunks']:4} rss={r['rss'] / mib:6.1f}"
                f" python_blocks={r['py_blocks'] // 1000:5}k python_arenas={r.get('arenas', '-')!s:>4} python_bytes={r.get('py_bytes', 0) / mib:6.1f}"
                f" glibc_heap={r.get('heap', 0) / mib:5.1f} arrow={r['arrow'] / mib:5.1f}"
                f" anon_outside_glibc={other:6.1f} queued_items={r.get('queued', '-')}"
                f" queued_events={r.get('queued_events', '-')}")  # fmt: skip

    peak = max(rows, key=lambda r: r["rss"])
    out = [f"peak RSS {peak['rss'] / mib:.1f} MiB at t={peak['t']}s after chunk {peak['chunks']}:", line(peak)]
    out += [line(r) for r in rows if r["event"] in ("spill", "end") and (r["chunks"] % every == 0 or r["chunks"] < 3
            or r["event"] == "end")]  # fmt: skip
    return "\n".join(out)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"== {name}")
        print(summary(Path(name)))
