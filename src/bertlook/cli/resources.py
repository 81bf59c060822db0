"""CLI of :mod:`bertlook.reporting.resources`: ``resources`` (argparse glue and printing; the table is
computed by the reporting module)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path
from bertlook.pipeline import costs
from bertlook.pipeline.steps import Page, Step


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "resources": "per-rule measured resources (wall, CPU, RSS, I/O) of a run from its benchmark files",
}


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("resources", ("resources.csv", "resources.md"),
         pages=(Page("resources.md", "resources.html", "Resources", "Measured resources per job",
                     caption="resources.rst"),), cost=costs.SMALL),
)

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"resources_summary": costs.SMALL}


def _handler(args: argparse.Namespace) -> int:
    from bertlook.reporting.resources import benchmark_dir, resource_table, table_markdown, write_table_csv

    dirs = list(args.dirs or []) + list(args.run_dir or [])
    if not dirs:
        raise BertlookError("give at least one RUN_DIR (e.g. results/offline-minilm)")
    table = resource_table(dirs, exclude=args.exclude or (), by_rule=args.by_rule)
    sources = [str(benchmark_dir(d)[1]) for d in dirs if benchmark_dir(d)[1].is_dir()]
    text = table_markdown(table, sources)
    if args.out_csv:
        write_table_csv(args.out_csv, table)
    if args.out_markdown:
        with atomic_path(args.out_markdown) as tmp:
            Path(tmp).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "resources",
        help=COMMANDS["resources"],
        description=(
            "Input: RUN_DIR(s) (results/{run}, or any directory holding a benchmarks/ folder, or a "
            "benchmarks folder itself: e.g. the download cache's resources/benchmarks or the cross-model "
            "results/{run_name}-all-models). Reads every Snakemake benchmark file *.tsv there. Output: a "
            "table per rule (wall time, CPU time, mean load, max RSS/VMS/USS/PSS, I/O in/out) printed as "
            "Markdown, and with --out-csv / --out-markdown written to files. Exit 2 when no benchmark file "
            "is found or one is malformed."
        ),
    )
    p.add_argument("dirs", nargs="*", metavar="RUN_DIR", help="run directory (results/{run})")
    p.add_argument("--run-dir", action="append", metavar="DIR", help="another run directory (repeatable)")
    p.add_argument("--exclude", action="append", metavar="RULE", help="leave this rule out (repeatable)")
    p.add_argument("--by-rule", action="store_true",
                   help="one row per rule: jobs of the same rule (splits, shards) summed")
    p.add_argument("--out-csv", metavar="CSV", default=None, help="write the table as CSV")
    p.add_argument("--out-markdown", metavar="MD", default=None, help="write the table as Markdown")
    p.set_defaults(func=_handler)
