"""Object storage for the writers, configured from pyiceberg's FileIO properties.

One set of properties (``s3.endpoint``, ``s3.access-key-id``, ``s3.secret-access-key``,
``s3.path-style-access``, ``s3.region``, ... as pyiceberg names them) drives every place that
touches the table's files:

* the driver (pyiceberg's own FileIO: manifests, metadata, Parquet footers);
* the apply stage's writers in Spark's Python workers: the properties travel in the stage spec
  (never logged: ``repr=False``) and :func:`open_output` opens files through pyiceberg's
  ``load_file_io`` exactly as the driver would;
* Iceberg Java in Spark, through Hadoop S3A, per bucket (``spark/s3a.py``, from the same
  properties).

Requests to S3 are retried by the AWS SDK inside pyarrow; :class:`PatientS3RetryStrategy`
gives it enough attempts (about 13 s of backoff) to ride out a short outage or throttling.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from pyarrow import fs as pafs

if TYPE_CHECKING:
    from pyarrow import NativeFile
    from pyiceberg.io import FileIO

# Properties that configure a FileIO (pyiceberg.io): everything else (catalog credential,
# token, uri, warehouse) stays on the driver.
FILE_IO_PREFIXES = ("s3.", "client.", "gcs.", "adls.", "hdfs.", "oss.", "hf.", "py-io-impl")
S3_RETRY_STRATEGY_PROPERTY = "s3.retry-strategy-impl"  # pyiceberg.io.S3_RETRY_STRATEGY_IMPL
S3_MAX_ATTEMPTS = 10
S3_SCHEMES = ("s3", "s3a", "s3n")


class PatientS3RetryStrategy(pafs.AwsDefaultS3RetryStrategy):  # type: ignore[misc]
    """The AWS SDK's default strategy (exponential from 25 ms) with 10 attempts instead of 3:
    about 13 s of backoff for throttling, 5xx, timeouts and dropped connections. pyiceberg
    instantiates it by name from ``s3.retry-strategy-impl``."""

    def __init__(self) -> None:
        super().__init__(max_attempts=S3_MAX_ATTEMPTS)


PATIENT_S3_RETRY = f"{__name__}.{PatientS3RetryStrategy.__qualname__}"


def file_io_properties(properties: Mapping[str, Any]) -> dict[str, str]:
    """The FileIO part of catalog/table properties (string values only), with the patient
    S3 retry strategy unless one is configured."""
    props = {
        k: v for k, v in properties.items()
        if isinstance(v, str) and k.startswith(FILE_IO_PREFIXES)
    }
    props.setdefault(S3_RETRY_STRATEGY_PROPERTY, PATIENT_S3_RETRY)
    return props


def is_object_store(location: str) -> bool:
    return urlparse(location).scheme in S3_SCHEMES


def open_output(location: str, properties: Mapping[str, str]) -> NativeFile:
    """A new file at ``location`` (a URI as it will appear in the manifest), opened through
    pyiceberg's FileIO for these properties. Names are unique per attempt, so no existence
    check (one request fewer per file on S3)."""
    scheme = urlparse(location).scheme or "file"
    io = _file_io(tuple(sorted(properties.items())), scheme)
    stream: NativeFile = io.new_output(location).create(overwrite=True)
    return stream


def open_input(location: str, properties: Mapping[str, str]) -> NativeFile:
    """``location`` (a URI) opened for random access through pyiceberg's FileIO."""
    scheme = urlparse(location).scheme or "file"
    io = _file_io(tuple(sorted(properties.items())), scheme)
    stream: NativeFile = io.new_input(location).open(seekable=True)
    return stream


def delete_file(location: str, properties: Mapping[str, str]) -> None:
    """Remove ``location`` (a URI); a file that is already gone is fine."""
    scheme = urlparse(location).scheme or "file"
    with contextlib.suppress(FileNotFoundError):
        _file_io(tuple(sorted(properties.items())), scheme).delete(location)


@functools.lru_cache(maxsize=16)
def _file_io(properties: tuple[tuple[str, str], ...], scheme: str) -> FileIO:
    """One FileIO (and so one S3 client) per properties and scheme for the life of the
    process: Spark reuses its Python workers, and a new S3 client per file costs."""
    from pyiceberg.io import load_file_io

    return load_file_io(dict(properties), f"{scheme}://")
