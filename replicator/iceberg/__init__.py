"""Iceberg writing: file descriptions (``files``) and row-delta commits (``row_delta``).

Submodules are imported explicitly (``from replicator.iceberg.row_delta import ...``) so that
importing this package stays cheap and free of import cycles.
"""
