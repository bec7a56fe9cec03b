"""Helpers every database source shares (source identity, ...)."""
