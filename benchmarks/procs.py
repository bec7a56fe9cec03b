"""Peak memory of every process taking part: this process, the Spark driver JVM (a child),
Spark's Python workers (children of the JVM) and the database servers.

CPU time (user + system) per process comes from ``/proc/<pid>/stat``, read by the same
sampler: a process's share of a phase is its last reading minus its reading at the phase's
start (0 for a process born during the phase). A process that exits within a phase loses at
most one interval of its CPU (reaped children's time is not added: it would count them
twice). The sampler's own thread is taken out of the driver's share.

Peaks come from ``/proc/<pid>/status`` ``VmHWM`` (the kernel's resident high-water mark),
reset at the start of each phase by writing ``5`` to ``/proc/<pid>/clear_refs`` (Linux 4.0+;
a process we may not reset keeps its lifetime peak, which the report then says). Processes
that come and go within a phase (forked Python workers) are caught by a sampler thread that
reads every process's ``VmHWM`` every ``interval`` seconds and keeps the maximum per pid;
the same sampler records the current ``VmRSS`` per process class for the memory-over-time
chart.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CLASSES = ("driver (Python)", "Spark JVM", "Spark Python workers", "Postgres", "MariaDB",
           "source reader (Python)", "lag writer (Python)", "other")  # fmt: skip


def _status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmHWM:", "VmRSS:")):
                out[line.split(":")[0]] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process (its own threads, not its children)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return None


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    return children


def descendants(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    children = children if children is not None else _children_map()
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def classify(pid: int, me: int) -> str:
    if pid == me:
        return "driver (Python)"
    cmd = cmdline(pid)
    if "java" in cmd.split(" ", 1)[0] or "org.apache.spark" in cmd:
        return "Spark JVM"
    if "pyspark" in cmd or "spark_probe" in cmd:
        return "Spark Python workers"
    if "multiprocessing" in cmd:
        # source.reader_process names its child (replicator/pipeline/reader_child.py).
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "source-reader":
                return "source reader (Python)"
        return "lag writer (Python)"
    if "postgres" in cmd:
        return "Postgres"
    if "mariadbd" in cmd or "mysqld" in cmd:
        return "MariaDB"
    return "other"


def release_free_memory() -> None:
    """Hand this process's free heap back to the system before a phase's peak is reset:
    glibc keeps freed blocks (and Arrow's pool its own) mapped, so without this a phase's
    RSS starts at the high-water mark an earlier phase left, and a later, larger batch's
    growth hides inside it (the sweep's engines run one after another in this process)."""
    with contextlib.suppress(Exception):
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


@dataclass
class MemoryReport:
    peaks_kib: dict[str, int]  # class -> max VmHWM of one process of that class
    sum_peaks_kib: dict[str, int]  # class -> sum over that class's processes of their peaks
    processes: dict[int, tuple[str, int]]  # pid -> (class, peak KiB)
    start_kib: dict[str, int] = field(default_factory=dict)  # class -> max VmRSS at the start
    timeline: list[tuple[float, dict[str, int]]] = field(default_factory=list)  # RSS by class
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # class -> user+sys seconds


class MemorySampler:
    """Tracks this process tree plus extra server pids (``extra_roots``) while active."""

    def __init__(self, extra_roots: Callable[[], list[int]] | None = None,
                 interval: float = 0.5) -> None:  # fmt: skip
        self.me = os.getpid()
        self.extra_roots = extra_roots or (lambda: [])
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._peaks: dict[int, tuple[str, int]] = {}
        self._timeline: list[tuple[float, dict[str, int]]] = []
        self._start: dict[str, int] = {}
        # pid -> (class, CPU seconds at the phase start or first sight, latest CPU seconds)
        self._cpu: dict[int, tuple[str, float, float]] = {}
        self._own_cpu = 0.0  # the sampler thread's CPU, taken out of the driver's
        self._t0 = 0.0
        self._lock = threading.Lock()

    def pids(self) -> list[int]:
        children = _children_map()
        roots = [self.me, *self.extra_roots()]
        out: list[int] = []
        for r in roots:
            out.append(r)
            out.extend(descendants(r, children))
        return sorted(set(out))

    def _sample(self) -> None:
        by_class: dict[str, int] = {}
        for pid in self.pids():
            st = _status(pid)
            if not st:
                continue
            cls = self._peaks.get(pid, (None, 0))[0] or classify(pid, self.me)
            with self._lock:
                prev = self._peaks.get(pid, (cls, 0))[1]
                self._peaks[pid] = (cls, max(prev, st.get("VmHWM", 0)))
                cpu = cpu_seconds(pid)
                if cpu is not None:
                    first = self._cpu.get(pid, (cls, 0.0, 0.0))[1]
                    self._cpu[pid] = (cls, first, cpu)
            by_class[cls] = by_class.get(cls, 0) + st.get("VmRSS", 0)
        self._timeline.append((time.monotonic() - self._t0, by_class))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            t0 = time.thread_time()
            self._sample()
            self._own_cpu += time.thread_time() - t0

    def start(self) -> MemorySampler:
        gc.collect()  # garbage of earlier phases is not this phase's memory
        release_free_memory()
        self._start = {}
        for pid in self.pids():
            reset_peak(pid)
            cls = classify(pid, self.me)
            rss = _status(pid).get("VmRSS", 0)
            self._start[cls] = max(self._start.get(cls, 0), rss)
        self._peaks.clear()
        self._cpu = {}
        for pid in self.pids():  # processes alive now count from here, new ones from 0
            cpu = cpu_seconds(pid)
            if cpu is not None:
                self._cpu[pid] = (classify(pid, self.me), cpu, cpu)
        self._own_cpu = 0.0
        self._timeline = []
        self._t0 = time.monotonic()
        self._stop.clear()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="mem-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> MemoryReport:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(Exception):
            self._sample()
        peaks: dict[str, int] = {}
        sums: dict[str, int] = {}
        for cls, kib in self._peaks.values():
            peaks[cls] = max(peaks.get(cls, 0), kib)
            sums[cls] = sums.get(cls, 0) + kib
        cpu: dict[str, float] = {}
        for cls, first, last in self._cpu.values():
            cpu[cls] = cpu.get(cls, 0.0) + max(last - first, 0.0)
        if "driver (Python)" in cpu:
            cpu["driver (Python)"] = max(cpu["driver (Python)"] - self._own_cpu, 0.0)
        return MemoryReport(peaks, sums, dict(self._peaks), dict(self._start),
                            list(self._timeline), cpu)  # fmt: skip


def postmaster_pid(data_dir: Path) -> list[int]:
    try:
        return [int((data_dir / "postmaster.pid").read_text().split()[0])]
    except (OSError, ValueError, IndexError):
        return []


def machine() -> dict[str, str]:
    """nproc, memory, CPU model, load average, kernel."""
    info: dict[str, str] = {"nproc": str(os.cpu_count())}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory"] = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    info["kernel"] = os.uname().release
    info["loadavg"] = load_average()
    return info


def machine_speed(root: Path) -> dict[str, str]:
    """What this machine does in a fixed time, for comparing runs on different days: the
    same code's figures moved 2-3x between sessions on machines of one kind (a pure-Python
    loop, a file created under the work root ``root``, an fsync there). Takes ~0.5 s."""
    loop = float("inf")
    for _ in range(3):
        t0, total = time.perf_counter(), 0
        for i in range(2_000_000):
            total += i
        loop = min(loop, time.perf_counter() - t0)
    probe = Path(tempfile.mkdtemp(prefix="speed-", dir=root))
    try:
        t0 = time.perf_counter()
        for i in range(200):
            (probe / f"f{i}").write_bytes(b"x" * 100)
        create = (time.perf_counter() - t0) / 200
        syncs = []
        fd = os.open(probe / "sync", os.O_CREAT | os.O_WRONLY)
        try:
            for _ in range(21):
                os.write(fd, b"x" * 4096)
                t0 = time.perf_counter()
                os.fsync(fd)
                syncs.append(time.perf_counter() - t0)
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return {
        "python_loop": f"{loop * 1e3:.0f} ms (2,000,000 additions, best of 3)",
        "file_create": f"{create * 1e3:.3f} ms a file under {root}",
        "fsync": f"{sorted(syncs)[10] * 1e3:.2f} ms (median of 21) under {root}",
    }


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"
