"""The one-snapshot rewrite commit maintenance uses (conv's ``replicator.iceberg.rewrite``;
a local stand-in until that is merged)."""

from replicator.maintenance._rewrite_stub import commit_rewrite

__all__ = ["commit_rewrite"]
