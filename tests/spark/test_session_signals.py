"""Spark's JVM is out of reach of a stop signal sent to the engine's process group (a
terminal's Ctrl-C, ``kill -- -PGID``, a scheduler): the engine finishes the batch in
progress and stops cleanly, instead of Spark dying under it with Py4J tracebacks. And a stop
signal that arrives while Spark starts is not lost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import spark.session as session

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def test_the_jvm_runs_in_its_own_session(spark: Any) -> None:
    jvm = session._gateway.proc.pid  # noqa: SLF001 - the process this module launched
    assert os.getsid(jvm) != os.getsid(0)
    assert os.getpgid(jvm) != os.getpgid(0)
    assert spark.range(3).count() == 3


SIGNAL_DURING_START = """
import os, signal, threading, time
got = []
signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
def when_the_jvm_starts():  # SIGTERM once the launch is under way (a child exists)
    me = os.getpid()
    while not open(f"/proc/{me}/task/{me}/children").read().strip():
        time.sleep(0.01)
    os.kill(me, signal.SIGTERM)
threading.Thread(target=when_the_jvm_starts, daemon=True).start()
from spark.session import get_spark
get_spark().range(1).count()  # starting takes seconds: the signal arrives meanwhile
time.sleep(0.2)
print("handled" if got else "lost")
"""


def test_a_stop_signal_while_spark_starts_is_not_lost() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SIGNAL_DURING_START], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
    )  # fmt: skip
    assert out.stdout.strip().splitlines()[-1:] == ["handled"], out.stdout + out.stderr[-2000:]
