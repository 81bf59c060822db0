"""The import architecture of ``src/bertlook``: layer order, no import cycles, no private names
imported across modules. Pure ``ast`` parsing of ``src/bertlook/**/*.py``; no bertlook module is
imported and no subprocess is run.

Layers, lowest first; a module may import from its own layer or any lower one, never a higher one:

  0. ``bertlook.errors``, ``bertlook.io_utils``, ``bertlook.naming``, ``bertlook.threads`` (and the ``bertlook``
     package itself)
  1. ``bertlook.pipeline``   2. ``bertlook.data``   3. ``bertlook.attention``
  4. ``bertlook.analyses``   5. ``bertlook.reporting``   6. ``bertlook.cli``

``bertlook.testing`` may import anything below ``cli`` and is imported by nothing in ``src`` but itself.
``bertlook/__init__.py`` and ``bertlook/__main__.py`` (the CLI entry) are exempt as importers;
``bertlook.__main__`` ranks above ``cli``, so nothing may import it.

Which module an import statement imports (the edges of every check). Every statement counts: module
level, inside functions/classes, and under ``if TYPE_CHECKING:`` (the last two are tagged ``[lazy]`` /
``[typing]`` in the messages). Module names come from paths: ``bertlook/a/b.py`` is ``bertlook.a.b``,
``bertlook/a/__init__.py`` is ``bertlook.a`` (the package's ``__init__`` module, whatever it holds).

* ``import a.b.c`` / ``import a.b.c as x``: an edge to ``a.b.c`` only. The parent packages ``a`` and
  ``a.b``, which Python also initialises, are not counted.
* ``from P import n``: an edge to ``P.n`` when ``P.n`` is a module of the tree (a submodule), else to
  ``P`` (``n`` is an attribute of ``P``, for a package an attribute of its ``__init__``);
  ``from P import *`` is an edge to ``P``.
* Relative imports are resolved against the importing module's package (the module itself for an
  ``__init__.py``): ``from .. import n`` in ``bertlook/a/b.py`` has ``P = bertlook``.
* Only targets named ``bertlook`` or ``bertlook.*`` count; an edge of a module to itself is ignored
  by the cycle check. ``importlib.import_module("...")`` (the lazy CLI registry) is not an edge.

Private names: ``from P import _n`` (one leading underscore, not a dunder) is a violation when ``_n``
is an attribute of ``P`` and the importer is not ``P``, or when ``_n`` is a private submodule
``P._n`` and the importer lies outside package ``P`` (siblings may share a private module, e.g.
``bertlook.cli._args``). ``alias._n`` is a violation when ``alias`` (or a dotted chain starting
at it) names another bertlook module; aliases are the names bound by any import statement of the
file (``import a.b as x``, ``import a.b`` binding ``a``, ``from P import submodule``), without
regard to scope or later rebinding.
"""

from __future__ import annotations

import ast
import functools
import os
from collections import defaultdict, deque
from pathlib import Path
from typing import Iterator, NamedTuple

import pytest

#: BERTLOOK_DOCS_ROOT: check another copy of the project (tests/test_toy_step.py)
SRC = Path(os.environ.get("BERTLOOK_DOCS_ROOT") or Path(__file__).resolve().parents[1]) / "src"
ROOT = "bertlook"
MAIN = "bertlook.__main__"
TESTING = "bertlook.testing"
LAYERS = {"errors": 0, "io_utils": 0, "naming": 0, "threads": 0, "pipeline": 1, "data": 2, "attention": 3,
          "analyses": 4, "reporting": 5, "cli": 6}
EXEMPT_IMPORTERS = {ROOT, MAIN}
LAYER_HELP = ("errors/io_utils/naming/threads < pipeline < data < attention < analyses < reporting < cli; "
              "testing may import anything below cli and only testing may import testing")


class Module(NamedTuple):
    name: str
    path: str
    tree: ast.Module
    is_package: bool


class Edge(NamedTuple):
    """One imported name: ``path:line: importer -> imported (name)``."""

    path: str
    line: int
    importer: str
    imported: str
    name: str
    kind: str  # "top", "lazy" (inside a function), "typing" (under if TYPE_CHECKING), "attribute"
    attr: bool  # name is an attribute of ``imported`` (not a module)

    def __str__(self) -> str:
        return describe([self])[0]


def describe(edges: list[Edge]) -> list[str]:
    """One line per import statement and imported module, its names joined:
    ``path:line: importer -> imported (name, name) [kind]``."""
    names: dict[tuple, list[str]] = defaultdict(list)
    for e in edges:
        names[e.path, e.line, e.importer, e.imported, e.kind].append(e.name)
    return [f"{path}:{line}: {importer} -> {imported} ({', '.join(n)})" + ("" if kind == "top" else f" [{kind}]")
            for (path, line, importer, imported, kind), n in names.items()]


# --- parsing -----------------------------------------------------------------------------------


def read_tree(src: Path = SRC) -> dict[str, str]:
    """``{"bertlook/a/b.py": source}`` for every module of the package."""
    return {p.relative_to(src).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted((src / ROOT).rglob("*.py"))}


def parse_modules(files: dict[str, str], prefix: str = "") -> dict[str, Module]:
    """Modules by dotted name, from ``{"bertlook/a/b.py": source}``; ``prefix`` goes before the path
    in messages."""
    modules = {}
    for relpath, source in files.items():
        parts = relpath.removesuffix(".py").split("/")
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, prefix + relpath, ast.parse(source, relpath), is_package)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


#: The nodes an import statement can sit in (expressions hold none: skipping them is fast).
_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def import_nodes(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement of ``tree`` with its kind: top, lazy (in a function), typing."""
    stack: list[tuple[ast.AST, str]] = [(node, "top") for node in tree.body]
    while stack:
        node, kind = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, kind
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack += [(c, "typing") for c in node.body] + [(c, kind) for c in node.orelse]
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and kind == "top":
            kind = "lazy"
        stack += [(child, kind) for child in ast.iter_child_nodes(node) if isinstance(child, _BLOCKS)]


def _in_package(name: str | None) -> bool:
    return name is not None and (name == ROOT or name.startswith(ROOT + "."))


def from_base(module: Module, node: ast.ImportFrom) -> str | None:
    """The absolute ``P`` of ``from P import ...``, relative imports resolved (None: beyond the top)."""
    if node.level == 0:
        return node.module
    package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    if node.level - 1 >= len(package):
        return None
    base = ".".join(package[:len(package) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def module_edges(module: Module, known: set[str]) -> Iterator[Edge]:
    """The bertlook modules that ``module``'s import statements import (rules: module docstring)."""
    for node, kind in import_nodes(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _in_package(alias.name):
                    yield Edge(module.path, node.lineno, module.name, alias.name, alias.name, kind, False)
            continue
        base = from_base(module, node)
        if not _in_package(base):
            continue
        for alias in node.names:
            submodule = f"{base}.{alias.name}" in known
            target = f"{base}.{alias.name}" if submodule else base
            yield Edge(module.path, node.lineno, module.name, target, alias.name, kind, not submodule)


def all_edges(modules: dict[str, Module]) -> list[Edge]:
    known = set(modules)
    return sorted(e for m in modules.values() for e in module_edges(m, known))


# --- a. layer order ----------------------------------------------------------------------------


def _is_testing(module: str) -> bool:
    return module == TESTING or module.startswith(TESTING + ".")


def rank(module: str) -> float | None:
    """The layer of a bertlook module (None: a module outside every layer)."""
    if module == ROOT:
        return 0
    if module == MAIN:
        return LAYERS["cli"] + 1
    if _is_testing(module):
        return LAYERS["cli"] - 0.5
    return LAYERS.get(module.split(".")[1])


def layer_violations(edges: list[Edge]) -> list[Edge]:
    out = []
    for e in edges:
        if e.importer in EXEMPT_IMPORTERS:
            continue
        low, high = rank(e.imported), rank(e.importer)
        if _is_testing(e.imported) and not _is_testing(e.importer):
            out.append(e)
        elif low is None or high is None or low > high:
            out.append(e)
    return out


# --- b. import cycles --------------------------------------------------------------------------


def import_graph(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        if e.importer != e.imported:
            graph[e.importer].add(e.imported)
            graph.setdefault(e.imported, set())
    return dict(graph)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iterative; each component sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    components.append(_pop_component(stack, node))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return components


def _pop_component(stack: list[str], node: str) -> list[str]:
    component = []
    while True:
        member = stack.pop()
        component.append(member)
        if member == node:
            return sorted(component)


def shortest_cycle(graph: dict[str, set[str]], start: str) -> list[str]:
    """The shortest ``start -> ... -> start`` path (breadth first); [] if there is none."""
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node]):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [*reversed(path), start]
            if child not in parent:
                parent[child] = node
                queue.append(child)
    return []


def import_cycles(edges: list[Edge]) -> list[tuple[list[str], list[str], list[Edge]]]:
    """Each cycle: its modules, one shortest cycle through the first, and the edges inside it."""
    graph = import_graph(edges)
    out = []
    for component in sorted(c for c in strongly_connected(graph) if len(c) > 1):
        inside = [e for e in edges if e.importer != e.imported
                  and e.importer in component and e.imported in component]
        out.append((component, shortest_cycle(graph, component[0]), inside))
    return out


def format_cycles(cycles: list[tuple[list[str], list[str], list[Edge]]]) -> str:
    lines = []
    for modules, example, inside in cycles:
        lines.append(f"cycle of {len(modules)} modules: {', '.join(modules)}")
        lines.append(f"  e.g. {' -> '.join(example)}")
        lines += [f"  {line}" for line in describe(inside)]
    return "\n".join(lines)


# --- c. private names --------------------------------------------------------------------------


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(edges: list[Edge]) -> list[Edge]:
    """``from P import _n`` of another module's private name, or of a private module of another package."""
    out = []
    for e in edges:
        if e.kind == "attribute" or not _is_private(e.name):
            continue
        owner = e.imported if e.attr else e.imported.rpartition(".")[0]
        inside = e.importer == owner or (not e.attr and e.importer.startswith(owner + "."))
        if not inside:
            out.append(e)
    return out


def module_aliases(module: Module, known: set[str]) -> dict[str, str]:
    """The names this file's import statements bind to bertlook modules (any scope)."""
    aliases = {}
    for node, _ in import_nodes(module.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _in_package(a.name):
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            continue
        base = from_base(module, node)
        for a in node.names:
            if _in_package(base) and f"{base}.{a.name}" in known:
                aliases[a.asname or a.name] = f"{base}.{a.name}"
    return aliases


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def private_attribute_uses(module: Module, known: set[str]) -> list[Edge]:
    """``alias._n`` where ``alias`` names another bertlook module."""
    aliases = module_aliases(module, known)
    out = []
    for node in ast.walk(module.tree) if aliases else ():
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
            continue
        chain = _dotted(node.value)
        if chain and chain[0] in aliases:
            target = ".".join([aliases[chain[0]], *chain[1:]])
            if target in known and target != module.name:
                out.append(Edge(module.path, node.lineno, module.name, target, node.attr, "attribute", True))
    return out


def private_violations(modules: dict[str, Module], edges: list[Edge]) -> list[Edge]:
    known = set(modules)
    uses = [e for m in modules.values() for e in private_attribute_uses(m, known)]
    return sorted(private_imports(edges) + uses)


# --- the known violations (issue 25: being removed) ----------------------------------------------
# A ratchet: a violation not listed here fails the test (no new ones), and so does a listed one that is
# gone (remove it from the list when you fix it, so the list only shrinks). Entries name modules without
# the ``bertlook.`` prefix, no line numbers (they move).
KNOWN_LAYER_VIOLATIONS: set[tuple[str, str, str]] = set()  # none left: a new one fails the test
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str, str]] = set()  # none left: a new one fails the test
KNOWN_CYCLES: set[tuple[str, ...]] = set()  # none left: a new cycle fails the test


# --- the real tree -----------------------------------------------------------------------------

@functools.cache
def real_tree() -> tuple[dict[str, Module], list[Edge]]:
    """The modules of ``src/bertlook`` and their import edges, parsed once per session."""
    modules = parse_modules(read_tree(), prefix="src/")
    return modules, all_edges(modules)


def _listing(title: str, edges: list[Edge]) -> str:
    lines = describe(edges)
    return f"{len(edges)} {title} ({len(lines)} statements):\n" + "\n".join(f"  {line}" for line in lines)


def test_the_real_tree_is_scanned():
    modules, edges = real_tree()
    assert {"bertlook", "bertlook.cli", "bertlook.errors", "bertlook.attention.extraction"} <= set(modules)
    assert len(modules) > 80 and len(edges) > 100, (len(modules), len(edges))


def _ratchet(found: set, known: set, what: str, listing: str) -> None:
    new, fixed = found - known, known - found
    assert not new, f"new {what} (not in the known list of this file):\n{listing}"
    assert not fixed, (f"fixed {what}, still in the known list of this file: remove "
                       + ", ".join(map(repr, sorted(fixed))))


def _strip(module: str) -> str:
    return module.removeprefix(ROOT + ".")


def _key(edge: Edge) -> tuple[str, str, str]:
    """How a known-violation list names an edge: importer, imported module (no ``bertlook.``), name."""
    return _strip(edge.importer), _strip(edge.imported), edge.name


def _cycle_key(members: list[str]) -> tuple[str, ...]:
    return tuple(sorted(map(_strip, members)))


def test_layer_order():
    bad = layer_violations(real_tree()[1])
    new = [e for e in bad if _key(e) not in KNOWN_LAYER_VIOLATIONS]
    _ratchet(set(map(_key, bad)), KNOWN_LAYER_VIOLATIONS, "imports against the layer order",
             _listing(f"imports against the layer order ({LAYER_HELP})", new))


def test_no_import_cycles():
    cycles = import_cycles(real_tree()[1])
    new = [c for c in cycles if _cycle_key(c[0]) not in KNOWN_CYCLES]
    _ratchet({_cycle_key(c[0]) for c in cycles}, KNOWN_CYCLES, "import cycles", format_cycles(new))


def test_no_private_names_across_modules():
    bad = private_violations(*real_tree())
    new = [e for e in bad if _key(e) not in KNOWN_PRIVATE_IMPORTS]
    _ratchet(set(map(_key, bad)), KNOWN_PRIVATE_IMPORTS, "private names used outside their module",
             _listing("private names used outside their module", new))


def test_the_ratchet_fails_on_a_new_and_on_a_fixed_violation():
    with pytest.raises(AssertionError, match="new imports"):
        _ratchet({("a", "b", "x")}, set(), "imports", "a -> b (x)")
    with pytest.raises(AssertionError, match="fixed imports.*remove"):
        _ratchet(set(), {("a", "b", "x")}, "imports", "")
    _ratchet({("a", "b", "x")}, {("a", "b", "x")}, "imports", "")


# --- the checkers on hand-written snippets -----------------------------------------------------


def _snippets(files: dict[str, str]) -> dict[str, Module]:
    """Modules from ``{"cli/heads": source}`` (the file ``bertlook/cli/heads.py``)."""
    return parse_modules({f"bertlook/{key}.py": source for key, source in files.items()})


def _found(edges: list[Edge]) -> set[tuple[int, str, str, str]]:
    return {(e.line, e.importer, e.imported, e.name) for e in edges}


def test_edges_resolve_submodules_attributes_and_relative_imports():
    modules = _snippets({
        "__init__": "", "errors": "", "data/__init__": "", "data/treebank": "X = 1\n",
        "analyses/__init__": "from . import heads\nfrom .heads import h\n",
        "analyses/heads": "from .. import errors\nfrom ..data import treebank, VALUE\n"
                         "def f():\n    import bertlook.data.treebank as tb\n    from ..data.treebank import X\n"})
    assert _found(all_edges(modules)) == {
        (1, "bertlook.analyses", "bertlook.analyses.heads", "heads"),
        (2, "bertlook.analyses", "bertlook.analyses.heads", "h"),
        (1, "bertlook.analyses.heads", "bertlook.errors", "errors"),
        (2, "bertlook.analyses.heads", "bertlook.data.treebank", "treebank"),
        (2, "bertlook.analyses.heads", "bertlook.data", "VALUE"),
        (4, "bertlook.analyses.heads", "bertlook.data.treebank", "bertlook.data.treebank"),
        (5, "bertlook.analyses.heads", "bertlook.data.treebank", "X"),
    }
    assert {e.kind for e in all_edges(modules) if e.line >= 4} == {"lazy"}


def test_layer_check_catches_upward_imports():
    modules = _snippets({
        "__main__": "from bertlook.cli import main\n", "errors": "import bertlook.pipeline.config\n",
        "pipeline/config": "from typing import TYPE_CHECKING\n"
                           "if TYPE_CHECKING:\n    from bertlook.data import treebank\n",
        "data/treebank": "from bertlook.pipeline.config import C\nfrom bertlook import errors\n",
        "reporting/tables": "def f():\n    from ..testing import tiny_models\n",
        "testing/tiny_models": "from bertlook.reporting import tables\nfrom bertlook.cli import heads\n",
        "cli/heads": "from bertlook.analyses.heads import predict\nfrom bertlook.testing import tiny_models\n"})
    assert _found(layer_violations(all_edges(modules))) == {
        (1, "bertlook.errors", "bertlook.pipeline.config", "bertlook.pipeline.config"),
        (3, "bertlook.pipeline.config", "bertlook.data.treebank", "treebank"),
        (2, "bertlook.reporting.tables", "bertlook.testing.tiny_models", "tiny_models"),
        (2, "bertlook.testing.tiny_models", "bertlook.cli.heads", "heads"),
        (2, "bertlook.cli.heads", "bertlook.testing.tiny_models", "tiny_models"),
    }
    assert [e.kind for e in all_edges(modules) if e.importer == "bertlook.pipeline.config"] == ["typing"]


def test_cycle_check_catches_a_three_module_cycle():
    modules = _snippets({
        "data/__init__": "", "data/a": "from bertlook.data.b import x\n",
        "data/b": "def f():\n    import bertlook.pipeline.c\n",
        "pipeline/c": "from bertlook.data import a\n",
        "pipeline/d": "from bertlook.data import a\nfrom bertlook.data import thing\n",
        "attention/e": "from . import e\n"})  # a self-import is no cycle
    cycles = import_cycles(all_edges(modules))
    assert [(m, ex) for m, ex, _ in cycles] == [
        (["bertlook.data.a", "bertlook.data.b", "bertlook.pipeline.c"],
         ["bertlook.data.a", "bertlook.data.b", "bertlook.pipeline.c", "bertlook.data.a"])]
    assert [e.line for e in cycles[0][2]] == [1, 2, 1]
    assert "cycle of 3 modules" in format_cycles(cycles)
    assert strongly_connected({"a": {"b"}, "b": {"a", "c"}, "c": {"c"}, "d": set()}) == [["c"], ["a", "b"], ["d"]]


def test_private_check_catches_private_names():
    modules = _snippets({
        "analyses/probes": "def _isna(x): ...\ndef g():\n    return _isna(1)\n",
        "analyses/heads": "from bertlook.analyses.probes import _isna, __all__\nfrom bertlook.cli import _args\n",
        "cli/_args": "", "cli/heads": "from bertlook.cli import _args\nfrom ._args import add, _hidden\n",
        "reporting/tables": "import bertlook.analyses.probes as probes\nimport bertlook.analyses.heads\n"
                           "from bertlook.analyses import heads as h\n"
                           "probes._isna(1)\nbertlook.analyses.heads._x\nh._y\nprobes.__name__\nh.z._w\n"})
    assert _found(private_violations(modules, all_edges(modules))) == {
        (1, "bertlook.analyses.heads", "bertlook.analyses.probes", "_isna"),
        (2, "bertlook.analyses.heads", "bertlook.cli._args", "_args"),
        (2, "bertlook.cli.heads", "bertlook.cli._args", "_hidden"),
        (4, "bertlook.reporting.tables", "bertlook.analyses.probes", "_isna"),
        (5, "bertlook.reporting.tables", "bertlook.analyses.heads", "_x"),
        (6, "bertlook.reporting.tables", "bertlook.analyses.heads", "_y"),
    }
    assert str(private_violations(modules, all_edges(modules))[0]) == (
        "bertlook/analyses/heads.py:1: bertlook.analyses.heads -> bertlook.analyses.probes (_isna)")
