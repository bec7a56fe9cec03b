"""The table's files as the writers see them: object storage through pyiceberg's FileIO
(``fileio``), partition values of rows (``partitioning``) and the Parquet file writer
(``file_writer``), used by the apply stage in Spark's workers and by maintenance in the
driver. No Spark here."""
