"""``bertlook explorer``: argparse glue and files of :mod:`bertlook.reporting.explorer`."""

from __future__ import annotations

import argparse

from bertlook.cli._args import add_step_parser
from bertlook.errors import BertlookError
from bertlook.io_utils import write_json, write_text
from bertlook.pipeline import costs
from bertlook.pipeline.steps import BEYOND, CARD_SUB, Page, Step
from bertlook.reporting.run_files import read_json_file

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "explorer": "the head explorer: one self-contained HTML page about every head of a run",
}

#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("explorer", ("explorer.html", "explorer.json"), switch="explorer", beyond=True, cost=costs.PLOT_GATHER,
         needs=("head_report",),
         pages=(Page("explorer.html", "explorer.html", BEYOND,
                     "Head explorer: every head's card, relations and maps (interactive)", caption="explorer.rst",
                     subcategory=CARD_SUB),)),
)

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"explorer_sample": costs.PLOT_GATHER, "explorer_models": costs.PLOT_GATHER}

_DESCRIPTION = """\
The head explorer: results/{run}/explorer.html, one page that opens from disk (no server, no network, no
library): a layer x head grid coloured by a chosen metric (behaviour, entropy, [CLS]/sink and [SEP] shares,
best relation accuracy, importance, positional fraction, previous-token and induction scores, the norm-based /
attention ratio of the [CLS] share), and, for the head clicked or reached with the arrow keys, its report card,
its relations with accuracy, a 95% interval, word counts and the relation's offset baseline, and its nearest
heads in the MDS embedding of the clustering.
Numbers come from the run's tables (only a relation's Wilson interval is computed, from its accuracy and word
count); nothing is recomputed from maps.

Two steps: `--sample-out JSON` reads the first short dev sentences of the word store(s) (their maps quantised to
8 bits, with the norm-based maps and the rollout), so the temporary stores can go; the page then embeds it.

sample inputs (with --sample-out):
  --dev-attention DIR   the dev word store (attention/words-dev)
  --norm-attention DIR  optional: the norm-based dev word store (attention/normwords-dev)
  --contributions NPZ   optional: the contributions step's explorer maps (partials/contribution_explorer.npz):
                        ALTI per head, ALTI over layers and value zeroing of the same sentences, joined by id
  --segment-example NPZ [NPZ ...]
                        optional: every shard's Fig 1 example (partials/fig1-*.npz of extract-segments): windows
                        of at most 30 tokens of that segment are drawn too
page inputs:
  --sample JSON         optional: the sample (maps of short sentences, drawn as lines and heatmaps)
  --head-report CSV     head_report.csv (head-report)
  --head-accuracy CSV   head_accuracy.csv (heads)
  --table1 CSV          optional: table1.csv (heads: each relation's offset baseline, shown beside a head's)
  --clusters CSV        head_clusters.csv (cluster-heads: the MDS embedding)
  --stats CSV           attention_stats.csv (surface-stats: the [SEP] share)
  --norm-stats CSV      optional: attention_stats_norm.csv (the norm-based / attention ratio)
output:
  --out HTML            explorer.html
  --out-data JSON       optional: explorer.json, the page's data (tables and maps as JSON)

side by side (a fan-out's runs, results/{name}-all-models/explorer.html):
  --side-by-side JSON [JSON ...]
                        the runs' explorer.json; the page has two panes, each with a model menu (the first
                        and the second run at first), the same head and example selected in both unless
                        unlinked
  --title TEXT          the page's title
  --out HTML            the page

Definitions: docs/definitions.md#head-explorer.
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``explorer`` subcommand."""
    p = add_step_parser(subparsers, "explorer", COMMANDS["explorer"], _DESCRIPTION)
    p.add_argument("--sample-out", default=None, metavar="JSON", help="output: the sample of maps (sample step)")
    p.add_argument("--dev-attention", default=None, metavar="DIR", help="input of the sample: the dev word store")
    p.add_argument("--norm-attention", default=None, metavar="DIR", help="input of the sample: the norm-based one")
    p.add_argument("--contributions", default=None, metavar="NPZ",
                   help="input of the sample: the contributions step's explorer maps (ALTI, value zeroing)")
    # extend: the workflow passes a list as the flag once per item (pipeline.shellcmd.flag_tokens)
    p.add_argument("--segment-example", action="extend", nargs="+", default=None, metavar="NPZ",
                   help="input of the sample (optional): every shard's Fig 1 example file")
    p.add_argument("--sample", default=None, metavar="JSON", help="input (optional): the sample of maps")
    p.add_argument("--head-report", default=None, metavar="CSV", help="input: head_report.csv")
    p.add_argument("--head-accuracy", default=None, metavar="CSV", help="input: head_accuracy.csv")
    p.add_argument("--table1", default=None, metavar="CSV", help="input (optional): table1.csv (offset baselines)")
    p.add_argument("--clusters", default=None, metavar="CSV", help="input: head_clusters.csv")
    p.add_argument("--stats", default=None, metavar="CSV", help="input: attention_stats.csv")
    p.add_argument("--norm-stats", default=None, metavar="CSV", help="input (optional): attention_stats_norm.csv")
    p.add_argument("--run", default=None, metavar="NAME", help="the run's name, in the page's title")
    p.add_argument("--out", default=None, metavar="HTML", help="output: explorer.html")
    p.add_argument("--out-data", default=None, metavar="JSON",
                   help="output (optional): the page's data (explorer.json: read by --side-by-side)")
    p.add_argument("--side-by-side", action="extend", nargs="+", default=None, metavar="JSON",
                   help="several runs' explorer.json: one page with two panes, each showing any of them")
    p.add_argument("--title", default=None, metavar="TEXT", help="the side-by-side page's title (the fan-out)")
    p.set_defaults(func=_run)
    return p


def _run(args: argparse.Namespace) -> int:
    if args.sample_out:
        return _sample(args)
    if args.side_by_side:
        return _side_by_side(args)
    return _page(args)


def _sample(args: argparse.Namespace) -> int:
    from bertlook.reporting.explorer import explorer_sample

    if not args.dev_attention:
        raise BertlookError("explorer: --sample-out needs --dev-attention DIR")
    sample = explorer_sample(args.dev_attention, args.norm_attention, segment_examples=args.segment_example,
                             contributions=args.contributions)
    write_json(args.sample_out, sample)
    windows = sum(s.get("kind") == "segment" for s in sample["sentences"])
    print(f"explorer: {len(sample['sentences']) - windows} sentences' and {windows} segment windows' maps "
          f"-> {args.sample_out}")
    return 0


def _write_page(data, out: str, what: str) -> None:
    from bertlook.reporting.explorer import explorer_html

    html = explorer_html(data)
    write_text(out, html)
    print(f"explorer: {what}, {len(html.encode('utf-8')) / 1024:.0f} KiB -> {out}")


def _page(args: argparse.Namespace) -> int:
    from bertlook.reporting.explorer import explorer_data

    missing = [f"--{n.replace('_', '-')}" for n in ("head_report", "head_accuracy", "clusters", "stats", "run", "out")
               if not getattr(args, n)]
    if missing:
        raise BertlookError(f"explorer: the page needs {', '.join(missing)} (or --sample-out for the sample, "
                            "--side-by-side for several runs)")
    sample = read_json_file(args.sample, "explorer sample") if args.sample else None
    data = explorer_data(args.head_report, args.head_accuracy, args.clusters, args.stats, args.norm_stats,
                         run=args.run, sample=sample, table1=args.table1)
    if args.out_data:
        write_json(args.out_data, data)
    _write_page(data, args.out, f"{len(data['heads'])} heads ({data['num_layers']} x {data['num_heads']}), "
                f"{len(data['metrics'])} metrics, {len(data['sentences'])} examples' maps")
    return 0


def _side_by_side(args: argparse.Namespace) -> int:
    from bertlook.reporting.explorer import side_by_side

    if not args.out or not args.title:
        raise BertlookError("explorer: --side-by-side needs --title and --out")
    models = [read_json_file(path, "head explorer data") for path in args.side_by_side]
    data = side_by_side(models, title=args.title, where=list(args.side_by_side))
    _write_page(data, args.out, f"{len(models)} runs side by side ({', '.join(m['run'] for m in models)})")
    return 0
