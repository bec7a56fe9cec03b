"""What the engine is compared with, on the same change stream.

* ``SparkMergeSink``: Spark ``MERGE INTO`` an Iceberg table (merge-on-read) per micro-batch,
  the way Spark users apply CDC today: the batch reduced to the latest change per key with
  an op column, staged as Parquet, then ``MERGE ... WHEN MATCHED AND op='d' THEN DELETE
  WHEN MATCHED THEN UPDATE ... WHEN NOT MATCHED AND op!='d' THEN INSERT``. Hadoop catalog in
  a temp warehouse, registered with ``configure_iceberg_catalog``.
* ``PyIcebergSink``: pyiceberg ``Table.upsert()`` per micro-batch (copy-on-write), deletes
  through ``Table.delete``. Its table is its own: pyiceberg cannot read equality deletes.
* ``run_sink_loop``: the same source reader (``PostgresSource`` / ``MySQLSource`` on its own
  slot / binlog position) and the same ``Batcher`` as the engine feed a sink.
* Raw source reads: pgoutput messages fetched with no decoding (SQL peek, and the replication
  stream drained), binlog row events parsed by mysql-replication.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.workloads import TableDef
from replicator.checkpoint import Checkpoints
from replicator.config import BatchConfig
from replicator.events.block import row_events
from replicator.events.model import ChangeBatch, ChangeEvent, Op, SourcePosition
from replicator.pipeline.batcher import Batcher
from replicator.sources.base import ChangeSource

OP_COLUMN = "__op"

_ARROW: dict[str, pa.DataType] = {
    "bigint": pa.int64(),
    "int": pa.int32(),
    "text": pa.string(),
    "num": pa.decimal128(12, 2),
    "float": pa.float64(),
    "ts": pa.timestamp("us", tz="UTC"),
    "bool": pa.bool_(),
    "date": pa.date32(),
}
_SPARK: dict[str, str] = {
    "bigint": "BIGINT",
    "int": "INT",
    "text": "STRING",
    "num": "DECIMAL(12,2)",
    "float": "DOUBLE",
    "ts": "TIMESTAMP",
    "bool": "BOOLEAN",
    "date": "DATE",
}


def arrow_schema(table: TableDef, *, with_op: bool = False) -> pa.Schema:
    fields = [pa.field(n, _ARROW[k], nullable=n != "id") for n, k in table.columns]
    if with_op:
        fields.append(pa.field(OP_COLUMN, pa.string(), nullable=False))
    return pa.schema(fields)


def latest_per_key(events: Sequence[ChangeEvent]) -> dict[Any, Mapping[str, Any] | None]:
    """Key -> the row after the batch (None: deleted). A key change deletes the old key."""
    out: dict[Any, Mapping[str, Any] | None] = {}
    for ev in row_events(events):  # block events (source.change_blocks) as their rows
        if ev.op is Op.DELETE:
            assert ev.before is not None
            out[ev.before["id"]] = None
            continue
        assert ev.after is not None
        if ev.op is Op.UPDATE and ev.before is not None and ev.before.get("id") != ev.after["id"]:
            out[ev.before["id"]] = None
        out[ev.after["id"]] = ev.after
    return out


def rows_to_arrow(table: TableDef, rows: Mapping[Any, Mapping[str, Any] | None], *,
                  with_op: bool) -> pa.Table:  # fmt: skip
    """Column-wise Arrow for the latest rows; deleted keys carry only the key and op 'd'."""
    schema = arrow_schema(table, with_op=with_op)
    items = list(rows.items())
    arrays = []
    for name, _ in table.columns:
        if name == "id":
            values = [k for k, _ in items]
        else:
            values = [r.get(name) if r is not None else None for _, r in items]
        arrays.append(pa.array(values, type=schema.field(name).type))
    if with_op:
        arrays.append(pa.array(["d" if r is None else "u" for _, r in items], type=pa.string()))
    return pa.Table.from_arrays(arrays, schema=schema)


# -- sinks ------------------------------------------------------------------------------------


class SparkMergeSink:
    """MERGE INTO an Iceberg table per micro-batch (merge-on-read)."""

    name = "Spark MERGE INTO (merge-on-read)"

    def __init__(self, spark: Any, root: Path, tables: Sequence[TableDef]) -> None:
        from spark.session import configure_iceberg_catalog

        self.spark = spark
        self.root = root
        self.tables = {t.name: t for t in tables}
        self.catalog = f"bench_merge_{uuid.uuid4().hex[:8]}"
        (root / "stage").mkdir(parents=True, exist_ok=True)
        configure_iceberg_catalog(
            spark, self.catalog, {"type": "hadoop", "warehouse": (root / "warehouse").as_uri()}
        )
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {self.catalog}.db")
        for t in tables:
            cols = ", ".join(f"{n} {_SPARK[k]}" for n, k in t.columns)
            spark.sql(
                f"CREATE TABLE {self.ident(t.name)} ({cols}) USING iceberg TBLPROPERTIES ("
                "'format-version'='2', 'write.delete.mode'='merge-on-read', "
                "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read', "
                "'write.parquet.compression-codec'='zstd')"
            )
        self._n = 0

    def ident(self, table: str) -> str:
        return f"{self.catalog}.db.{table}"

    def bootstrap(self, table: str, rows: pa.Table) -> None:
        path = self.root / "stage" / f"boot-{table}.parquet"
        pq.write_table(rows, path)
        self.spark.read.parquet(str(path)).writeTo(self.ident(table)).append()
        path.unlink()

    def apply(self, table: str, events: Sequence[ChangeEvent]) -> None:
        t = self.tables[table.rsplit(".", 1)[-1]]
        batch = rows_to_arrow(t, latest_per_key(events), with_op=True)
        self._n += 1
        path = self.root / "stage" / f"batch-{self._n:06d}.parquet"
        pq.write_table(batch, path, compression="lz4")
        view = f"bench_batch_{self._n}"
        self.spark.read.parquet(str(path)).createOrReplaceTempView(view)
        cols = [n for n, _ in t.columns]
        sets = ", ".join(f"t.{c} = s.{c}" for c in cols if c != "id")
        self.spark.sql(
            f"MERGE INTO {self.ident(t.name)} t USING {view} s ON t.id = s.id "
            f"WHEN MATCHED AND s.{OP_COLUMN} = 'd' THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {sets} "
            f"WHEN NOT MATCHED AND s.{OP_COLUMN} != 'd' THEN INSERT ({', '.join(cols)}) "
            f"VALUES ({', '.join('s.' + c for c in cols)})"
        )
        self.spark.catalog.dropTempView(view)
        path.unlink()

    def count(self, table: str) -> int:
        return int(self.spark.table(self.ident(table)).count())


class PyIcebergSink:
    """pyiceberg ``upsert`` + ``delete`` per micro-batch (copy-on-write)."""

    name = "pyiceberg upsert (copy-on-write)"

    def __init__(self, root: Path, tables: Sequence[TableDef]) -> None:
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.schema import Schema
        from pyiceberg.types import NestedField

        root.mkdir(parents=True, exist_ok=True)
        self.catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{root}/catalog.db", warehouse=(root / "warehouse").as_uri()
        )
        self.catalog.create_namespace("db")
        self.tables = {t.name: t for t in tables}
        self.handles: dict[str, Any] = {}
        for t in tables:
            fields = [
                NestedField(i + 1, n, _iceberg_type(k), required=n == "id")
                for i, (n, k) in enumerate(t.columns)
            ]
            schema = Schema(*fields, identifier_field_ids=[1])
            self.handles[t.name] = self.catalog.create_table(
                f"db.{t.name}", schema, properties={"format-version": "2"}
            )

    def bootstrap(self, table: str, rows: pa.Table) -> None:
        tbl = self.handles[table]
        tbl.append(rows.cast(tbl.schema().as_arrow()))

    def apply(self, table: str, events: Sequence[ChangeEvent]) -> None:
        from pyiceberg.expressions import In

        name = table.rsplit(".", 1)[-1]
        t = self.tables[name]
        tbl = self.handles[name]
        latest = latest_per_key(events)
        deleted = [k for k, v in latest.items() if v is None]
        live = {k: v for k, v in latest.items() if v is not None}
        if deleted:
            tbl.delete(delete_filter=In("id", deleted))  # type: ignore[call-arg, arg-type]
        if live:
            rows = rows_to_arrow(t, live, with_op=False).cast(tbl.schema().as_arrow())
            tbl.upsert(rows, join_cols=["id"])

    def count(self, table: str) -> int:
        return int(self.handles[table].scan().to_arrow().num_rows)


def _iceberg_type(kind: str) -> Any:
    from pyiceberg import types as it

    return {
        "bigint": it.LongType(),
        "int": it.IntegerType(),
        "text": it.StringType(),
        "num": it.DecimalType(12, 2),
        "float": it.DoubleType(),
        "ts": it.TimestamptzType(),
        "bool": it.BooleanType(),
        "date": it.DateType(),
    }[kind]


# -- the loop feeding a sink ------------------------------------------------------------------


@dataclass
class SinkRun:
    name: str
    events: int = 0
    expected: int = 0
    batches: int = 0
    table_batches: int = 0
    seconds: float = 0.0  # first poll to the last batch's commit
    read_seconds: float = 0.0
    sink_seconds: float = 0.0
    capped: bool = False
    error: str | None = None

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


def run_sink_loop(
    name: str,
    source: ChangeSource,
    committed: Mapping[str, SourcePosition],
    batch: BatchConfig,
    apply: Callable[[str, Sequence[ChangeEvent]], None],
    *,
    expected: int,
    time_cap: float,
) -> SinkRun:
    """Read like the engine's run loop (batches close at transaction boundaries, and after
    every poll that ends at one) and hand each table's part of a batch to ``apply``."""
    run = SinkRun(name=name, expected=expected)
    batcher = Batcher(batch)
    source.start(Checkpoints.at(dict(committed)))
    t0 = time.monotonic()
    last = t0

    def do(b: ChangeBatch) -> None:
        nonlocal last
        s = time.perf_counter()
        for table in b.tables:
            apply(table, b.events[table])
            run.table_batches += 1
        source.acknowledge(b.end_position)
        run.sink_seconds += time.perf_counter() - s
        run.events += b.event_count
        run.batches += 1
        last = time.monotonic()

    try:
        empty = 0
        while run.events < expected:
            got = 0
            t = time.perf_counter()
            for ev in source.poll():
                run.read_seconds += time.perf_counter() - t
                got += 1
                b = batcher.add(ev)
                if b is not None:
                    do(b)
                t = time.perf_counter()
            b = batcher.flush()
            if b is not None:
                do(b)
            empty = empty + 1 if got == 0 and batcher.pending == 0 else 0
            if empty >= 3:
                break
            if time.monotonic() - t0 > time_cap:
                run.capped = True
                break
    except Exception as exc:  # a baseline failing is a result, not a crash of the benchmark
        run.error = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        with contextlib.suppress(Exception):
            source.close()
    run.seconds = last - t0
    return run


# -- raw source reads -------------------------------------------------------------------------


@dataclass
class RawRead:
    name: str
    messages: int
    row_messages: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.row_messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def message_rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


_ROW_KINDS = (ord("I"), ord("U"), ord("D"))


def pg_raw_peek(dsn: str, slot: str, publication: str) -> RawRead:
    """``pg_logical_slot_peek_binary_changes``: every pgoutput message fetched (binary, a
    server-side cursor), only its first byte looked at."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        t0 = time.perf_counter()
        n = rows = 0
        with conn.cursor(name="bench_peek", binary=True) as cur:
            cur.itersize = 20_000
            cur.execute(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                "'proto_version', '1', 'publication_names', %s)",
                (slot, publication),
            )
            for (data,) in cur:
                n += 1
                if data[0] in _ROW_KINDS:
                    rows += 1
        return RawRead("pgoutput via SQL peek (no decoding)", n, rows, time.perf_counter() - t0)


def pg_raw_copy(dsn: str, table: str, key: str, rows: int) -> RawRead:
    """The snapshot's baseline: the whole table by one ``COPY (SELECT * ... ORDER BY key) TO
    STDOUT (FORMAT csv)`` on one connection, bytes written to /dev/null (no parsing)."""
    import psycopg

    sql = f'COPY (SELECT * FROM "{table}" ORDER BY "{key}") TO STDOUT (FORMAT csv)'
    t0 = time.perf_counter()
    with (
        psycopg.connect(dsn) as conn, conn.cursor() as cur, cur.copy(sql) as copy,
        open(os.devnull, "wb") as sink,
    ):  # fmt: skip
        for data in copy:
            sink.write(data)
    return RawRead("raw COPY TO STDOUT into /dev/null (one connection)", rows, rows,
                   time.perf_counter() - t0)  # fmt: skip


def pg_raw_stream(dsn: str, slot: str, publication: str, *, idle: float = 1.0) -> RawRead:
    """The replication stream (the engine's transport) drained: messages counted, not decoded."""
    import psycopg

    from replicator.sources.postgres.pgoutput import str_to_lsn
    from replicator.sources.postgres.replication import ReplicationConnection

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    assert row is not None
    repl = ReplicationConnection(dsn)
    try:
        repl.start(slot, publication, 0, str_to_lsn(row[0]))
        n = rows = 0
        first = last = 0.0
        while True:
            data = repl.read(idle if n else 30.0)
            if data is None:
                break
            if not data:
                continue
            if not n:
                first = time.perf_counter()
            n += 1
            last = time.perf_counter()
            if data[0] in _ROW_KINDS:
                rows += 1
    finally:
        repl.close()
    return RawRead("pgoutput via replication stream (no decoding)", n, rows, last - first)


def mysql_binlog_position(root: Any) -> tuple[str, int]:
    rows = root.execute("SHOW MASTER STATUS")
    return str(rows[0][0]), int(rows[0][1])


def mysql_raw(dsn: str, server_id: int, position: tuple[str, int], schema: str) -> RawRead:
    """Binlog row events parsed by mysql-replication (rows decoded to Python values), from
    ``position``; only this workload's schema."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    from replicator.sources.mysql import compat, setup

    params = setup.parse_dsn(dsn)
    reader = BinLogStreamReader(
        connection_settings=params.replication_settings(), server_id=server_id,
        resume_stream=True, blocking=False, log_file=position[0], log_pos=position[1],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent], only_schemas=[schema],
        enable_logging=False, pymysql_wrapper=compat.connect,
    )  # fmt: skip
    t0 = time.perf_counter()
    events = rows = 0
    try:
        for ev in reader:
            events += 1
            rows += len(ev.rows)
    finally:
        reader.close()
    return RawRead(
        "binlog rows parsed by mysql-replication", events, rows, time.perf_counter() - t0
    )


def pg_create_slot(dsn: str, slot: str) -> int:
    import psycopg

    from replicator.sources.postgres.pgoutput import str_to_lsn

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,)
        ).fetchone()
    assert row is not None
    return str_to_lsn(row[0])


def pg_source_rows(dsn: str, table: TableDef) -> pa.Table:
    """The table as it is now, in the baselines' Arrow schema."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        names = ", ".join(table.names)
        rows = conn.execute(f"SELECT {names} FROM {table.name} ORDER BY id").fetchall()
    schema = arrow_schema(table)
    cols: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in table.columns]
    return pa.Table.from_arrays(
        [pa.array(list(c), type=f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
    )


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
