"""The jars Spark needs (the Iceberg runtime, its relocated Jackson, Hadoop S3A): built at
install time (``python -m replicator.jars.runtime_jars``), listed for ``spark.session``."""
