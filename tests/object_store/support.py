"""Configs for tests against the private object store + REST catalog (tests/conftest.py)."""

from __future__ import annotations

from typing import Any

from sample_dbs.object_store import PrivateSeaweed


def rest_iceberg(server: PrivateSeaweed, namespace: str, **overrides: Any) -> dict[str, Any]:
    """The ``iceberg:`` section for a REST catalog + S3 on the private server."""
    catalog = {**server.catalog_properties(), **overrides}
    return {"catalog": {k: v for k, v in catalog.items() if v is not None}, "namespace": namespace}


def bucket_objects(server: PrivateSeaweed, prefix: str) -> dict[str, bytes]:
    """Every object under ``s3://<bucket>/<prefix>`` (key -> content), read straight from S3."""
    from pyarrow import fs as pafs

    s3 = pafs.S3FileSystem(
        access_key=server.access_key, secret_key=server.secret_key, region="us-east-1",
        endpoint_override=server.s3_endpoint,
    )
    out = {}
    for info in s3.get_file_info(pafs.FileSelector(f"{server.bucket}/{prefix}", recursive=True)):
        if info.type == pafs.FileType.File:
            with s3.open_input_stream(info.path) as f:
                out[info.path] = f.read()
    return out
