"""One shared Spark session with Iceberg Java, for the whole process.

Start-up costs ~5 s, so every caller shares the singleton from :func:`get_spark`. It runs
locally (``local[2]``) unless :func:`use_cluster` named a master first (``spark://``, ``yarn``,
``k8s://``): then the jars go to executors through ``spark.jars`` and our Python packages
(ops_mapping, spark, replicator) as one zip through ``addPyFile``, so workers need only
pyspark and the pinned Python packages.
Tables can be read straight from a metadata file, without any catalog:
``spark.read.format("iceberg").load(".../metadata/00003-....metadata.json")``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replicator.jars.runtime_jars import runtime_jars
from spark.warm import WorkerKeeper, touch_workers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
ICEBERG_SPARK_CATALOG = "org.apache.iceberg.spark.SparkCatalog"

# Our own log4j2 config: Spark's default prints a banner and INFO noise on stderr.
_LOG4J2 = """\
status = error
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
# Harmless start-up warnings on a laptop/CI box.
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.fsmetrics.name = org.apache.hadoop.metrics2
logger.fsmetrics.level = error
logger.strutils.name = org.apache.spark.sql.catalyst.util.SparkStringUtils
logger.strutils.level = error
"""

_lock = threading.Lock()
_session: SparkSession | None = None
_gateway: Any = None  # the Py4J gateway of our JVM (launched once per process)
_tmp_dir: Path | None = None
_keeper: WorkerKeeper | None = None  # keeps the session's Python workers alive (spark.warm)
DEFAULT_MASTER = "local[2]"
_master = DEFAULT_MASTER
_extra_conf: dict[str, str] = {}
# The packages a task imports (the stage worker, the mapper, the file writer and what they use).
SHIPPED_PACKAGES = ("ops_mapping", "spark", "replicator")


def use_cluster(master: str, conf: dict[str, str] | None = None) -> None:
    """Run the session on ``master`` with extra Spark settings (before the first
    :func:`get_spark`; a running session with other settings is an error)."""
    global _master, _extra_conf
    with _lock:
        wanted = (master, dict(conf or {}))
        if _session is not None and (_master, _extra_conf) != wanted:
            raise RuntimeError(
                f"the Spark session already runs on {_master!r}; settings must be given before it starts"
            )
        _master, _extra_conf = wanted


def is_local(master: str) -> bool:
    return master.startswith("local")


def _package_zip(tmp_dir: Path) -> Path:
    """Our packages as one zip for executors (sources only, no caches)."""
    import zipfile

    root = Path(__file__).resolve().parent.parent
    out = tmp_dir / "replicator-py.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for pkg in SHIPPED_PACKAGES:
            for path in sorted((root / pkg).rglob("*.py")):
                zf.write(path, path.relative_to(root).as_posix())
    return out


def _make_tmp_dir() -> Path:
    base = os.environ.get("REPLICATOR_SPARK_TMP")  # e.g. a bigger disk than /tmp
    if base:
        Path(base).mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="replicator-spark-", dir=base or None))
    (path / "local").mkdir()
    (path / "warehouse").mkdir()
    (path / "log4j2.properties").write_text(_LOG4J2)
    return path


def spark_conf(app_name: str, tmp_dir: Path) -> dict[str, str]:
    """The configuration :func:`get_spark` uses (exposed for inspection and tests)."""
    # java.io.tmpdir rather than spark.local.dir: the latter logs a warning in local mode.
    java_opts = (
        f"-Dlog4j2.configurationFile=file:{tmp_dir / 'log4j2.properties'}"
        f" -Djava.io.tmpdir={tmp_dir / 'local'}"
    )
    # Extra JVM flags, e.g. "-XX:TieredStopAtLevel=1" (C1 only) halves the cold start of
    # short runs such as tests, at the cost of peak throughput in long ones.
    extra = os.environ.get("REPLICATOR_SPARK_JAVA_OPTS", "").strip()
    if extra:
        java_opts += " " + extra
    conf = {
        "spark.app.name": app_name,
        "spark.master": _master,
        "spark.jars": ",".join(runtime_jars()),
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        # s3:// (as pyiceberg writes table locations) is served by Hadoop S3A, when its jars
        # are there (replicator/jars/s3a_jars.py); buckets are configured by spark.s3a.
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.sql.session.timeZone": "UTC",
        # Staged batches are written by pyarrow in the proleptic Gregorian calendar: read
        # dates before 1582 / timestamps before 1900 as they are (the default refuses them).
        "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
        "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
        "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": os.environ.get("REPLICATOR_SPARK_DRIVER_MEMORY", "2g"),
        "spark.driver.extraJavaOptions": java_opts,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        # No Hive/Derby: keeps metastore_db/ and spark-warehouse/ out of the cwd.
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": str(tmp_dir / "warehouse"),
        # Python workers (UDFs, parallelize) must use this interpreter, not a system one.
        "spark.pyspark.python": sys.executable,
    }
    if not is_local(_master):
        # Executors are separate JVMs: give them the same log config, and let tasks be
        # retried on another executor when one is lost (local mode never retries).
        conf["spark.executor.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{tmp_dir / 'log4j2.properties'}"
        conf["spark.task.maxFailures"] = "4"
    conf.update(_extra_conf)  # the user's settings win
    return conf


def get_spark(app_name: str = "replicator") -> SparkSession:
    """Process-wide Spark session with the Iceberg runtime (created on first call)."""
    global _session, _tmp_dir, _keeper
    with _lock:
        if _session is not None and _is_alive(_session):
            return _session
        if _tmp_dir is None:
            _tmp_dir = _make_tmp_dir()
            atexit.register(_shutdown)
        # Local mode reads the worker interpreter from PYSPARK_PYTHON (the conf key below is
        # only honoured by spark-submit); without it workers run a system python3 that lacks
        # pyarrow and the project.
        conf = spark_conf(app_name, _tmp_dir)
        os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
        session = _start_session(conf)
        session.sparkContext.setLogLevel("WARN")
        if not is_local(_master):
            session.sparkContext.addPyFile(str(_package_zip(_tmp_dir)))
        _session = session
        _keeper = WorkerKeeper(lambda: touch_workers(session))
        _keeper.start()
        return session


def _start_session(conf: dict[str, str]) -> SparkSession:
    """The session, on a JVM in a session of its own: a Ctrl-C or a ``kill`` of the engine's
    process group (a terminal, a scheduler) would otherwise stop Spark under the batch in
    progress, failing it with Py4J and accumulator-server tracebacks, while the engine itself
    wants to finish that batch and stop cleanly. The JVM still ends with the engine: it exits
    when its stdin (a pipe from this process) closes. (A signal sent to every process of a
    cgroup still reaches it: README "Stopping".)"""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    global _gateway
    spark_conf_ = SparkConf().setAll(list(conf.items()))
    if _gateway is None:
        # Not SIG_IGN around the launch (the JVM would keep it): a stop signal arriving in
        # those seconds would be lost, and the engine would never stop.
        _gateway = launch_gateway(spark_conf_, popen_kwargs={"start_new_session": True})  # type: ignore[no-untyped-call]
    SparkContext(conf=spark_conf_, gateway=_gateway)
    return SparkSession.builder.config(conf=spark_conf_).getOrCreate()


def configure_iceberg_catalog(spark: SparkSession, name: str, properties: dict[str, str]) -> None:
    """Register an Iceberg catalog at run time, e.g. ``{"type": "hadoop", "warehouse": uri}``.

    Spark resolves catalogs lazily, so this works on a running session as long as the name
    has not been used yet.
    """
    spark.conf.set(f"spark.sql.catalog.{name}", ICEBERG_SPARK_CATALOG)
    for key, value in properties.items():
        spark.conf.set(f"spark.sql.catalog.{name}.{key}", value)


def stop_spark() -> None:
    """Stop the shared session (the next :func:`get_spark` starts a new one)."""
    global _session, _keeper
    with _lock:
        if _keeper is not None:
            _keeper.stop()
            _keeper = None
        if _session is not None:
            _session.stop()
            _session = None


def _is_alive(session: SparkSession) -> bool:
    sc = session.sparkContext
    return sc._jsc is not None and not sc._jsc.sc().isStopped()


def _shutdown() -> None:
    try:
        stop_spark()
    except Exception:  # at interpreter exit the gateway may already be gone
        pass
    finally:
        if _tmp_dir is not None:
            shutil.rmtree(_tmp_dir, ignore_errors=True)
