"""Transient storage/catalog errors: classification, backoff, and the catalog wrappers."""

from __future__ import annotations

from http.client import RemoteDisconnected
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
)
from sqlalchemy.exc import OperationalError
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

from replicator.errors import (
    CatalogUnavailableError,
    CommitStateUnknownError,
    StorageUnavailableError,
    TransientError,
)
from replicator.iceberg.catalog import make_resilient
from replicator.retry import RetryPolicy, call_with_retries, commit_failure, transient_error

FAST = RetryPolicy(deadline_seconds=5, first_delay=0.001, max_delay=0.002)


def _refused() -> requests.ConnectionError:
    conn = NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")  # type: ignore[arg-type]
    return requests.ConnectionError(MaxRetryError(None, "/v1/x", conn))  # type: ignore[arg-type]


def _lost_answer() -> requests.ConnectionError:
    return requests.ConnectionError(ProtocolError("Connection aborted.", RemoteDisconnected("closed")))


@pytest.mark.parametrize("exc, kind", [
    (OSError("When uploading part: AWS Error SLOW_DOWN during UploadPart operation"), StorageUnavailableError),
    (OSError("AWS Error NETWORK_CONNECTION during PutObject operation: curlCode: 7, Couldn't connect"), StorageUnavailableError),
    (OSError("AWS Error UNKNOWN (HTTP status 503) during HeadObject operation"), StorageUnavailableError),
    (ConnectionResetError(104, "Connection reset by peer"), StorageUnavailableError),
    (OSError("AWS Error ACCESS_DENIED during PutObject operation"), None),
    (FileNotFoundError("s3://b/k"), None),
    (ServiceUnavailableError("503"), CatalogUnavailableError),
    (TooManyRequestsError("429"), CatalogUnavailableError),
    (ServerError("500"), CatalogUnavailableError),
    (_refused(), CatalogUnavailableError),
    (requests.ReadTimeout("read timed out"), CatalogUnavailableError),
    (OperationalError("SELECT", {}, Exception("server closed the connection unexpectedly")), CatalogUnavailableError),
    (CommitStateUnknownException("504"), CommitStateUnknownError),
    (CommitFailedException("conflict"), None),
    (ValueError("bad"), None),
])
def test_transient_errors_are_recognised(exc: Exception, kind: type[TransientError] | None) -> None:
    got = transient_error(exc)
    assert (type(got) if got is not None else None) is kind


@pytest.mark.parametrize("exc, kind", [
    (_refused(), CatalogUnavailableError),  # never reached the catalog: retry the commit
    (ServiceUnavailableError("503"), CatalogUnavailableError),
    (TooManyRequestsError("429"), CatalogUnavailableError),
    (OSError("AWS Error SERVICE_UNAVAILABLE writing metadata"), StorageUnavailableError),
    (_lost_answer(), CommitStateUnknownError),  # sent; the answer is lost
    (requests.ReadTimeout("read timed out"), CommitStateUnknownError),
    (CommitStateUnknownException("502"), CommitStateUnknownError),
    (OperationalError("COMMIT", {}, Exception("connection lost")), CommitStateUnknownError),
    (CommitFailedException("conflict"), None),
])
def test_commit_failures_are_retried_only_when_surely_not_applied(
    exc: Exception, kind: type[TransientError] | None
) -> None:
    got = commit_failure(exc)
    assert (type(got) if got is not None else None) is kind


def test_backoff_retries_until_the_deadline() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    def always_down() -> None:
        raise OSError("AWS Error SLOW_DOWN during PutObject operation")

    policy = RetryPolicy(deadline_seconds=30, first_delay=0.5, max_delay=4)
    with pytest.raises(StorageUnavailableError) as exc:
        call_with_retries(always_down, what="x", policy=policy, sleep=sleep, clock=lambda: now[0])
    assert isinstance(exc.value.__cause__, OSError)
    assert sum(slept) <= 30 and len(slept) >= 8
    assert max(slept) <= 4 and slept[0] <= 0.5  # capped exponential with jitter


def test_non_transient_errors_are_not_retried() -> None:
    calls = []

    def bad() -> None:
        calls.append(1)
        raise ValueError("bug")

    with pytest.raises(ValueError):
        call_with_retries(bad, what="x", policy=FAST)
    assert calls == [1]


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=tmp_path.as_uri())
    cat.create_namespace("ns")
    return cat


def _flaky(fn: Any, failures: list[BaseException]) -> Any:
    calls: list[int] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return fn(*args, **kwargs)

    call.calls = calls  # type: ignore[attr-defined]
    return call


def test_catalog_reads_are_retried(catalog: SqlCatalog) -> None:
    catalog.create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    catalog.load_table = _flaky(catalog.load_table, [ServiceUnavailableError("503"), _refused()])  # type: ignore[method-assign]
    flaky = catalog.load_table
    resilient = make_resilient(catalog, FAST)
    assert resilient.load_table("ns.t").name() == ("ns", "t")
    assert len(flaky.calls) == 3


def test_a_create_whose_answer_was_lost_finds_the_table(catalog: SqlCatalog) -> None:
    real = catalog.create_table

    def create_then_lose_answer(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            calls.append(1)
            real(*args, **kwargs)
            raise _lost_answer()
        return real(*args, **kwargs)

    calls: list[int] = []
    catalog.create_table = create_then_lose_answer  # type: ignore[method-assign]
    table = make_resilient(catalog, FAST).create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    assert table.name() == ("ns", "t")


def test_commit_with_a_lost_answer_raises_commit_state_unknown(catalog: SqlCatalog) -> None:
    catalog.commit_table = _flaky(catalog.commit_table, [ServiceUnavailableError("503"), _lost_answer()])  # type: ignore[method-assign]
    flaky = catalog.commit_table
    table = make_resilient(catalog, FAST).create_table("ns.t", schema=pa.schema([("id", pa.int64())]))
    with pytest.raises(CommitStateUnknownError) as exc:
        table.append(pa.table({"id": pa.array([1], pa.int64())}))
    assert exc.value.table == "ns.t" and "may have happened" in str(exc.value)
    assert len(flaky.calls) == 2  # the 503 was retried, the lost answer was not
