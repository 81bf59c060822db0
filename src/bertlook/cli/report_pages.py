"""CLI of :mod:`bertlook.reporting.report_pages`: ``report-pages`` (argparse glue and printing; the
pages are rendered by the reporting module)."""

from __future__ import annotations

import argparse

from bertlook.cli._args import add_step_parser
from bertlook.errors import BertlookError
from bertlook.pipeline import costs

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "report-pages": "the HTML report's pages: tables as HTML (percents), figures as page-sized PNGs",
}

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = dict.fromkeys(("report_pages", "report_pages_syntax", "report_pages_summary"), costs.SMALL)


_HELP = """\
Write the pages of the HTML report (`snakemake --report`): each --source with its --page, in order.

  --source X.md   a Markdown table of a bertlook step (table1.md, comparison.md, ...) -> --page X.html
  --source X.csv  a table with no Markdown twin (attention_stats.csv, head_accuracy.csv, ...) -> --page
                  X.html, each column formatted by the table's name (fractions as percents, one decimal)
  --source X.png  a figure -> --page X.png, at most 1600 pixels wide, 256-colour palette

The sources are not changed (the CSVs keep full precision, the figures full resolution).
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    p = add_step_parser(subparsers, "report-pages", COMMANDS["report-pages"], _HELP)
    p.add_argument("--source", action="append", default=[], metavar="FILE",
                   help="input: a .md or .csv table, or a .png figure (repeatable)")
    p.add_argument("--page", action="append", default=[], metavar="FILE",
                   help="output: the page of the --source at the same position (.html, or .png for a figure)")
    p.set_defaults(func=_cli_report_pages)
    return p


def _cli_report_pages(args: argparse.Namespace) -> int:
    from bertlook.reporting.report_pages import write_page

    if not args.source:
        raise BertlookError("report-pages: give at least one --source FILE --page FILE pair")
    if len(args.source) != len(args.page):
        raise BertlookError(f"report-pages: {len(args.source)} --source but {len(args.page)} --page "
                            "(one page per source, in the same order)")
    if len(set(args.page)) != len(args.page):
        raise BertlookError("report-pages: a --page is given twice")
    for source, page in zip(args.source, args.page):
        print(f"report-pages: {write_page(source, page)}")
    return 0
