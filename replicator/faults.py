"""Fault injection for the cluster tests (off unless its environment variable is set).

Like the crash points of the commit protocol, but inside a Spark task: executors get the
variable through ``spark.executorEnv``.
"""

from __future__ import annotations

import os
import signal

# Fault injection for the cluster tests: with this variable set (to a path, through
# spark.executorEnv), the first task attempt to find no file there creates it and kills its
# own executor JVM, as a lost executor would die mid-batch.
LOSE_EXECUTOR_ENV = "REPLICATOR_TEST_LOSE_EXECUTOR_ONCE"


def maybe_lose_executor(attempt: int) -> None:
    marker = os.environ.get(LOSE_EXECUTOR_ENV)
    if not marker or attempt > 0:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    pid = os.getppid()
    while pid > 1:  # the nearest ancestor that is the executor JVM
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{pid}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return
        if b"CoarseGrainedExecutorBackend" in cmdline:
            os.kill(pid, signal.SIGKILL)
            return
        pid = parent
