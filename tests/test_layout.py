"""The package layout of issue 11: argparse glue only in bertlook.cli, computation elsewhere, and a
parser that builds without the heavy libraries; the layout documentation (docs/DESIGN.md "Modules",
docs/development/layout.md) against the modules, the rule files and the declared steps (issue 25).

The documentation must name every module outside ``analyses/`` and ``cli/`` and the rules of the paper's
steps; every module or rule file it names must exist. A step beyond the paper (its module in
``analyses/``, its CLI module, its rule file) is documented by its definition in docs/definitions.md
(docs/ADDING_A_STEP.md: five files). BERTLOOK_DOCS_ROOT: check another copy of the project
(tests/test_toy_step.py)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(os.environ.get("BERTLOOK_DOCS_ROOT") or Path(__file__).resolve().parents[1])
PKG = ROOT / "src" / "bertlook"
STAGES = ("pipeline", "data", "attention", "analyses", "reporting", "testing", "cli")


def _imports(tree: ast.Module) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_every_module_sits_in_a_stage_package():
    loose = sorted(p.name for p in PKG.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "errors.py", "io_utils.py", "naming.py", "threads.py"], loose
    assert sorted(p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == sorted(STAGES)


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 650, 80


def oversized(path: Path) -> list[str]:
    """What in one source file is over the size limits: the module (lines) and its functions (lines from
    ``def`` to the last line of the body, nested ones counted on their own too)."""
    text = path.read_text(encoding="utf-8")
    out = [f"{path.name}: {len(text.splitlines())} lines"] if len(text.splitlines()) > MAX_MODULE_LINES else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                out.append(f"{path.name}:{node.lineno} {node.name}: {length} lines")
    return out


def test_modules_and_functions_a_reader_can_hold():
    """No module of src/ over 650 lines, no function over 80 (issues 25, 41; docs/DESIGN.md "Structure")."""
    found = [f"{p.parent.name}/{item}" for p in sorted(PKG.rglob("*.py")) for item in oversized(p)]
    assert not found, "split these: " + "; ".join(found)


def test_the_size_check_can_fail(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    path = tmp_path / "big.py"
    path.write_text(f"def f():\n{body}\n" + "\n" * MAX_MODULE_LINES)
    assert oversized(path) == [f"big.py: {MAX_FUNCTION_LINES + 1 + MAX_MODULE_LINES} lines", f"big.py:1 f: {MAX_FUNCTION_LINES + 1} lines"]


def test_no_computation_module_holds_argparse_glue():
    offenders = []
    for path in PKG.rglob("*.py"):
        if "cli" in path.relative_to(PKG).parts:
            continue
        tree = ast.parse(path.read_text())
        top_defs = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        if "argparse" in _imports(tree) and not path.name == "__main__.py":
            offenders.append(f"{path.relative_to(PKG)}: imports argparse")
        if "register_cli" in top_defs:
            offenders.append(f"{path.relative_to(PKG)}: defines register_cli")
    assert offenders == []


def test_every_registered_step_module_is_a_cli_module():
    from bertlook import cli

    assert all(name.startswith("bertlook.cli.") for name in cli.COMMAND_MODULES)
    for name in cli.COMMAND_MODULES:
        path = PKG / "cli" / (name.rsplit(".", 1)[1] + ".py")
        tree = ast.parse(path.read_text())
        assert "register_cli" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, name


def test_top_level_help_imports_no_step_module_and_no_heavy_library():
    """The lazy registry: `bertlook --help` lists every step without importing a step module (the
    computation modules import numpy/pandas/torch at the top)."""
    code = ("import sys; from bertlook import cli; cli.build_parser().format_help(); "
            "print(','.join(m for m in ('numpy', 'torch', 'transformers', 'pandas', 'matplotlib', 'scipy', "
            "'sklearn', 'spacy', *cli.COMMAND_MODULES) if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_the_step_declarations_import_no_heavy_library():
    """The DAG build gathers every declared step (bertlook.cli.declared_steps imports the CLI modules that
    declare one): their top-level imports stay light."""
    code = ("import sys; from bertlook import cli; assert cli.declared_steps(); "
            "print(','.join(m for m in ('numpy', 'torch', 'transformers', 'pandas', 'matplotlib', 'scipy', "
            "'sklearn', 'spacy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_lazy_registry_matches_the_modules():
    """Each registry entry is registered by its module, with the same help line, and nothing else is."""
    import argparse
    import importlib

    from bertlook import cli

    registered = {}
    for module in cli.COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register_cli(sub)
        for action in sub._choices_actions:
            registered[action.dest] = (module, action.help)
    assert registered == cli.COMMANDS
    full = cli.build_parser(full=True)
    steps = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert list(steps) == list(cli.COMMANDS)  # pipeline order in `bertlook --help`


def test_a_step_imports_only_its_own_cli_module():
    code = ("import sys; from bertlook import cli; cli.build_parser('probes'); "
            "print(','.join(m for m in cli.COMMAND_MODULES if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "bertlook.cli.probes"


def _section(path: Path, title: str) -> str:
    text = path.read_text(encoding="utf-8")
    assert title in text, f"{path.name} has no section {title!r}"
    return text.split(title, 1)[1].split("\n## ", 1)[0]


def _named(text: str, name: str) -> bool:
    """``name`` (a file or rule name) appears in ``text`` as a whole word; ``rule(_suffix)`` names both
    ``rule`` and ``rule_suffix``."""
    text = re.sub(r"(\w+)\((_\w+)\)", r"\1 \1\2", text)
    return re.search(r"(?<![\w/.-])%s(?![\w])" % re.escape(name), text) is not None


def test_design_module_map_names_every_module():
    """Every module outside analyses/ and cli/ is in DESIGN's module map (cli/ modules: the "Steps" table,
    test_step_names; analyses/: a step beyond the paper may document itself in docs/definitions.md), and
    every module the map names exists."""
    block = _section(ROOT / "docs" / "DESIGN.md", "## Modules").split("```")[1]
    modules = [p for p in sorted(PKG.rglob("*.py")) if p.name not in ("__init__.py", "__main__.py")]
    missing = [str(p.relative_to(PKG)) for p in modules
               if p.parent.name not in ("cli", "analyses") and not _named(block, p.name)]
    assert not missing, f"docs/DESIGN.md '## Modules' does not name: {', '.join(missing)}"
    named = {n for n in re.findall(r"\b(\w+\.py)\b", block) if not n.startswith("test_")}  # tests/ named in passing
    stale = sorted(named - {p.name for p in PKG.rglob("*.py")})
    assert not stale, f"docs/DESIGN.md '## Modules' names modules that do not exist: {', '.join(stale)}"


def test_layout_page_names_the_paper_steps_and_every_named_rule_file_exists():
    from bertlook.cli import declared_steps
    from bertlook.pipeline.steps import SUPPORT_RULES

    layout = _section(ROOT / "docs" / "development" / "layout.md", "# Layout")
    rules = sorted({s.rule_name for s in declared_steps() if not s.beyond} | set(SUPPORT_RULES))
    missing = [name for name in rules if not _named(layout, name)]
    assert not missing, f"docs/development/layout.md does not name: {', '.join(missing)}"
    smk = {p.stem for p in (ROOT / "workflow" / "rules").glob("*.smk")}
    stale = sorted(set(re.findall(r"\b(\w+)\.smk\b", layout)) - smk)
    assert not stale, f"docs/development/layout.md names rule files that do not exist: {', '.join(stale)}"


def test_the_layout_checks_can_fail():
    assert _named("surface_stats(_shard) -> x", "surface_stats") and not _named("surface_stats_norm", "surface_stats")
    assert not _named("analyses/heads.py", "heads") and _named("heads, tree_heads", "heads")
    assert _named("heads(_norm) ->", "heads_norm") and _named("heads(_norm) ->", "heads")
    assert not _named("heads(_shard) ->", "heads_norm")
