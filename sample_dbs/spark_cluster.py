"""A private Spark standalone cluster on loopback: one master and N workers, started from the
pyspark package itself (``bin/spark-class``), each worker with its own work dir, all on
127.0.0.1 and free ports; stopped and removed on exit.

    with PrivateSparkCluster(tmp / "cluster", workers=2) as cluster:
        cluster.master_url          # spark://127.0.0.1:PORT
        cluster.executor_pids()     # the executors' JVMs, for fault tests

CLI: ``python -m sample_dbs.spark_cluster DIR [--workers N]`` starts one and waits for Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateSparkCluster:
    def __init__(self, root: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g",
                 start_timeout: float = 180.0) -> None:  # fmt: skip
        self.root = Path(root)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self.port = _free_port()
        self.ui_port = _free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def worker_dir(self, i: int) -> Path:
        return self.root / f"worker-{i}"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_NO_DAEMONIZE": "1"}  # fmt: skip

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=log, stderr=subprocess.STDOUT,
            env=self._env(), cwd=self.root, start_new_session=True,
        )  # fmt: skip
        self.procs.append(proc)

    def start(self) -> PrivateSparkCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        self._spawn("master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                               "--webui-port", str(self.ui_port)])  # fmt: skip
        for i in range(self.workers):
            self.worker_dir(i).mkdir(parents=True, exist_ok=True)
            self._spawn(f"worker-{i}", [
                WORKER_CLASS, self.master_url, "--host", "127.0.0.1", "--cores", str(self.cores),
                "--memory", self.memory, "--work-dir", str(self.worker_dir(i)),
                "--webui-port", str(_free_port()),
            ])  # fmt: skip
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE") >= self.workers:
                return self
            for p in self.procs:
                if p.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"a Spark cluster process exited ({p.args}); logs in {self.root}")
            time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"the Spark cluster did not start in {self.start_timeout:.0f} s; logs in {self.root}")

    def state(self) -> dict[str, object]:
        """The master's JSON status (workers, applications)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                data: dict[str, object] = json.loads(r.read())
                return data
        except (OSError, urllib.error.URLError, ValueError):
            return {}

    def executor_pids(self) -> list[int]:
        """PIDs of the executor JVMs the workers run now."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmd = (entry / "cmdline").read_bytes()
                if EXECUTOR_CLASS.encode() in cmd and str(self.root).encode() in cmd:
                    pids.append(int(entry.name))
        return pids

    def stop(self) -> None:
        for pid in self.executor_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []

    def __enter__(self) -> PrivateSparkCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Run a private Spark standalone cluster on loopback.")
    parser.add_argument("dir", type=Path, help="folder for logs and the workers' work dirs (removed at exit)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    cluster = PrivateSparkCluster(args.dir, workers=args.workers).start()
    print(f"master: {cluster.master_url}  (Ctrl-C stops it)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
