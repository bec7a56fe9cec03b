"""Current rows of an Iceberg table by key, read through Iceberg Java (Spark), so that
position and equality deletes apply exactly as Iceberg defines them (pyiceberg refuses
equality deletes). The ``RowLookup`` of ``replicator.events.unavailable.fill_unavailable``.

Values come back as the engine's Python values (``replicator.events.types``): timestamptz as
aware UTC datetimes, timestamp as naive datetimes, binary as bytes, decimals as Decimal.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.table import Table

from replicator.events.unavailable import Key
from replicator.retry import missing_file
from replicator.storage.fileio import file_io_properties
from spark.s3a import configure_spark

log = logging.getLogger(__name__)

_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
# Reads of one lookup when files of the version read keep vanishing (another writer's
# compaction and expiry between the table's load and Spark's read of it).
VANISHED_ATTEMPTS = 3


class IcebergRowLookup:
    """``lookup(keys) -> {key: row or None}`` over one Iceberg table's current snapshot.

    ``spark`` is a SparkSession with the Iceberg runtime, or a function returning one (so
    that a run without Spark starts it only when a lookup is needed). ``table`` is a
    pyiceberg ``Table`` (refreshed on every call, so the lookup sees the latest commit) or a
    metadata.json location. ``key_columns`` default to the table's identifier fields, in
    schema order.
    """

    def __init__(
        self, spark: Any, table: Table | str, key_columns: Sequence[str] | None = None,
        *, branch: str | None = None,
    ) -> None:  # fmt: skip
        self.spark = spark
        self.table = table
        self.branch = branch  # None: main
        if key_columns is None:
            if not isinstance(table, Table):
                raise ValueError("key_columns are needed when the table is a metadata location")
            key_columns = [
                f.name for f in table.schema().fields if f.field_id in table.schema().identifier_field_ids
            ]
        if not key_columns:
            raise ValueError("the table has no key columns to look rows up by")
        self.key_columns = tuple(key_columns)

    def _location(self) -> str:
        if isinstance(self.table, Table):
            self.table = self.table.refresh()
            return str(self.table.metadata_location)
        return self.table

    def __call__(self, keys: Sequence[Key]) -> Mapping[Key, Mapping[str, Any] | None]:
        out: dict[Key, Mapping[str, Any] | None] = {tuple(k): None for k in keys}
        if not keys:
            return out
        spark = self.spark if hasattr(self.spark, "read") else self.spark()
        location = self._location()
        for attempt in range(1, VANISHED_ATTEMPTS + 1):
            try:
                return self._read(spark, location, out)
            except Exception as exc:
                # Another writer's expiry deleted a file of the version read, after a commit
                # of theirs (other tools may write to our tables at any time): the rows are
                # the same on the new version, read again. A file missing from the version
                # still current is damage: raised.
                if not isinstance(self.table, Table) or missing_file(exc) is None or attempt == VANISHED_ATTEMPTS:
                    raise
                now = self._location()
                if now == location:
                    raise
                log.info("%s: a file of %s was removed by another commit while it was read; reading %s",
                         ".".join(self.table.name()), location, now)  # fmt: skip
                location = now
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(
        self, spark: Any, location: str, out: dict[Key, Mapping[str, Any] | None]
    ) -> Mapping[Key, Mapping[str, Any] | None]:
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        if isinstance(self.table, Table):  # tables on object storage: Hadoop S3A for Spark
            configure_spark(spark, location, file_io_properties(self.table.io.properties))
        reader = spark.read.format("iceberg")
        if self.branch is not None:
            reader = reader.option("branch", self.branch)
        df = reader.load(location)
        schema = df.schema
        key_struct = T.StructType([schema[c] for c in self.key_columns])
        wanted = spark.createDataFrame([tuple(k) for k in out], schema=key_struct)
        # The keys as a small relation joined on every key column: one scan, deletes applied.
        rows = df.join(F.broadcast(wanted), list(self.key_columns), "left_semi")
        tz_cols = [f.name for f in schema.fields if isinstance(f.dataType, T.TimestampType)]
        # PySpark turns timestamps into naive *local* times: take exact epoch micros instead.
        projected = rows.select(
            *[
                (F.unix_micros(F.col(f"`{f.name}`")) if f.name in tz_cols else F.col(f"`{f.name}`")).alias(f.name)
                for f in schema.fields
            ]
        )
        for r in projected.collect():
            row = {f.name: _engine_value(r[f.name], f.name in tz_cols) for f in schema.fields}
            out[tuple(row[c] for c in self.key_columns)] = row
        return out


def _engine_value(v: Any, tz: bool) -> Any:
    if v is None:
        return None
    if tz:
        return _EPOCH_UTC + timedelta(microseconds=v)
    if isinstance(v, bytearray):
        return bytes(v)
    return v
