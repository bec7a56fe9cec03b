"""Shared fixtures. Keep this light: subfolders add their own conftest files."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Tests import `spark.*` and `tests.*` from the repo root; make that work without an
# editable install or a `pythonpath` setting.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


# Test runs are short: a C1-only JIT halves Spark's cold start (set it empty to disable).
os.environ.setdefault("REPLICATOR_SPARK_JAVA_OPTS", "-XX:TieredStopAtLevel=1")


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    """The process-wide local Spark session with Iceberg (started once, ~5 s)."""
    from spark.session import get_spark

    return get_spark()
