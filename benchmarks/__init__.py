"""Benchmarks of the replicator (``make bench`` runs ``python -m benchmarks.run``)."""
