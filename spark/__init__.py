"""Spark + Iceberg Java helpers (runtime jars, shared local session)."""
