"""The private pyiceberg names ``replicator/`` depends on (THE list, in
``replicator/iceberg/__init__.py``'s docstring) still exist with the shape we use. A pyiceberg
upgrade that moves or renames one fails here, by name, instead of deep inside a commit."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pyiceberg
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import CreateTableTransaction, StagedTable, Table
from pyiceberg.table import update as table_update

import replicator
import replicator.iceberg

PINNED = "0.12.0"  # the version the list was checked against (pyproject pins it)
ROOT = Path(replicator.__file__).parent


def _listed() -> list[str]:
    doc = replicator.iceberg.__doc__ or ""
    return re.findall(r"^\d+\. ``([\w.]+)``", doc, flags=re.MULTILINE)


def test_pyiceberg_is_the_version_the_list_was_checked_against() -> None:
    assert pyiceberg.__version__ == PINNED, (
        f"pyiceberg {pyiceberg.__version__}: re-check the private names listed in "
        "replicator/iceberg/__init__.py, then update PINNED"
    )


def test_the_list_holds_at_most_ten_names() -> None:
    names = _listed()
    assert 0 < len(names) <= 10, names
    assert all(name.split(".")[-1].startswith("_") for name in names), names


def test_replicator_imports_no_private_pyiceberg_name_off_the_list() -> None:
    listed = {name.split(".")[-1] for name in _listed()}
    found = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyiceberg"):
                found |= {(path.name, a.name) for a in node.names if a.name.startswith("_")}
    assert {name for _, name in found} <= listed, sorted(found)


def test_sql_catalog_hooks() -> None:
    """1-4: what ``replicator.iceberg.sql_commit`` overrides or calls on a SqlCatalog."""
    for name in ("_convert_orm_to_iceberg", "_write_metadata", "_update_and_stage_table", "_parse_metadata_version"):
        assert callable(getattr(SqlCatalog, name, None)), f"SqlCatalog.{name} is gone"
    params = inspect.signature(SqlCatalog._update_and_stage_table).parameters
    assert list(params)[1:] == ["current_table", "table_identifier", "requirements", "updates"]
    assert list(inspect.signature(SqlCatalog._write_metadata).parameters)[-3:] == ["metadata", "io", "metadata_path"]
    assert list(inspect.signature(SqlCatalog._convert_orm_to_iceberg).parameters)[1:] == ["orm_table"]
    assert SqlCatalog._parse_metadata_version(
        "s3://b/t/metadata/00012-8f6ad3c2-4a7e-4d4c-9d0a-2c4f8e1b6a11.metadata.json"
    ) == 12


def test_table_update_functions() -> None:
    """5-7: the per-update rule, its context and the metadata log ``sql_commit`` calls."""
    for name in ("_apply_table_update", "_TableMetadataUpdateContext", "_update_table_metadata_log"):
        assert hasattr(table_update, name), f"pyiceberg.table.update.{name} is gone"
    assert list(inspect.signature(table_update._update_table_metadata_log).parameters) == [
        "base_metadata", "metadata_location", "last_updated_ms",
    ]  # fmt: skip
    assert len(inspect.signature(table_update._apply_table_update).parameters) == 3


def test_create_table_transaction_keeps_its_staged_table(tmp_path: Path) -> None:
    """8: ``ResilientCatalog.create_table_transaction`` re-binds the staged table."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("n")
    tx = catalog.create_table_transaction("n.t", Schema(NestedField(1, "id", LongType(), required=True)))
    assert isinstance(tx, CreateTableTransaction)
    assert isinstance(tx._table, StagedTable) and isinstance(tx._table, Table)
    assert "config" in inspect.signature(StagedTable.__init__).parameters


def test_rest_catalog_session_attribute() -> None:
    """9: ``catalog`` mounts its timeout adapters on the REST catalog's requests session."""
    source = inspect.getsource(RestCatalog)
    assert "self._session" in source, "RestCatalog._session is gone"


# A private name pyiceberg defines: ``def _x``, ``class _X``, or an attribute it assigns
# (``self._x = ...``, ``self._x: T = ...``); text, not an AST: 50 times cheaper, same names.
_DEFINED = re.compile(r"(?:def|class)\s+(_\w+)|\.(_\w+)\s*(?::[^=\n]*)?=(?!=)")


def _pyiceberg_private_names() -> set[str]:
    """Every private name pyiceberg defines: functions, classes, attributes it assigns."""
    names: set[str] = set()
    for path in Path(pyiceberg.__file__).parent.rglob("*.py"):
        names |= {m.group(1) or m.group(2) for m in _DEFINED.finditer(path.read_text())}
    return {n for n in names if not n.startswith("__")}


def _private_uses(tree: ast.Module) -> set[str]:
    """Private names a module reaches on objects not its own: ``x._name`` (x not ``self`` /
    ``cls``), ``super()._name``, ``getattr(x, "_name")``, and ``self._name`` inside a class
    with a base imported from pyiceberg."""
    from_pyiceberg = {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyiceberg")
        for a in node.names
    }  # fmt: skip
    subclass_nodes = {
        id(inner)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef) and any(ast.unparse(b) in from_pyiceberg for b in cls.bases)
        for inner in ast.walk(cls)
    }  # fmt: skip
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if ast.unparse(node.value) not in ("self", "cls") or id(node) in subclass_nodes:
                found.add(node.attr)
        elif (
            isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "hasattr", "setattr")
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
        ):  # fmt: skip
            found.add(str(node.args[1].value))
    return found


def test_the_list_is_complete() -> None:
    """No private pyiceberg name is reached off the list, by attribute, ``super()`` or
    ``getattr``, in any module of replicator/ or spark/ that names pyiceberg (a name of its
    own that pyiceberg happens to use too would show here: rename it)."""
    listed = {name.split(".")[-1] for name in _listed()}
    theirs = _pyiceberg_private_names()
    off: set[str] = set()
    for root in (ROOT, ROOT.parent / "spark"):
        for path in root.rglob("*.py"):
            source = path.read_text()
            if "pyiceberg" not in source:
                continue
            uses = _private_uses(ast.parse(source)) & theirs
            off |= {f"{path.relative_to(ROOT.parent)}: {name}" for name in uses - listed}
    assert not off, sorted(off)
