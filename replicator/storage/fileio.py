"""Object storage for the writers and for Spark, configured from pyiceberg's FileIO properties.

One set of properties (``s3.endpoint``, ``s3.access-key-id``, ``s3.secret-access-key``,
``s3.path-style-access``, ``s3.region``, ... as pyiceberg names them) drives every place that
touches the table's files:

* the driver (pyiceberg's own FileIO: manifests, metadata, Parquet footers);
* the apply stage's writers in Spark's Python workers: the properties travel in the stage spec
  (never logged: ``repr=False``) and :func:`open_output` opens files through pyiceberg's
  ``load_file_io`` exactly as the driver would;
* Iceberg Java in Spark, through Hadoop S3A (:func:`configure_spark`), per bucket.

Requests to S3 are retried by the AWS SDK inside pyarrow; :class:`PatientS3RetryStrategy`
gives it enough attempts (about 13 s of backoff) to ride out a short outage or throttling.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from pyarrow import fs as pafs

if TYPE_CHECKING:
    from pyarrow import NativeFile
    from pyiceberg.io import FileIO
    from pyspark.sql import SparkSession

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


# -- Spark / Hadoop S3A ------------------------------------------------------------------------


def _first(props: Mapping[str, str], *keys: str) -> str | None:
    for k in keys:
        if props.get(k):
            return props[k]
    return None


def s3a_settings(properties: Mapping[str, str], bucket: str) -> dict[str, str]:
    """Hadoop configuration for one bucket (``fs.s3a.bucket.<bucket>.*``) equivalent to
    pyiceberg's ``s3.*`` / ``client.*`` properties; ``s3://`` is served by S3A too."""
    pre = f"fs.s3a.bucket.{bucket}."
    out = {
        "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.s3n.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    endpoint = properties.get("s3.endpoint")
    if endpoint:
        out[pre + "endpoint"] = endpoint
        out[pre + "connection.ssl.enabled"] = "false" if endpoint.startswith("http://") else "true"
    if path_style := properties.get("s3.path-style-access"):
        out[pre + "path.style.access"] = path_style
    if region := _first(properties, "s3.region", "client.region"):
        out[pre + "endpoint.region"] = region
    key = _first(properties, "s3.access-key-id", "client.access-key-id")
    secret = _first(properties, "s3.secret-access-key", "client.secret-access-key")
    token = _first(properties, "s3.session-token", "client.session-token")
    if key and secret:
        out[pre + "access.key"] = key
        out[pre + "secret.key"] = secret
        if token:
            out[pre + "session.token"] = token
            out[pre + "aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            )
    # Fail over quickly and retry like the Python side (S3A's own retry policy).
    out[pre + "attempts.maximum"] = str(S3_MAX_ATTEMPTS)
    return out


# (JVM, scheme, bucket) -> digest of the settings its cached FileSystem was made with
_configured: dict[tuple[int, str, str], str] = {}


def configure_spark(spark: SparkSession, location: str, properties: Mapping[str, str]) -> None:
    """Let Iceberg Java in this Spark session read ``location``'s bucket with these
    properties. A no-op for local tables. Values go into the Hadoop configuration only (never
    into logs).

    Iceberg's path-based loads use a *copy* of the Hadoop configuration taken when its
    catalog was first used, so settings made later never reach it. Hadoop caches one
    FileSystem per scheme and bucket, though, and hands the cached one to any later caller
    whatever its configuration: so the bucket's FileSystem is created here, from the
    settings just made (and re-created if they change)."""
    if not is_object_store(location):
        return
    if not _has_s3a(spark):
        from spark.s3a_jars import S3AJarsMissing

        raise S3AJarsMissing(
            f"Spark cannot read {urlparse(location).scheme}:// tables: the Hadoop S3A jars are not "
            "on its classpath; run `make install` (python -m spark.runtime_jars) and restart"
        )
    parsed = urlparse(location)
    settings = s3a_settings(properties, parsed.netloc)
    jsc: Any = spark.sparkContext._jsc
    jvm: Any = spark.sparkContext._jvm
    key = (id(jsc), parsed.scheme, parsed.netloc)
    digest = hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()
    if _configured.get(key) == digest:
        return
    jvm_conf = jsc.hadoopConfiguration()
    for name, value in settings.items():
        jvm_conf.set(name, value)
    uri = jvm.java.net.URI.create(f"{parsed.scheme}://{parsed.netloc}/")
    fs_class = jvm.org.apache.hadoop.fs.FileSystem
    if key in _configured:
        fs_class.get(uri, jvm_conf).close()  # made with older settings: drop it from the cache
    fs_class.get(uri, jvm_conf)
    _configured[key] = digest


def _has_s3a(spark: SparkSession) -> bool:
    jvm: Any = spark.sparkContext._jvm
    try:
        jvm.java.lang.Class.forName(
            "org.apache.hadoop.fs.s3a.S3AFileSystem", False,
            jvm.java.lang.Thread.currentThread().getContextClassLoader(),
        )
    except Exception:
        return False
    return True
