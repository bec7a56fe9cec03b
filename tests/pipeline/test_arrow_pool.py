import platform
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from replicator.config import RunConfig
from replicator.errors import ConfigError
from replicator.pipeline import arrow_pool
from replicator.pipeline.arrow_pool import memory_pool, run_pool
from replicator.pipeline.observe import StepObserver
from replicator.pipeline.runner import Replicator
from tests.maintenance.support import config, feed, mixed
from tests.pipeline.dbz import ChangeLog


@pytest.fixture(autouse=True)
def _keep_pool():
    before = pa.default_memory_pool()
    yield
    pa.set_memory_pool(before)


def test_the_run_allocates_from_the_system_pool_by_default_and_restores_the_previous() -> None:
    # pyarrow's own default (mimalloc on Linux) kept a batch's pages: the driver's resident
    # memory grew with batch size (benchmarks/README.md, "Driver memory vs batch size").
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    default = RunConfig.model_fields["arrow_memory_pool"].default
    assert default == "system"
    with run_pool(default):
        assert pa.default_memory_pool().backend_name == "system"
        assert pa.array([1, 2, 3]).buffers()[1] is not None
    assert pa.default_memory_pool().backend_name == "mimalloc"


def test_nested_runs_keep_the_outermost_choice_and_restore_once() -> None:
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    with run_pool("system"):
        with run_pool("mimalloc"):
            assert pa.default_memory_pool().backend_name == "system"
        assert pa.default_memory_pool().backend_name == "system"
    assert pa.default_memory_pool().backend_name == "mimalloc"
    assert arrow_pool._runs == 0


def test_restores_even_when_the_run_raises() -> None:
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    with pytest.raises(RuntimeError), run_pool("system"):
        raise RuntimeError("boom")
    assert pa.default_memory_pool().backend_name == "mimalloc"


def test_pyarrow_default_leaves_the_pool_alone() -> None:
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    with run_pool("pyarrow-default"):
        assert pa.default_memory_pool().backend_name == "mimalloc"
    assert memory_pool("pyarrow-default") is None


def test_a_pool_this_pyarrow_lacks_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> pa.MemoryPool:
        raise NotImplementedError("built without jemalloc")

    monkeypatch.setitem(arrow_pool._POOLS, "jemalloc", missing)
    with pytest.raises(ConfigError, match="'jemalloc' is not available.*built without jemalloc"):
        memory_pool("jemalloc")


def test_an_unknown_pool_name_is_refused_by_the_config() -> None:
    cfg = {"source": {"type": "debezium-json", "path": "x"},
           "iceberg": {"catalog_uri": "sqlite:///c.db", "warehouse": "w"}}
    assert RunConfig.model_validate(cfg).arrow_memory_pool == "system"
    with pytest.raises(ValueError, match="1 validation error.*\\narrow_memory_pool"):
        RunConfig.model_validate({**cfg, "arrow_memory_pool": "tcmalloc"})


def test_the_engine_stages_its_batches_with_the_configured_pool(tmp_path: Path) -> None:
    log = ChangeLog()
    mixed(log, random.Random(3), 20)
    feed(tmp_path, "0001.jsonl", log)
    cfg = config(tmp_path, max_events=8, exactly_once=False)
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    steps = _PoolSeen()
    summary = Replicator(cfg, engine="local", steps=steps).run(until_idle=True)
    assert summary.batches > 1
    assert steps.pools == {"system"}
    assert pa.default_memory_pool().backend_name == "mimalloc"  # put back after the run


class _PoolSeen(StepObserver):
    def __init__(self) -> None:
        self.pools: set[str] = set()

    def events_staged(self, table: str, seconds: float) -> None:
        self.pools.add(pa.default_memory_pool().backend_name)


_MMAPPED_AFTER_A_FREE = """
import ctypes, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "fixed":
    from replicator.pipeline.arrow_pool import fix_mmap_threshold
    assert fix_mmap_threshold()
libc.free(libc.malloc(8 << 20))  # freeing a mapped block raises glibc's moving threshold
before = libc.mallinfo2().hblks
b = libc.malloc(8 << 20)
print(libc.mallinfo2().hblks - before)  # 1: b is a mapping of its own (unmapped on free)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
@pytest.mark.parametrize(("mode", "mapped"), [("fixed", "1"), ("moving", "0")])
def test_a_large_buffer_stays_a_mapping_of_its_own_once_the_threshold_is_fixed(mode: str, mapped: str) -> None:
    # With glibc's moving threshold, a batch's large buffers come from the heap after the first
    # one is freed, and their pages stay resident: the driver's peak grew with batch size.
    out = subprocess.run([sys.executable, "-c", _MMAPPED_AFTER_A_FREE, mode], check=True,
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert out.stdout.strip() == mapped


def test_only_the_system_pool_fixes_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(arrow_pool, "fix_mmap_threshold", lambda: calls.append("fixed") or True)
    for name in ("mimalloc", "pyarrow-default", "system"):
        with run_pool(name):
            pass
    assert calls == ["fixed"]
