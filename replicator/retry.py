"""Transient storage and catalog errors: which ones they are, and retrying them with backoff.

Object stores and REST catalogs fail in passing all the time: throttling (503 SlowDown, 429),
5xx, timeouts, connection resets, a token that expired. :func:`transient_error` maps such an
exception (from pyarrow's S3 client, requests, pyiceberg, SQLAlchemy) to one of the engine's
``TransientError`` kinds, or ``None`` when retrying cannot help; :func:`call_with_retries`
retries a call with capped exponential backoff and jitter until a deadline, then raises the
transient error so the run fails with a clear message (and a restart resumes).

Only calls that are safe to repeat are retried here: reads, and writes to names unique to the
attempt. A catalog commit is different: see :func:`commit_failure`.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from replicator.errors import (
    CatalogUnavailableError,
    CommitStateUnknownError,
    StorageUnavailableError,
    TokenExpiredError,
    TransientError,
)
from replicator.secrets import scrub

log = logging.getLogger(__name__)

T = TypeVar("T")

# pyarrow's S3 errors ("AWS Error SLOW_DOWN during PutObject operation: ..."), curl's codes
# (7 connect, 28 timeout, 52 empty reply, 55/56 send/recv failure) and socket-level wording.
_TRANSIENT_IO = re.compile(
    r"NETWORK_CONNECTION|SERVICE_UNAVAILABLE|SLOW_DOWN|THROTTL|REQUEST_TIMEOUT|"
    r"INTERNAL_FAILURE|REQUEST_TIME_TOO_SKEWED|HTTP status (?:5\d\d|429)|"
    r"curlCode: (?:7|28|52|55|56)\b|Connection reset|Connection refused|Connection aborted|"
    r"timed out|Broken pipe|Temporary failure|ServiceUnavailable|SlowDown|InternalError|"
    r"RequestTimeout|TooManyRequests|Remote end closed",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential backoff with full jitter, until ``deadline_seconds`` have passed."""

    deadline_seconds: float = 120.0
    first_delay: float = 0.25
    max_delay: float = 8.0
    multiplier: float = 2.0

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        rng = rng or random.Random()
        cap = self.first_delay
        while True:
            yield rng.uniform(cap / 2, cap)
            cap = min(cap * self.multiplier, self.max_delay)


DEFAULT_POLICY = RetryPolicy()


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def transient_error(exc: BaseException) -> TransientError | None:
    """The engine's transient error for ``exc``, or None when retrying cannot help."""
    if isinstance(exc, TransientError):
        return exc
    message = scrub(f"{type(exc).__name__}: {exc}")
    kind = _catalog_kind(exc)
    if kind is not None:
        return kind(f"catalog unavailable: {message}")
    if _is_transient_io(exc):
        return StorageUnavailableError(f"storage unavailable: {message}")
    return None


def _catalog_kind(exc: BaseException) -> type[TransientError] | None:
    from pyiceberg import exceptions as ice

    if isinstance(exc, ice.CommitStateUnknownException):
        return CommitStateUnknownError
    if isinstance(exc, ice.AuthorizationExpiredError):
        return TokenExpiredError
    if isinstance(exc, ice.ServiceUnavailableError | ice.TooManyRequestsError | ice.ServerError):
        return CatalogUnavailableError
    try:
        import requests
    except ImportError:  # pragma: no cover - pyiceberg depends on requests
        requests = None  # type: ignore[assignment]
    if requests is not None and isinstance(
        exc, requests.ConnectionError | requests.Timeout | requests.exceptions.ChunkedEncodingError
    ):
        return CatalogUnavailableError
    try:
        from sqlalchemy import exc as sa
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, sa.OperationalError | sa.InterfaceError) or (
        isinstance(exc, sa.DBAPIError) and exc.connection_invalidated
    ):
        return CatalogUnavailableError
    return None


# How a missing file reads when it is not a FileNotFoundError: pyarrow's S3 client mid-read
# ("NoSuchKey"), Iceberg Java / Hadoop through Py4J (FileNotFoundException, NotFoundException),
# Spark's analysis of a path that is gone (PATH_NOT_FOUND).
_MISSING_FILE = re.compile(
    r"FileNotFoundException|iceberg\.exceptions\.NotFoundException|NoSuchKey|PATH_NOT_FOUND|"
    r"Path does not exist|No such file or directory",
)


def missing_file(exc: BaseException) -> BaseException | None:
    """The exception in ``exc``'s chain that says a file does not exist, if one does. Not
    transient by itself: whether it is depends on whether the table still references it (a
    reader of a version another writer expired since may read again on the new one)."""
    for e in _chain(exc):
        if isinstance(e, FileNotFoundError) or _MISSING_FILE.search(str(e)):
            return e
    return None


def _is_transient_io(exc: BaseException) -> bool:
    for e in _chain(exc):
        if isinstance(e, FileNotFoundError | PermissionError | IsADirectoryError | FileExistsError):
            return False
        if isinstance(e, ConnectionError | TimeoutError):
            return True
        if isinstance(e, OSError) and _TRANSIENT_IO.search(str(e)):
            return True
    return False


def commit_failure(exc: BaseException) -> TransientError | None:
    """How a failed catalog commit may be retried.

    ``CatalogUnavailableError``: the catalog certainly did not apply it (the connection was
    never made, a 503/429 refusal, metadata could not be written before the swap): retrying
    the same commit is safe. ``CommitStateUnknownError``: the request may have been applied
    and its answer lost (a reset or timeout after sending, a gateway 5xx): only the table's
    checkpoint can tell. ``None``: not transient (conflicts, bad requests) - re-raise.
    """
    from pyiceberg import exceptions as ice

    if isinstance(exc, CommitStateUnknownError):
        return exc
    if isinstance(exc, ice.ServiceUnavailableError | ice.TooManyRequestsError | ice.AuthorizationExpiredError):
        return CatalogUnavailableError(f"catalog refused the commit: {scrub(str(exc))}")
    if _never_sent(exc):
        return CatalogUnavailableError(f"catalog unreachable: {scrub(str(exc))}")
    kind = transient_error(exc)
    if kind is None:
        return None
    if isinstance(kind, StorageUnavailableError):
        # A SQL/Hive catalog writes the new metadata file before swapping the pointer:
        # a storage failure means the swap did not happen.
        return kind
    return CommitStateUnknownError(
        f"the catalog's answer to a commit was lost ({kind.message}); the commit may have happened"
    )


def _never_sent(exc: BaseException) -> bool:
    """The HTTP request could not have reached the server: no connection was made."""
    try:
        import requests
        from urllib3.exceptions import NewConnectionError
    except ImportError:  # pragma: no cover
        return False
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if isinstance(exc, requests.ConnectionError):
        # requests wraps urllib3's MaxRetryError (in args and as __context__), whose reason
        # says whether a connection was ever made.
        todo: list[BaseException] = [exc]
        seen: set[int] = set()
        while todo:
            e = todo.pop()
            if id(e) in seen:
                continue
            seen.add(id(e))
            if isinstance(e, NewConnectionError):
                return True
            todo.extend(x for x in (e.__cause__, e.__context__, getattr(e, "reason", None), *e.args)
                        if isinstance(x, BaseException))
    return False


def call_with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    policy: RetryPolicy = DEFAULT_POLICY,
    classify: Callable[[BaseException], TransientError | None] = transient_error,
    on_retry: Callable[[TransientError], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``fn()``, retried while it fails transiently and the deadline has not passed.

    Raises the engine's ``TransientError`` (chained to the last failure) once the deadline
    passes, and any other exception at once.
    """
    start = clock()
    delays = policy.delays()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            err = classify(exc)
            if err is None:
                raise
            elapsed = clock() - start
            delay = next(delays)
            if elapsed + delay > policy.deadline_seconds:
                log.error("%s: giving up after %d attempts in %.1fs: %s", what, attempt, elapsed, err.message)
                if err is exc:
                    raise
                raise err from exc
            log.warning("%s: %s; retrying in %.1fs (attempt %d)", what, err.message, delay, attempt + 1)
            if on_retry is not None:
                on_retry(err)
            sleep(delay)
