"""Spark with Iceberg Java: the shared session (``session``), the apply stage's job
(``apply_stage``) and Hadoop S3A for tables on object storage (``s3a``)."""
