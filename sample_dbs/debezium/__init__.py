"""A bundled Debezium change log (Postgres-style envelopes with schemas)."""
