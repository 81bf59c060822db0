"""Imports at the top (issue 41): a module's dependencies are read off its first lines. A function-local
import outside ``bertlook.cli`` (where lazy imports keep ``bertlook --help`` fast: the lazy registry) is
allowed only where it defers a heavy or optional dependency, and then says why in a one-line comment
``# lazy: <reason>`` on one of the import's lines or on the line just above it (a run of consecutive local imports
shares one comment). Pure ``ast`` parsing; nothing is imported."""

from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(os.environ.get("BERTLOOK_DOCS_ROOT") or Path(__file__).resolve().parents[1])
PKG = ROOT / "src" / "bertlook"
MARK = "# lazy:"


def _local_imports(tree: ast.AST) -> list[ast.stmt]:
    """Import statements inside a function body (at any depth), each once."""
    found: dict[int, ast.stmt] = {}
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found[id(node)] = node
    return sorted(found.values(), key=lambda n: n.lineno)


def unexplained_local_imports(path: Path) -> list[str]:
    """``file:line import`` of every function-local import in ``path`` without a ``# lazy:`` reason."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    out, explained = [], set()
    for node in _local_imports(ast.parse(text)):
        own = lines[node.lineno - 1]
        span = lines[node.lineno - 1:node.end_lineno]  # a wrapped import may carry it on its last line
        above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        reason = any(MARK in line for line in span) or (above.startswith(MARK) and len(above) > len(MARK) + 1)
        if reason or (node.lineno - 1) in explained:  # a run of imports under one comment
            explained.add(node.end_lineno)
            continue
        out.append(f"{path.name}:{node.lineno} {own.strip()}")
    return out


def test_function_local_imports_outside_the_cli_say_why():
    found = [f"{p.parent.name}/{item}" for p in sorted(PKG.rglob("*.py"))
             if "cli" not in p.relative_to(PKG).parts and p.name != "__main__.py"
             for item in unexplained_local_imports(p)]
    assert not found, ("move these imports to the module's top, or give the heavy/optional dependency a "
                       f"'{MARK} <reason>' comment: " + "; ".join(found))


def test_the_local_import_check_can_fail(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "import os\n\n"
        "def f():\n    import json\n    return json\n\n"
        "def g():\n    import torch  # lazy: torch, not at DAG build\n    return torch\n\n"
        "def h():\n    # lazy: matplotlib, only when drawing\n    import matplotlib\n    import seaborn\n"
        "    return matplotlib, seaborn\n\n"
        "def k():\n    #\n    from bertlook import naming\n    return naming\n"
    )
    assert unexplained_local_imports(path) == ["m.py:4 import json", "m.py:19 from bertlook import naming"]
