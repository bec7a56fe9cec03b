"""Open the configured Iceberg catalog (any pyiceberg catalog) and make its calls resilient.

``iceberg.catalog_uri`` is the short form of a SQL catalog; ``iceberg.catalog`` holds any
pyiceberg catalog's properties (REST with OAuth2 client credentials or a bearer token, SQL,
Glue, Hive, ...), handed to ``pyiceberg.catalog.load_catalog`` as they are.

Resilience: the engine talks to a ``ResilientCatalog``, a pyiceberg ``Catalog`` that holds the
loaded catalog and passes every call on to it. The ``Table`` objects it returns are bound to the
wrapper (they call back into their catalog for ``refresh()`` and commits), so those go through
the wrapper too:

* reads (``load_table``, ``list_tables``, ...) are retried on transient errors with backoff;
* ``create_table`` / ``create_namespace`` too (a lost answer to a create that did happen is
  recognised by "already exists");
* ``commit_table`` is retried only when the catalog certainly did not apply it (no connection,
  503/429); when its answer may have been lost it raises ``CommitStateUnknownError`` for the
  commit loop, which reads the table's checkpoint to decide (replicator.retry.commit_failure).

Nothing is assigned on the loaded catalog object (issue 25): what changes is which object the
engine calls. A SQL catalog is opened as ``sql_commit.FastCommitSqlCatalog`` (a subclass).

REST calls get a default timeout (pyiceberg sets none, so a silent server would hang the
engine): each transport adapter mounted on the REST session is wrapped in one that supplies
it, through ``requests``' own ``Session.mount``. pyiceberg internals used:
``RestCatalog._session`` (a ``requests.Session``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    ForbiddenError,
    NamespaceAlreadyExistsError,
    NotInstalledError,
    OAuthError,
    TableAlreadyExistsError,
    UnauthorizedError,
)
from pyiceberg.table import CreateTableTransaction, StagedTable, Table
from pyiceberg.typedef import EMPTY_DICT
from requests import PreparedRequest, Response
from requests.adapters import BaseAdapter

from replicator.config import IcebergConfig
from replicator.errors import CommitStateUnknownError, ConfigError, TransientError
from replicator.iceberg import sql_commit
from replicator.retry import DEFAULT_POLICY, RetryPolicy, call_with_retries, commit_failure
from replicator.secrets import scrub
from replicator.storage.fileio import file_io_properties

if TYPE_CHECKING:
    from pyiceberg.catalog import PropertiesUpdateSummary
    from pyiceberg.schema import Schema
    from pyiceberg.table import CommitTableResponse
    from pyiceberg.table.update import TableRequirement, TableUpdate
    from pyiceberg.typedef import Identifier, Properties
    from pyiceberg.view import View

log = logging.getLogger(__name__)

# (connect, read) seconds for REST catalog requests.
REST_TIMEOUT = (10.0, 120.0)

T = TypeVar("T")


def catalog_properties(cfg: IcebergConfig) -> dict[str, str]:
    """What ``load_catalog`` gets: the configured properties, plus the engine's default S3
    retry strategy for the FileIO (unless one is configured)."""
    props = cfg.catalog_properties
    props.update({k: v for k, v in file_io_properties(props).items() if k not in props})
    return props


def open_catalog(cfg: IcebergConfig, *, policy: RetryPolicy = DEFAULT_POLICY) -> ResilientCatalog:
    """The configured catalog, with resilient calls and the namespace created."""
    where = cfg.describe_catalog()
    props = catalog_properties(cfg)
    try:
        loaded = call_with_retries(
            lambda: _load(cfg.catalog_name, props), what=f"opening {where}", policy=policy
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
    catalog = make_resilient(loaded, policy)
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(cfg.namespace)
    return catalog


def _load(name: str, props: dict[str, str]) -> Catalog:
    catalog = load_catalog(name, **props)
    if type(catalog) is SqlCatalog:
        # The same catalog (same name, same merged properties), opened as the subclass with
        # the cheaper commit path.
        fast = sql_commit.FastCommitSqlCatalog(catalog.name, **catalog.properties)
        catalog.engine.dispose()
        return fast
    return catalog


def make_resilient(catalog: Catalog, policy: RetryPolicy = DEFAULT_POLICY) -> ResilientCatalog:
    """``catalog`` behind a ``ResilientCatalog`` (a resilient one is returned as it is)."""
    if isinstance(catalog, ResilientCatalog):
        return catalog
    return ResilientCatalog(catalog, policy)


def unwrapped(catalog: Catalog) -> Catalog:
    """The pyiceberg catalog behind the engine's wrapper (for code that needs its type)."""
    return catalog.inner if isinstance(catalog, ResilientCatalog) else catalog


class ResilientCatalog(Catalog):
    """A pyiceberg catalog that retries the calls of the catalog it holds (module docstring)."""

    def __init__(self, inner: Catalog, policy: RetryPolicy = DEFAULT_POLICY) -> None:
        super().__init__(inner.name, **inner.properties)
        self.inner = inner
        self.policy = policy
        self._kind = type(inner).__name__
        _set_rest_timeout(inner)

    # -- retried ---------------------------------------------------------------------------

    def _retried(self, method: str, call: Callable[[], T]) -> T:
        return call_with_retries(call, what=f"{self._kind}.{method}", policy=self.policy)

    def _bound(self, table: Table) -> Table:
        """``table`` calling back into this wrapper (its refreshes and commits retried)."""
        return Table(table.name(), table.metadata, table.metadata_location, table.io, self, table.config)

    def load_table(self, identifier: str | Identifier) -> Table:
        return self._bound(self._retried("load_table", lambda: self.inner.load_table(identifier)))

    def list_tables(self, namespace: str | Identifier) -> list[Identifier]:
        return self._retried("list_tables", lambda: self.inner.list_tables(namespace))

    def list_namespaces(self, namespace: str | Identifier = ()) -> list[Identifier]:
        return self._retried("list_namespaces", lambda: self.inner.list_namespaces(namespace))

    def table_exists(self, identifier: str | Identifier) -> bool:
        return self._retried("table_exists", lambda: self.inner.table_exists(identifier))

    def namespace_exists(self, namespace: str | Identifier) -> bool:
        return self._retried("namespace_exists", lambda: self.inner.namespace_exists(namespace))

    def load_namespace_properties(self, namespace: str | Identifier) -> Properties:
        return self._retried(
            "load_namespace_properties", lambda: self.inner.load_namespace_properties(namespace)
        )

    def create_table(self, identifier: str | Identifier, schema: Schema | Any, *args: Any, **kwargs: Any) -> Table:
        def create() -> Table:
            return self.inner.create_table(identifier, schema, *args, **kwargs)

        table = self._creating("create_table", identifier, create, TableAlreadyExistsError,
                               lambda: self.inner.load_table(identifier))  # fmt: skip
        return self._bound(table)

    def create_namespace(self, namespace: str | Identifier, properties: Properties = EMPTY_DICT) -> None:
        def create() -> None:
            self.inner.create_namespace(namespace, properties)

        self._creating("create_namespace", namespace, create, NamespaceAlreadyExistsError, None)

    def _creating(
        self, method: str, identifier: Any, create: Callable[[], T], exists: type[Exception],
        load: Callable[[], T] | None,
    ) -> T:
        """A create that may be retried: if an earlier attempt's answer was lost and it did
        create the thing, the retry's "already exists" means success."""
        what = f"{self._kind}.{method}"
        attempts = 0

        def once() -> T:
            nonlocal attempts
            attempts += 1
            try:
                return create()
            except exists:
                if attempts == 1 or load is None:
                    raise
                log.info("%s: %s exists after a retried create; using it", what, identifier)
                return load()

        return call_with_retries(once, what=what, policy=self.policy)

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        def classify(exc: BaseException) -> TransientError | None:
            err = commit_failure(exc)
            if isinstance(err, CommitStateUnknownError):
                raise err from exc  # never retried blindly: the checkpoint decides
            return err

        try:
            return call_with_retries(
                lambda: self.inner.commit_table(table, requirements, updates),
                what=f"{self._kind}.commit_table", policy=self.policy, classify=classify,
            )
        except CommitStateUnknownError as exc:
            raise CommitStateUnknownError(
                exc.message,
                table=".".join(table.name()),
                hint="the table's checkpoint (replicator.position) tells whether it happened; "
                "a restart settles it and never applies the batch twice",
            ) from exc.__cause__

    # -- passed on -------------------------------------------------------------------------

    def create_table_transaction(
        self, identifier: str | Identifier, schema: Schema | Any, *args: Any, **kwargs: Any
    ) -> CreateTableTransaction:
        staged = self.inner.create_table_transaction(identifier, schema, *args, **kwargs)._table
        assert isinstance(staged, StagedTable)
        # The creating commit goes through this wrapper's commit_table.
        return CreateTableTransaction(StagedTable(
            staged.name(), staged.metadata, staged.metadata_location, staged.io, self, staged.config
        ))  # fmt: skip

    def register_table(self, identifier: str | Identifier, metadata_location: str, overwrite: bool = False) -> Table:
        return self._bound(self.inner.register_table(identifier, metadata_location, overwrite))

    def rename_table(self, from_identifier: str | Identifier, to_identifier: str | Identifier) -> Table:
        return self._bound(self.inner.rename_table(from_identifier, to_identifier))

    def drop_table(self, identifier: str | Identifier) -> None:
        self.inner.drop_table(identifier)

    def purge_table(self, identifier: str | Identifier) -> None:
        self.inner.purge_table(identifier)

    def drop_namespace(self, namespace: str | Identifier) -> None:
        self.inner.drop_namespace(namespace)

    def update_namespace_properties(
        self, namespace: str | Identifier, removals: set[str] | None = None, updates: Properties = EMPTY_DICT
    ) -> PropertiesUpdateSummary:
        return self.inner.update_namespace_properties(namespace, removals, updates)

    def view_exists(self, identifier: str | Identifier) -> bool:
        return self.inner.view_exists(identifier)

    def list_views(self, namespace: str | Identifier) -> list[Identifier]:
        return self.inner.list_views(namespace)

    def load_view(self, identifier: str | Identifier) -> View:
        return self.inner.load_view(identifier)

    def register_view(self, identifier: str | Identifier, metadata_location: str) -> View:
        return self.inner.register_view(identifier, metadata_location)

    def drop_view(self, identifier: str | Identifier) -> None:
        self.inner.drop_view(identifier)

    def create_view(self, identifier: str | Identifier, *args: Any, **kwargs: Any) -> View:
        return self.inner.create_view(identifier, *args, **kwargs)

    def supports_server_side_planning(self) -> bool:
        # pyiceberg plans a scan on the server only for a RestCatalog object itself; through
        # the wrapper, scans are planned from the manifests (the engine's default anyway).
        return False

    def __repr__(self) -> str:
        return f"ResilientCatalog({self.inner!r})"


def _set_rest_timeout(catalog: Catalog) -> None:
    session = getattr(catalog, "_session", None)
    if session is None:
        return
    import requests

    if not isinstance(session, requests.Session):
        return
    for prefix, adapter in list(session.adapters.items()):
        if not isinstance(adapter, _DefaultTimeout):
            session.mount(prefix, _DefaultTimeout(adapter))


class _DefaultTimeout(BaseAdapter):
    """A ``requests`` transport adapter that gives requests without a timeout ``REST_TIMEOUT``
    and hands them to the adapter it wraps (pyiceberg's, SigV4 included)."""

    def __init__(self, inner: BaseAdapter) -> None:
        super().__init__()
        self.inner = inner

    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float | None, float | None] | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        proxies: dict[str, str] | None = None,
    ) -> Response:
        return self.inner.send(
            request, stream=stream, timeout=REST_TIMEOUT if timeout is None else timeout,
            verify=verify, cert=cert, proxies=proxies,
        )

    def close(self) -> None:
        self.inner.close()
