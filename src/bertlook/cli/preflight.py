"""``bertlook validate-config``, ``bertlook runs`` and ``bertlook preflight``: configuration commands.

The checks live in :mod:`bertlook.pipeline.preflight`; this module holds the argparse glue and printing.
"""

from __future__ import annotations

import argparse
import sys

from bertlook.pipeline.config import load_config, run_names, syntax_run_names
from bertlook.pipeline.preflight import HOW_TO_FIX, Reach, preflight_problems


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "validate-config": "check a configuration file against the schema",
    "runs": "print the run names of a configuration, one per line",
    "preflight": "check that every model and corpus of a configuration can be reached",
}


def _validate(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    extra = syntax_run_names(config)
    print(f"{args.config}: valid; runs: {', '.join(run_names(config))}"
          + (f"; syntax runs (treebanks): {', '.join(extra)}" if extra else ""))
    return 0


def _runs(args: argparse.Namespace) -> int:
    print("\n".join(run_names(load_config(args.config))))
    return 0


def reach():
    """The real reachability checks of :func:`bertlook.pipeline.preflight.preflight_problems`: HTTP for
    URLs (:mod:`bertlook.data.download`), the hub or a local directory for models
    (:mod:`bertlook.attention.modeling`)."""
    from bertlook.attention.modeling import check_reachable_model
    from bertlook.data.download import check_reachable

    return Reach(url=check_reachable, model=check_reachable_model)


def _preflight(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    problems = preflight_problems(config, reach())
    if problems:
        print(f"error: {args.config}: cannot start, these inputs cannot be reached:", file=sys.stderr)
        for line in problems:
            print(f"  - {line}", file=sys.stderr)
        print(HOW_TO_FIX, file=sys.stderr)
        return 2
    print(f"{args.config}: every model and corpus is reachable")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "validate-config",
        help=COMMANDS["validate-config"],
        description="Input: CONFIG (YAML). Output: none; prints the run names or every invalid key.",
    )
    p.add_argument("config", help="configuration YAML (e.g. config.yaml, config/offline.yaml)")
    p.set_defaults(func=_validate)

    p = subparsers.add_parser(
        "runs",
        help=COMMANDS["runs"],
        description="Input: CONFIG (YAML). Output: run names ({run_name}-{label}) on stdout.",
    )
    p.add_argument("config")
    p.set_defaults(func=_runs)

    p = subparsers.add_parser(
        "preflight",
        help=COMMANDS["preflight"],
        description="Input: CONFIG (YAML). Output: none; exit 2 with what to set when a model or "
        "the Wikipedia dump cannot be reached (no network, missing local path).",
    )
    p.add_argument("config")
    p.set_defaults(func=_preflight)
