from pathlib import Path

import pytest

from replicator.config import (
    CLUSTER_DRIVER_MAX_ROWS,
    REMOTE_PARALLEL_TABLES,
    load_config,
    redact_dsn,
)
from replicator.errors import ConfigError


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_valid_config_resolves_relative_paths(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    assert cfg.source.path == (tmp_path / "in").resolve()
    assert cfg.iceberg.catalog_uri == f"sqlite:///{tmp_path.resolve()}/cat.db"
    assert cfg.iceberg.warehouse == (tmp_path / "wh").resolve().as_uri()


def test_unknown_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, """
source: {type: debezium-json, path: in, tabels: [x]}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    assert "source.tabels" in str(exc.value)


def test_missing_dsn_for_postgres(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, """
source: {type: postgres}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    assert "source.dsn is required" in str(exc.value)


def test_bad_batch_limit(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
batch: {max_events: 0}
"""))
    assert "batch.max_events" in str(exc.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_redact_dsn_hides_passwords() -> None:
    assert redact_dsn("postgresql://bob:s3cret@db:5432/x") == "postgresql://bob:***@db:5432/x"
    assert "s3cret" not in redact_dsn("host=db user=bob password=s3cret dbname=x")


# -- iceberg.catalog: any pyiceberg catalog, ${ENV} values, secrets ---------------------------

REST = """
source: {type: debezium-json, path: in}
iceberg:
  catalog:
    type: rest
    uri: https://catalog.example/api
    credential: "${RP_CLIENT_ID}:${RP_CLIENT_SECRET}"
    warehouse: lake
    s3.endpoint: http://127.0.0.1:9000
    s3.path-style-access: true
    s3.connect-timeout: 5
    s3.secret-access-key: ${RP_S3_SECRET}
  namespace: cdc
"""


def test_rest_catalog_properties_with_environment_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RP_CLIENT_ID", "engine")
    monkeypatch.setenv("RP_CLIENT_SECRET", "client-secret-value")
    monkeypatch.setenv("RP_S3_SECRET", "s3-secret-value")
    cfg = load_config(_write(tmp_path, REST))
    props = cfg.iceberg.catalog_properties
    assert props["credential"] == "engine:client-secret-value"
    assert props["s3.secret-access-key"] == "s3-secret-value"
    assert props["s3.path-style-access"] == "true" and props["s3.connect-timeout"] == "5"
    assert props["warehouse"] == "lake"  # a REST warehouse is a name, not a path: untouched
    shown = cfg.iceberg.describe_catalog() + repr(cfg) + str(cfg)
    assert "secret-value" not in shown
    assert cfg.iceberg.describe_catalog() == "rest catalog https://catalog.example/api warehouse lake"


def test_missing_environment_variable_names_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RP_CLIENT_ID", "engine")
    monkeypatch.setenv("RP_CLIENT_SECRET", "x" * 8)
    monkeypatch.delenv("RP_S3_SECRET", raising=False)
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, REST))
    assert "iceberg.catalog.s3.secret-access-key" in str(exc.value)
    assert "RP_S3_SECRET is not set" in str(exc.value)


def test_escaped_dollar_brace_is_literal(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, """
source: {type: postgres, dsn: "host=db password=$${NOT_A_VAR}"}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    assert cfg.source.dsn == "host=db password=${NOT_A_VAR}"


@pytest.mark.parametrize("iceberg, message", [
    ('{catalog_uri: "sqlite:///c.db", warehouse: wh, catalog: {type: rest, uri: "http://x"}}',
     "exactly one of iceberg.catalog_uri"),
    ("{namespace: cdc}", "exactly one of iceberg.catalog_uri"),
    ('{catalog_uri: "sqlite:///c.db"}', "iceberg.warehouse is required"),
    ("{catalog: {warehouse: s3://b/}}", "needs a type"),
    ('{catalog_uri: "http://rest"}', "use iceberg.catalog"),
    ("{catalog: {type: rest, uri: x, warehouse: a}, warehouse: b}", "differ"),
])
def test_catalog_choice_is_validated(tmp_path: Path, iceberg: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, f"source: {{type: debezium-json, path: in}}\niceberg: {iceberg}\n"))
    assert message in str(exc.value)


def test_sql_catalog_long_form_resolves_paths(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog: {type: sql, uri: "sqlite:///cat.db", warehouse: wh}}
"""))
    props = cfg.iceberg.catalog_properties
    assert props == {"type": "sql", "uri": f"sqlite:///{tmp_path.resolve()}/cat.db",
                     "warehouse": (tmp_path / "wh").resolve().as_uri()}


def test_short_form_is_a_sql_catalog(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "postgresql+psycopg://bob:pw-in-uri@db/cat", warehouse: "s3://bucket/wh"}
"""))
    assert cfg.iceberg.catalog_properties["type"] == "sql"
    assert cfg.iceberg.warehouse == "s3://bucket/wh"
    assert "pw-in-uri" not in cfg.iceberg.describe_catalog()


def test_nested_catalog_properties_keep_their_shape(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg:
  catalog:
    type: rest
    uri: https://cat
    auth: {type: oauth2, oauth2: {client_id: me, client_secret: nested-secret-1, scope: all}}
"""))
    assert cfg.iceberg.catalog_properties["auth"]["oauth2"]["client_secret"] == "nested-secret-1"
    from replicator import secrets

    assert "nested-secret-1" in secrets.secrets_in(cfg.iceberg.catalog_properties)
    assert secrets.scrub("x nested-secret-1 y") == "x *** y"  # registered when loaded


def test_default_state_dir_is_next_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10 item 13: as the README says, not relative to the working directory (a run
    started from another folder would lose its snapshot progress and lock)."""
    conf = tmp_path / "conf"
    conf.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(_write(conf, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    assert cfg.state_dir == (conf / ".replicator").resolve()
    assert cfg.dead_letter_path == (conf / ".replicator" / "dead_letters.jsonl").resolve()


def test_maintenance_defaults_on(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    m = cfg.maintenance
    assert m.enabled and m.snapshots_keep >= 1 and m.orphan_min_age_seconds >= 3600
    assert m.snapshots_max_count >= m.snapshots_keep  # the cap bounds metadata.json for busy tables
    assert m.convert_min_equality_delete_files > 0 and m.compact_min_input_files >= 2


def test_maintenance_section(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
maintenance: {enabled: false, snapshots_keep: 3, compact_target_file_bytes: 1000000}
"""))
    assert not cfg.maintenance.enabled
    assert cfg.maintenance.snapshots_keep == 3
    assert cfg.maintenance.compact_target_file_bytes == 1_000_000


@pytest.mark.parametrize(("body", "message"), [
    ("{snapshot_keep: 3}", "maintenance.snapshot_keep"),
    ("{orphan_min_age_seconds: 60}", "maintenance.orphan_min_age_seconds"),
    ("{compact_min_input_files: 1}", "maintenance.compact_min_input_files"),
    ("{convert_min_equality_delete_files: 0, convert_max_age_seconds: 0}", "never be converted"),
])
def test_maintenance_errors_are_named(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, f"""
source: {{type: debezium-json, path: in}}
iceberg: {{catalog_uri: "sqlite:///cat.db", warehouse: wh}}
maintenance: {body}
"""))
    assert message in str(exc.value)


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("bucket(id)", "bucket needs a positive width"),
        ("bucket(0, id)", "bucket needs a positive width"),
        ("weekday(created)", "unknown transform 'weekday'"),
        ("day(3, created)", "unknown transform 'day' with a width"),
        ("day(created", "is not column, transform(column) or transform(N, column)"),
    ],
)
def test_bad_partition_field_is_named(tmp_path: Path, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, f"""
source: {{type: postgres, dsn: "postgresql://x"}}
iceberg: {{catalog_uri: "sqlite:///c.db", warehouse: wh, partition_by: {{public.orders: ["{field}"]}}}}
"""))
    assert "partition_by of public.orders" in str(exc.value) and message in str(exc.value), str(exc.value)


def test_partition_fields_parse() -> None:
    from replicator.config import parse_partition_field

    assert parse_partition_field("days(created)") == ("day", "created")
    assert parse_partition_field(" bucket( 16 , id ) ") == ("bucket[16]", "id")
    assert parse_partition_field("truncate(4, name)") == ("truncate[4]", "name")
    assert parse_partition_field("region") == ("identity", "region")
    assert parse_partition_field("identity(region)") == ("identity", "region")


def test_bad_sort_field_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, """
source: {type: postgres, dsn: "postgresql://x"}
iceberg: {catalog_uri: "sqlite:///c.db", warehouse: wh, sort_by: {public.orders: ["created sideways"]}}
"""))
    assert "sort_by of public.orders: 'created sideways'" in str(exc.value), str(exc.value)


def test_source_primary_for_a_standby(tmp_path: Path) -> None:
    from replicator import secrets

    try:
        cfg = load_config(_write(tmp_path, """
source: {type: postgres, dsn: "host=standby dbname=app", primary: {dsn: "host=primary dbname=app password=s3cret-pw"}}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
        assert cfg.source.primary is not None and "host=primary" in cfg.source.primary.dsn
        assert "s3cret-pw" not in repr(cfg.source)  # never printed with the config
        assert secrets.scrub("connect: password s3cret-pw") == "connect: password ***"
    finally:
        secrets.forget_all()


@pytest.mark.parametrize(("source", "message"), [
    ('{type: postgres, dsn: "host=s", primary: {dsn: "host=p password=s3cret-pw bogus"}}',
     "source.primary.dsn is not a PostgreSQL connection string"),
    ('{type: postgres, dsn: "host=s", primary: {dsn: ""}}', "source.primary.dsn"),
    ('{type: postgres, dsn: "host=s", primary: {host: p}}', "source.primary.host"),
    ('{type: mysql, dsn: "mysql://u@h/d", primary: {dsn: "host=p"}}', "source.primary: not a setting of source.type 'mysql'"),
])  # fmt: skip
def test_source_primary_errors_are_named(tmp_path: Path, source: str, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, f"""
source: {source}
iceberg: {{catalog_uri: "sqlite:///cat.db", warehouse: wh}}
"""))
    assert message in str(exc.value)
    assert "s3cret-pw" not in str(exc.value)
def test_postgres_streaming_choice(tmp_path: Path) -> None:
    body = 'iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}\n'
    cfg = load_config(_write(tmp_path, "source: {type: postgres, dsn: x}\n" + body))
    assert cfg.source.streaming == "auto"
    for word in ("on", "off", "'on'", "auto"):  # a bare on/off is a YAML boolean
        cfg = load_config(_write(tmp_path, f"source: {{type: postgres, dsn: x, streaming: {word}}}\n" + body))
        assert cfg.source.streaming == word.strip("'")
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, "source: {type: postgres, dsn: x, streaming: always}\n" + body))
    assert "source.streaming" in str(exc.value) and "'auto', 'on' or 'off'" in str(exc.value)
def _source_error(tmp_path: Path, source: str) -> str:
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, f"source: {source}\niceberg: {{catalog_uri: \"sqlite:///c.db\", warehouse: wh}}\n"))
    return str(exc.value)


def test_a_setting_of_another_source_kind_is_named_with_the_kind(tmp_path: Path) -> None:
    err = _source_error(tmp_path, "{type: postgres, dsn: x, server_id: 7}")
    assert "source.server_id: not a setting of source.type 'postgres'" in err
    assert "slot" in err and "publication" in err  # its own settings are listed
    err = _source_error(tmp_path, "{type: mysql, dsn: x, slot: s}")
    assert "source.slot: not a setting of source.type 'mysql'" in err
    err = _source_error(tmp_path, "{type: debezium-json, path: in, dsn: x}")
    assert "source.dsn: not a setting of source.type 'debezium-json'" in err
    assert "source.path is required for source.type 'debezium-json'" in _source_error(
        tmp_path, "{type: debezium-json}"
    )
    err = _source_error(tmp_path, "{type: mysql, dsn: x, zero_dates: maybe}")
    assert "source.zero_dates (source.type 'mysql'):" in err


def test_source_type_missing_or_unknown(tmp_path: Path) -> None:
    err = _source_error(tmp_path, "{dsn: x}")
    assert "source.type is missing: one of 'debezium-json', 'postgres', 'mysql'" in err
    err = _source_error(tmp_path, "{type: oracle, dsn: x}")
    assert "source.type is 'oracle': one of 'debezium-json', 'postgres', 'mysql'" in err


def test_readme_config_and_earlier_samples_still_load(tmp_path: Path) -> None:
    """The README's sample (and the earlier one, with primary_keys under a postgres source,
    a key that source never used: ignored with a warning) keep loading."""
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("```yaml\nsource:\n", 1)[1].split("```", 1)[0]
    cfg = load_config(_write(tmp_path, "source:\n" + block))
    assert cfg.source.type == "postgres" and cfg.source.tables == ("inventory.orders",)
    cfg = load_config(_write(tmp_path, """
source:
  type: postgres
  dsn: "host=db dbname=shop"
  tables: [inventory.orders]
  primary_keys:
    inventory.orders: [order_id]
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    assert cfg.source.type == "postgres" and cfg.source.slot == "replicator"
    cfg = load_config(_write(tmp_path, """
source: {type: mysql, dsn: "mysql://u@h/db", server_id: 9, zero_dates: dead-letter}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
"""))
    assert cfg.source.type == "mysql" and cfg.source.server_id == 9
def test_delete_mode_default_override_and_bad_value(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh, delete_mode_by_table: {app.items: position}}
"""))
    assert cfg.iceberg.delete_mode == "equality"
    assert cfg.iceberg.delete_mode_of("app.items") == "position"
    assert cfg.iceberg.delete_mode_of("app.other") == "equality"
    with pytest.raises(ConfigError) as exc:
        load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh, delete_mode: positional}
"""))
    assert "iceberg.delete_mode" in str(exc.value) and "'equality' or 'position'" in str(exc.value)


def test_spark_settings_from_yaml_scalars_are_strings(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, """
source: {type: debezium-json, path: in}
iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}
spark: {conf: {spark.sql.adaptive.enabled: false, spark.sql.shuffle.partitions: 4, spark.x: 0.5, spark.y: "z"}}
"""))
    assert cfg.spark.conf == {
        "spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "4", "spark.x": "0.5", "spark.y": "z",
    }  # fmt: skip



def test_table_parallelism_defaults_to_one_task_and_is_validated(tmp_path: Path) -> None:
    base = 'source: {type: debezium-json, path: in}\niceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}\n'
    assert load_config(_write(tmp_path, base)).spark.table_parallelism == 1
    assert load_config(_write(tmp_path, base + "spark: {table_parallelism: 4}\n")).spark.table_parallelism == 4
    for bad in ("0", "-1", "1000", "two"):
        with pytest.raises(ConfigError, match="table_parallelism"):
            load_config(_write(tmp_path, base + f"spark: {{table_parallelism: {bad}}}\n"))


def test_driver_max_rows_unset_is_the_whole_batch_on_a_local_spark_only(tmp_path: Path) -> None:
    base = 'source: {type: debezium-json, path: in}\niceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}\n'

    def rows(extra: str) -> int:
        return load_config(_write(tmp_path, base + extra)).driver_max_rows

    assert rows("") == 200_000  # 2 x batch.max_events
    assert rows("batch: {max_events: 20000}\n") == 40_000
    assert rows("batch: {max_events: 700}\n") == CLUSTER_DRIVER_MAX_ROWS  # never below it
    assert rows("spark: {master: 'local[4]'}\n") == 200_000
    cluster = "spark: {master: 'spark://h:7077', staging: 's3://b/p'}\n"
    assert rows(cluster) == CLUSTER_DRIVER_MAX_ROWS
    assert rows("spark: {table_parallelism: 2}\n") == CLUSTER_DRIVER_MAX_ROWS  # the split is Spark's
    assert rows("spark: {driver_max_rows: 0}\n") == 0
    assert rows(cluster.replace("}", ", driver_max_rows: 123}")) == 123
    with pytest.raises(ConfigError, match="driver_max_rows"):
        rows("spark: {driver_max_rows: -1}\n")
    said = load_config(_write(tmp_path, base)).describe_apply()
    assert said.startswith("batches of up to 200,000 changes in this process (spark.driver_max_rows unset)")
    said = load_config(_write(tmp_path, base + "spark: {driver_max_rows: 0}\n")).describe_apply()
    assert said == "every batch by Spark (local Spark)"


def test_parallel_tables_unset_is_several_only_for_a_remote_catalog_or_warehouse(tmp_path: Path) -> None:
    src = "source: {type: debezium-json, path: in}\n"

    def threads(iceberg: str) -> int:
        return load_config(_write(tmp_path, src + f"iceberg: {iceberg}\n")).iceberg.tables_at_once

    assert threads('{catalog_uri: "sqlite:///cat.db", warehouse: wh}') == 1  # local: a commit is CPU
    assert threads('{catalog_uri: "sqlite:///cat.db", warehouse: "file:///data/wh"}') == 1
    assert threads('{catalog_uri: "postgresql://h/cat", warehouse: wh}') == 1
    assert threads('{catalog_uri: "sqlite:///cat.db", warehouse: "s3://b/wh"}') == REMOTE_PARALLEL_TABLES
    assert threads('{catalog: {type: rest, uri: "http://h:8181"}}') == REMOTE_PARALLEL_TABLES
    assert threads('{catalog: {type: glue}, warehouse: "s3://b/wh"}') == REMOTE_PARALLEL_TABLES
    assert threads('{catalog: {type: rest, uri: "http://h:8181"}, parallel_tables: 1}') == 1
    assert threads('{catalog_uri: "sqlite:///cat.db", warehouse: wh, parallel_tables: 8}') == 8
    with pytest.raises(ConfigError, match="parallel_tables"):
        threads('{catalog_uri: "sqlite:///cat.db", warehouse: wh, parallel_tables: 0}')
    cfg = load_config(_write(tmp_path, src + 'iceberg: {catalog: {type: rest, uri: "http://h:8181"}}\n'))
    assert cfg.iceberg.describe_parallel_tables() == (
        f"tables written and committed {REMOTE_PARALLEL_TABLES} at a time (iceberg.parallel_tables unset)"
    )


def test_keyless_tables_are_validated(tmp_path: Path) -> None:
    base = 'iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh%s}\n'
    cfg = load_config(_write(tmp_path, "source: {type: postgres, dsn: x, keyless_tables: [public.log]}\n" + base % ""))
    assert cfg.keyless_tables == frozenset({"public.log"})
    assert load_config(_write(tmp_path, "source: {type: debezium-json, path: in}\n" + base % "")).keyless_tables == frozenset()
    bad = {
        "keyless_tables: [log]": "not schema.table names",
        "keyless_tables: [a.b, a.b]": "twice",
        "tables: [a.c], keyless_tables: [a.b]": "which source.tables does not list",
    }
    for setting, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            load_config(_write(tmp_path, f"source: {{type: postgres, dsn: x, {setting}}}\n" + base % ""))
    mysql = load_config(_write(tmp_path, "source: {type: mysql, dsn: x, keyless_tables: [a.b]}\n" + base % ""))
    assert mysql.keyless_tables == frozenset({"a.b"})
    with pytest.raises(ConfigError, match="always written with position deletes"):
        load_config(_write(tmp_path, "source: {type: postgres, dsn: x, keyless_tables: [a.b]}\n"
                           + base % ", delete_mode_by_table: {a.b: equality}"))


def test_reader_process_is_a_database_source_setting(tmp_path: Path) -> None:
    base = 'iceberg: {catalog_uri: "sqlite:///cat.db", warehouse: wh}\n'
    for kind in ("postgres", "mysql"):
        on = load_config(
            _write(tmp_path, f"source: {{type: {kind}, dsn: x, reader_process: true}}\n" + base)
        )
        assert on.source.type != "debezium-json" and on.source.reader_process is True
        off = load_config(_write(tmp_path, f"source: {{type: {kind}, dsn: x}}\n" + base))
        assert off.source.type != "debezium-json" and off.source.reader_process is False
    with pytest.raises(ConfigError, match="reader_process is a setting of database sources"):
        load_config(
            _write(
                tmp_path, "source: {type: debezium-json, path: in, reader_process: true}\n" + base
            )
        )
    assert load_config(
        _write(tmp_path, "source: {type: debezium-json, path: in, reader_process: false}\n" + base)
    )
