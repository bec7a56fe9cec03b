"""FileIO properties for the stage's writers and the Hadoop S3A settings for Spark."""

from __future__ import annotations

from pyarrow import fs as pafs

from replicator.jars.runtime_jars import cache_dir, runtime_jars
from replicator.jars.s3a_jars import S3A_JARS
from replicator.storage.fileio import (
    PATIENT_S3_RETRY,
    PatientS3RetryStrategy,
    file_io_properties,
    is_object_store,
)
from spark.s3a import s3a_settings


def test_only_file_io_properties_reach_the_workers() -> None:
    props = file_io_properties({
        "uri": "http://cat", "credential": "id:secret", "token": "t", "warehouse": "s3://b/",
        "s3.endpoint": "http://s3", "s3.secret-access-key": "k", "client.region": "eu-west-1",
        "auth.manager": object(),
    })
    assert props == {"s3.endpoint": "http://s3", "s3.secret-access-key": "k",
                     "client.region": "eu-west-1", "s3.retry-strategy-impl": PATIENT_S3_RETRY}
    assert file_io_properties({"s3.retry-strategy-impl": "my.Strategy"})["s3.retry-strategy-impl"] == "my.Strategy"


def test_patient_retry_strategy_is_loadable_by_name() -> None:
    from pyiceberg.io.pyarrow import _import_retry_strategy

    strategy = _import_retry_strategy(PATIENT_S3_RETRY)
    assert isinstance(strategy, PatientS3RetryStrategy)
    assert isinstance(strategy, pafs.AwsDefaultS3RetryStrategy) and strategy.max_attempts == 10


def test_s3a_settings_per_bucket() -> None:
    conf = s3a_settings({
        "s3.endpoint": "http://127.0.0.1:8333", "s3.access-key-id": "AK", "s3.secret-access-key": "SK",
        "s3.path-style-access": "true", "s3.region": "us-east-1",
    }, "lake")
    assert conf["fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["fs.s3a.bucket.lake.endpoint"] == "http://127.0.0.1:8333"
    assert conf["fs.s3a.bucket.lake.connection.ssl.enabled"] == "false"
    assert conf["fs.s3a.bucket.lake.path.style.access"] == "true"
    assert conf["fs.s3a.bucket.lake.access.key"] == "AK" and conf["fs.s3a.bucket.lake.secret.key"] == "SK"
    assert conf["fs.s3a.bucket.lake.endpoint.region"] == "us-east-1"
    assert is_object_store("s3://lake/x") and not is_object_store("file:///tmp/x")


def test_s3a_jars_are_built_by_make_install() -> None:
    jars = runtime_jars()
    for name in S3A_JARS:
        assert str(cache_dir() / name) in jars, f"{name} missing: run make install"
