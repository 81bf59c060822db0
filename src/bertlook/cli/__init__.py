"""``bertlook <step> ...``: every pipeline step as a command-line subcommand.

One module per step in this package (``bertlook.cli.<step>``) holds ``COMMANDS`` (a literal: its
subcommands and their help lines, read here without importing the module), ``STEPS`` (the step
declarations of :mod:`bertlook.pipeline.steps` that the workflow, the report and the regression gate read;
:func:`declared_steps`) and ``register_cli(subparsers)`` with the step's argparse glue: its handler calls
the stage packages (which compute the tables and the summary), writes the files and prints. A new module is found without a line here
(docs/ADDING_A_STEP.md). Handlers return an exit code. User errors
(:class:`bertlook.errors.BertlookError`) print ``error: ...`` and exit 2 without a traceback.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bertlook import __version__
from bertlook.errors import BertlookError
from bertlook.pipeline.steps import Step, check_steps, rule_costs

if TYPE_CHECKING:
    from bertlook.pipeline.costs import Cost

#: The CLI modules in pipeline order (the order of ``bertlook --help`` and of :func:`declared_steps`); a
#: module of this package not named here (a new step's) comes after them, in name order.
ORDER = ("plan", "preflight", "download", "fetch", "segments", "extract_segments", "treebank", "extract_words",
         "surface_stats", "cluster_heads", "figures", "heads", "tree_heads", "random_init", "probes",
         "probe_ablations", "coref", "gradients", "head_detectors", "rollout", "contributions", "faithfulness", "head_report", "explorer", "languages", "manifest", "compare",
         "resources", "report_pages", "atlas")


def _literal_assignment(tree: ast.Module, name: str) -> ast.expr | None:
    """The value of the module-level assignment ``name = ...`` of ``tree``, if any."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
    return None


def _module_paths() -> list[Path]:
    """This package's CLI modules (not ``__init__`` nor a private ``_x`` helper), in :data:`ORDER`."""
    paths = [p for p in Path(__file__).parent.glob("*.py") if not p.name.startswith("_")]
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(paths, key=lambda p: (rank.get(p.stem, len(rank)), p.stem))


def discover_commands() -> dict[str, tuple[str, str]]:
    """``{subcommand: (module, help line)}`` of every CLI module, read from the module's ``COMMANDS``
    literal (``{"name": "help", ...}``) without importing it. A module without ``COMMANDS`` registers
    nothing (a helper such as ``sharding``); a command named twice is an error."""
    found: dict[str, tuple[str, str]] = {}
    for path in _module_paths():
        node = _literal_assignment(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "COMMANDS")
        if node is None:
            continue
        module = f"{__name__}.{path.stem}"
        for name, help_text in ast.literal_eval(node).items():
            if name in found:
                raise RuntimeError(f"{path}: command {name!r} is registered by {found[name][0]} too")
            found[name] = (module, help_text)
    return found


#: The lazy registry: subcommand -> (module that registers it, one-line help), in pipeline order.
#: ``bertlook --help`` lists these without importing any step module; ``bertlook STEP ...`` imports
#: only STEP's module (whose computation modules import numpy/pandas/torch at the top).
#: tests/test_layout.py checks that each module registers exactly its names with the same help.
COMMANDS: dict[str, tuple[str, str]] = discover_commands()

#: Modules registering subcommands, in pipeline order.
COMMAND_MODULES = list(dict.fromkeys(module for module, _ in COMMANDS.values()))


@functools.lru_cache(maxsize=None)
def _declaring_modules() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The CLI modules that assign ``STEPS`` and those that assign ``COSTS``, in :data:`ORDER`: each module's
    source is parsed once for both (the DAG build asks for the steps and for the costs)."""
    steps, costs = [], []
    for path in _module_paths():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = f"{__name__}.{path.stem}"
        if _literal_assignment(tree, "STEPS") is not None:
            steps.append(module)
        if _literal_assignment(tree, "COSTS") is not None:
            costs.append(module)
    return tuple(steps), tuple(costs)


@functools.lru_cache(maxsize=None)
def declared_steps() -> tuple[Step, ...]:
    """Every step of a run (:class:`bertlook.pipeline.steps.Step`), from the ``STEPS`` tuple of the CLI
    modules that declare one, the paper's first, then those beyond the paper, each in :data:`ORDER`.
    Only those modules are imported (their top-level imports are light: the DAG build calls this)."""
    found = [step for module in _declaring_modules()[0] for step in importlib.import_module(module).STEPS]
    return check_steps([s for s in found if not s.beyond] + [s for s in found if s.beyond])


@functools.lru_cache(maxsize=None)
def declared_costs() -> dict[str, Cost]:
    """``{rule: its cost}`` (:class:`bertlook.pipeline.costs.Cost`) of every rule of the workflow: the costs of the
    :func:`declared_steps` and the ``COSTS`` tables of the CLI modules (the rules without a step of their own),
    read by :mod:`bertlook.pipeline.sizing`; a rule declared twice is an error."""
    tables = [importlib.import_module(module).COSTS for module in _declaring_modules()[1]]
    return rule_costs(declared_steps(), tables)


def requested_step(argv: list[str] | None) -> str | None:
    """The subcommand named in ``argv`` (the first argument that is not an option), if any."""
    return next((a for a in (argv or []) if not a.startswith("-")), None)


def build_parser(step: str | None = None, *, full: bool = False) -> argparse.ArgumentParser:
    """The ``bertlook`` parser. Only ``step``'s module is imported (all of them with ``full``); every
    other subcommand is a stub with its help line, enough for ``bertlook --help``."""
    parser = argparse.ArgumentParser(
        prog="bertlook",
        description="Re-run 'What Does BERT Look At?' (Clark et al., 2019) step by step. "
        "Each subcommand is one pipeline step; `bertlook STEP --help` lists its inputs and outputs.",
    )
    parser.add_argument("--version", action="version", version=f"bertlook {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="step", metavar="STEP")
    load = set(COMMAND_MODULES) if full else {COMMANDS[step][0]} if step in COMMANDS else set()
    for name, (module, help_text) in COMMANDS.items():
        if name in sub.choices:
            continue  # registered with its module
        if module in load:
            importlib.import_module(module).register_cli(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def _close_progress_bars() -> None:
    """Finish the progress bars of a failed step, so its ``error:`` line starts a line of the log."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", None) or ()):
        bar.close()


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(requested_step(argv))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except BertlookError as err:
        _close_progress_bars()
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
