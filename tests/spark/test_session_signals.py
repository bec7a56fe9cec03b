"""Spark's JVM is out of reach of a stop signal sent to the engine's process group (a
terminal's Ctrl-C, ``kill -- -PGID``, a scheduler): the engine finishes the batch in
progress and stops cleanly, instead of Spark dying under it with Py4J tracebacks."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

import spark.session as session

pytestmark = pytest.mark.spark

SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def _ignored_signals(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigIgn line for {pid}")


def test_the_jvm_runs_in_its_own_session_with_sigterm_ignored(spark: Any) -> None:
    jvm = session._gateway.proc.pid  # noqa: SLF001 - the process this module launched
    assert os.getsid(jvm) != os.getsid(0)
    assert os.getpgid(jvm) != os.getpgid(0)
    assert _ignored_signals(jvm) & SIGTERM_BIT
    # ours is untouched: the engine's own handler still gets SIGTERM
    assert not _ignored_signals(os.getpid()) & SIGTERM_BIT
    assert spark.range(3).count() == 3
