"""The engine's catalog is a wrapper around pyiceberg's (issue 25): the loaded catalog object
is left as pyiceberg built it, and the tables the engine gets call back into the wrapper."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import requests

from replicator.config import IcebergConfig
from replicator.iceberg import catalog as catalogs
from replicator.iceberg.sql_commit import FastCommitSqlCatalog


def _config(tmp_path: Path) -> IcebergConfig:
    return IcebergConfig.model_validate(
        {"catalog_uri": f"sqlite:///{tmp_path}/c.db", "warehouse": tmp_path.as_uri(), "namespace": "cdc"}
    )


def test_the_loaded_catalog_is_wrapped_not_patched(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    opened = catalogs.open_catalog(cfg)
    assert isinstance(opened, catalogs.ResilientCatalog)
    inner = opened.inner
    assert type(inner) is FastCommitSqlCatalog
    untouched = FastCommitSqlCatalog(cfg.catalog_name, **catalogs.catalog_properties(cfg))
    assert set(vars(inner)) == set(vars(untouched))  # nothing assigned on the object
    assert catalogs.make_resilient(opened) is opened
    assert catalogs.unwrapped(opened) is inner

    table = opened.create_table("cdc.t", schema=pa.schema([("id", pa.int64())]))
    assert table.catalog is opened
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    loaded = opened.load_table("cdc.t")
    assert loaded.catalog is opened
    assert loaded.metadata_location == table.metadata_location
    assert loaded.scan().to_arrow().num_rows == 2
    assert set(vars(inner)) == set(vars(untouched))


def test_rest_requests_get_a_default_timeout() -> None:
    seen: list[object] = []

    class Recording(requests.adapters.BaseAdapter):
        def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            seen.append(kwargs.get("timeout"))
            raise requests.ConnectionError("recorded")

        def close(self) -> None:
            pass

    class Rest:
        _session = requests.Session()

    Rest._session.mount("http://", Recording())
    catalogs._set_rest_timeout(Rest())  # type: ignore[arg-type]
    catalogs._set_rest_timeout(Rest())  # type: ignore[arg-type]  # a second time: no double wrap
    for timeout in (None, 3.0):
        with contextlib.suppress(requests.ConnectionError):
            Rest._session.get("http://catalog.invalid/v1/config", timeout=timeout)
    assert seen == [catalogs.REST_TIMEOUT, 3.0]
