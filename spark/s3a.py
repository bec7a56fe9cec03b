"""Iceberg Java in Spark reading tables on object storage: Hadoop S3A configured per bucket
from the same pyiceberg FileIO properties the writers use (``replicator/storage/fileio.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from replicator.storage.fileio import S3_MAX_ATTEMPTS, is_object_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession



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
        from replicator.jars.s3a_jars import S3AJarsMissing

        raise S3AJarsMissing(
            f"Spark cannot read {urlparse(location).scheme}:// tables: the Hadoop S3A jars are not "
            "on its classpath; run `make install` (python -m replicator.jars.runtime_jars) and restart"
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
