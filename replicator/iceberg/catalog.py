"""Open the configured Iceberg catalog (any pyiceberg catalog) and make its calls resilient.

``iceberg.catalog_uri`` is the short form of a SQL catalog; ``iceberg.catalog`` holds any
pyiceberg catalog's properties (REST with OAuth2 client credentials or a bearer token, SQL,
Glue, Hive, ...), handed to ``pyiceberg.catalog.load_catalog`` as they are.

Resilience: the catalog's calls are wrapped on the instance (so the ``Table`` objects it
returns, which call back into it for ``refresh()`` and commits, go through the wrappers too):

* reads (``load_table``, ``list_tables``, ...) are retried on transient errors with backoff;
* ``create_table`` / ``create_namespace`` too (a lost answer to a create that did happen is
  recognised by "already exists");
* ``commit_table`` is retried only when the catalog certainly did not apply it (no connection,
  503/429); when its answer may have been lost it raises ``CommitStateUnknownError`` for the
  commit loop, which reads the table's checkpoint to decide (replicator.retry.commit_failure).

REST calls get a default timeout (pyiceberg sets none, so a silent server would hang the
engine). pyiceberg internals used: ``RestCatalog._session`` (a ``requests.Session``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import (
    ForbiddenError,
    NamespaceAlreadyExistsError,
    NotInstalledError,
    OAuthError,
    TableAlreadyExistsError,
    UnauthorizedError,
)

from replicator.config import IcebergConfig
from replicator.errors import CommitStateUnknownError, ConfigError, TransientError
from replicator.iceberg import sql_commit
from replicator.retry import DEFAULT_POLICY, RetryPolicy, call_with_retries, commit_failure
from replicator.secrets import scrub
from spark.object_storage import file_io_properties

log = logging.getLogger(__name__)

# (connect, read) seconds for REST catalog requests.
REST_TIMEOUT = (10.0, 120.0)

_RETRIED_READS = (
    "load_table", "list_tables", "list_namespaces", "table_exists", "namespace_exists",
    "load_namespace_properties",
)


def catalog_properties(cfg: IcebergConfig) -> dict[str, str]:
    """What ``load_catalog`` gets: the configured properties, plus the engine's default S3
    retry strategy for the FileIO (unless one is configured)."""
    props = cfg.catalog_properties
    props.update({k: v for k, v in file_io_properties(props).items() if k not in props})
    return props


def open_catalog(cfg: IcebergConfig, *, policy: RetryPolicy = DEFAULT_POLICY) -> Catalog:
    """The configured catalog, with resilient calls and the namespace created."""
    where = cfg.describe_catalog()
    props = catalog_properties(cfg)
    try:
        catalog = call_with_retries(
            lambda: load_catalog(cfg.catalog_name, **props), what=f"opening {where}", policy=policy
        )
    except TransientError:
        raise
    except (OAuthError, UnauthorizedError, ForbiddenError) as exc:
        raise ConfigError(
            f"the {where} refused our credentials: {scrub(str(exc))}",
            hint="check iceberg.catalog.credential (client_id:client_secret) or token",
        ) from None
    except (ValueError, NotInstalledError, ImportError) as exc:
        raise ConfigError(f"cannot open the {where}: {scrub(str(exc))}") from None
    make_resilient(catalog, policy)
    sql_commit.install(catalog)  # a SQL catalog's commits without re-parse and deep copy
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(cfg.namespace)
    return catalog


def make_resilient(catalog: Catalog, policy: RetryPolicy = DEFAULT_POLICY) -> Catalog:
    """Wrap the catalog's calls in place (idempotent)."""
    if getattr(catalog, "_replicator_resilient", False):
        return catalog
    name = type(catalog).__name__
    for method in _RETRIED_READS:
        if hasattr(catalog, method):
            setattr(catalog, method, _retrying(getattr(catalog, method), f"{name}.{method}", policy))
    catalog.create_table = _creating(  # type: ignore[method-assign]
        catalog.create_table, catalog.load_table, TableAlreadyExistsError, f"{name}.create_table", policy)
    catalog.create_namespace = _creating(  # type: ignore[method-assign]
        catalog.create_namespace, None, NamespaceAlreadyExistsError, f"{name}.create_namespace", policy)
    catalog.commit_table = _committing(catalog.commit_table, f"{name}.commit_table", policy)  # type: ignore[method-assign]
    _set_rest_timeout(catalog)
    catalog._replicator_resilient = True  # type: ignore[attr-defined]
    return catalog


def _retrying(fn: Callable[..., Any], what: str, policy: RetryPolicy) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return call_with_retries(lambda: fn(*args, **kwargs), what=what, policy=policy)

    return call


def _creating(
    fn: Callable[..., Any], load: Callable[..., Any] | None, exists: type[Exception], what: str,
    policy: RetryPolicy,
) -> Callable[..., Any]:
    """A create that may be retried: if an earlier attempt's answer was lost and it did
    create the thing, the retry's "already exists" means success."""

    @functools.wraps(fn)
    def call(identifier: Any, *args: Any, **kwargs: Any) -> Any:
        attempts = 0

        def once() -> Any:
            nonlocal attempts
            attempts += 1
            try:
                return fn(identifier, *args, **kwargs)
            except exists:
                if attempts == 1 or load is None:
                    raise
                log.info("%s: %s exists after a retried create; using it", what, identifier)
                return load(identifier)

        return call_with_retries(once, what=what, policy=policy)

    return call


def _committing(fn: Callable[..., Any], what: str, policy: RetryPolicy) -> Callable[..., Any]:
    def classify(exc: BaseException) -> TransientError | None:
        err = commit_failure(exc)
        if isinstance(err, CommitStateUnknownError):
            raise err from exc  # never retried blindly: the checkpoint decides
        return err

    @functools.wraps(fn)
    def call(table: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call_with_retries(
                lambda: fn(table, *args, **kwargs), what=what, policy=policy, classify=classify
            )
        except CommitStateUnknownError as exc:
            raise CommitStateUnknownError(
                exc.message,
                table=".".join(table.name()),
                hint="the table's checkpoint (replicator.position) tells whether it happened; "
                "a restart settles it and never applies the batch twice",
            ) from exc.__cause__

    return call


def _set_rest_timeout(catalog: Catalog) -> None:
    session = getattr(catalog, "_session", None)
    if session is None:
        return
    import requests

    if not isinstance(session, requests.Session):
        return
    original: Callable[..., Any] = session.request

    def request(method: str, url: str, **kwargs: Any) -> Any:
        kwargs.setdefault("timeout", REST_TIMEOUT)
        return original(method, url, **kwargs)

    setattr(session, "request", request)  # noqa: B010  (an instance attribute, on purpose)
