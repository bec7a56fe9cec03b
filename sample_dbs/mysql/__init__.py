"""A private MariaDB server, a small shop schema and a seeded workload for the MySQL source."""
