"""Compiled decoders (Cython, ``*.pyx`` here; built by ``pip install`` / ``make install``
through setup.py, Cython pinned in pyproject.toml's build requirements). Pure functions and
builders: bytes in, column buffers out, no I/O; they release the GIL on large inputs.

* ``binlog_rows``: binlog rows events' row images -> Arrow column buffers (the MySQL source,
  ``sources/mysql/rowarrow.py``).
* ``pgoutput_rows``: runs of pgoutput Insert/Update/Delete messages split into text columns
  (the Postgres change blocks, ``sources/postgres/change_block.py``).
* ``text_rows``: a text-protocol result set's row packets framed and split into columns (the
  MySQL snapshot, ``sources/mysql/rawchunk.py``).

A checkout that was not built (no C compiler at install time, a copied tree) has none of
them: ``missing(name)`` says why, and the callers take their pure-Python paths, saying so
once in their log (``note_missing``).
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

log = logging.getLogger(__name__)

MODULES = ("binlog_rows", "pgoutput_rows", "text_rows")
_loaded: dict[str, ModuleType | None] = {}
_why: dict[str, str] = {}
_noted: set[str] = set()


def load(name: str) -> ModuleType | None:
    """The compiled module ``name``, or None when it is not built here."""
    if name not in _loaded:
        try:
            _loaded[name] = importlib.import_module(f"{__name__}.{name}")
        except ImportError as exc:
            _loaded[name] = None
            _why[name] = str(exc)
    return _loaded[name]


def missing(name: str) -> str | None:
    """Why ``name`` cannot be imported, or None when it can."""
    return None if load(name) is not None else _why.get(name, "not built")


def note_missing(name: str, what: str) -> None:
    """Log once per process that ``what`` runs in pure Python because ``name`` is missing."""
    why = missing(name)
    if why is None or name in _noted:
        return
    _noted.add(name)
    log.warning(
        "the compiled module replicator.native.%s is not built (%s): %s in pure Python "
        "(slower); `make install` builds it",
        name,
        why,
        what,
    )
