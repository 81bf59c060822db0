"""The package layout of issue 11: argparse glue only in bertlook.cli, computation elsewhere, and a
parser that builds without the heavy libraries."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "bertlook"
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
    assert loose == ["__init__.py", "__main__.py", "errors.py", "io_utils.py", "naming.py"], loose
    assert sorted(p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == sorted(STAGES)


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

    assert all(name.startswith("bertlook.cli.") for name in cli.STEP_MODULES)
    for name in cli.STEP_MODULES:
        path = PKG / "cli" / (name.rsplit(".", 1)[1] + ".py")
        tree = ast.parse(path.read_text())
        assert "register_cli" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, name


def test_building_the_parser_loads_no_heavy_library():
    code = ("import sys; from bertlook import cli; cli.build_parser(); "
            "print(','.join(m for m in ('torch', 'transformers', 'pandas', 'matplotlib', 'scipy', 'sklearn', "
            "'spacy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
