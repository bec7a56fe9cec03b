"""CDC replication from PostgreSQL / MySQL change logs into Apache Iceberg tables."""

__version__ = "0.1.0"
