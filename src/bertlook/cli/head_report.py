"""``bertlook head-report``: argparse glue, summary and printing of :mod:`bertlook.analyses.head_report`."""

from __future__ import annotations

import argparse
from bertlook.cli._args import add_step_parser
from bertlook.io_utils import write_csv, write_json
from bertlook.pipeline import costs
from bertlook.pipeline.steps import BEYOND, CARD_SUB, GoldenTable, Page, Step, figure, figure_page, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "head-report": "per-head report card: importance, confidence, positional, sink, entropy, behaviour, best relation, detectors",
}



#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("head_report", (table("head_report.csv"), figure("fig_head_report.png")), switch="head_report", beyond=True,
         summary=table("head_report.summary.json"),
         pages=(Page(table("head_report.csv"), "head_report.html", BEYOND, "Per-head report card (table)",
                     caption="head_report.rst", subcategory=CARD_SUB),
                figure_page("fig_head_report.png", BEYOND, "Per-head report card (figure)",
                            caption="fig_head_report.rst", subcategory=CARD_SUB)),
         cost=costs.PLOT_GATHER,
         golden=(GoldenTable("head_report", table("head_report.csv"), ("layer", "head")),)),
)


_DESCRIPTION = """\
One row per head joining the per-head tables of earlier steps (nothing is recomputed from the maps).

inputs:
  --stats CSV          attention_stats.csv (surface-stats): max_attention -> confidence, cls -> sink,
                       entropy, positional_offset, positional_fraction
  --clusters CSV       head_clusters.csv (cluster-heads): behavior -> behaviour
  --head-accuracy CSV  head_accuracy.csv (heads): best relation (not "All") over both directions among
                       relations with >= --min-count words
  --coref-heads CSV    optional: coref_heads.csv (coref): all -> coref_accuracy (a "not run" table or
                       no flag: empty column, the summary says why)
  --importance CSV     optional: head_importance.csv (gradients --out-importance): importance
                       (Michel et al. 2019; "not run" or absent: empty column, the summary says why)
  --detectors CSV      optional: head_detectors.csv (head-detectors): prev_token, duplicate_token,
                       induction (absent: empty columns, the summary says why)
  --contribution-heads CSV  optional: contribution_heads.csv (contributions): the per-head ALTI share of the
                       first token -> alti_sink, of [SEP] -> alti_sep (rows of kind alti_heads)
  --head-ablation CSV  optional: head_ablation.csv (faithfulness): loss_change -> ablation_loss (a "not run"
                       table: empty column, the summary says why)

outputs:
  --out CSV            head_report.csv: layer,head,importance,confidence,positional_offset,
                       positional_fraction,positional,sink,sink_head,entropy,behaviour,best_relation,
                       best_direction,best_accuracy,coref_accuracy,prev_token,duplicate_token,induction,
                       alti_sink,alti_sep,ablation_loss
  --summary JSON       counts (positional heads, sink heads, behaviours, best relations), thresholds,
                       relations considered / below --min-count, status of the optional inputs
  --out-figure PNG     one layer x head heatmap per numeric column

Definitions: docs/definitions.md#per-head-report-card.
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``head-report`` subcommand."""
    p = add_step_parser(subparsers, "head-report", COMMANDS["head-report"], _DESCRIPTION)
    p.add_argument("--stats", required=True, metavar="CSV", help="input: attention_stats.csv")
    p.add_argument("--clusters", required=True, metavar="CSV", help="input: head_clusters.csv")
    p.add_argument("--head-accuracy", required=True, metavar="CSV", help="input: head_accuracy.csv")
    p.add_argument("--coref-heads", default=None, metavar="CSV", help="input (optional): coref_heads.csv")
    p.add_argument("--importance", default=None, metavar="CSV", help="input (optional): head_importance.csv")
    p.add_argument("--detectors", default=None, metavar="CSV", help="input (optional): head_detectors.csv")
    p.add_argument("--contribution-heads", default=None, metavar="CSV",
                   help="input (optional): contribution_heads.csv (contributions): ALTI per head -> alti_sink, alti_sep")
    p.add_argument("--head-ablation", default=None, metavar="CSV",
                   help="input (optional): head_ablation.csv (faithfulness): loss_change -> ablation_loss")
    p.add_argument("--out", required=True, metavar="CSV", help="output: head_report.csv")
    p.add_argument("--summary", required=True, metavar="JSON", help="output: summary JSON")
    p.add_argument("--out-figure", required=True, metavar="PNG", help="output: fig_head_report.png")
    p.add_argument("--min-count", type=int, default=100, metavar="N",
                   help="best relation among relations with at least N words (default 100, as Table 1)")
    p.set_defaults(func=_run)
    return p


def _run(args: argparse.Namespace) -> int:
    from bertlook.analyses.head_report import build_head_report
    from bertlook.reporting.extra_figures import fig_head_report

    frame, summary = build_head_report(args.stats, args.clusters, args.head_accuracy,
                                       coref_heads_csv=args.coref_heads, importance_csv=args.importance,
                                       detectors_csv=args.detectors, contribution_heads_csv=args.contribution_heads,
                                       head_ablation_csv=args.head_ablation, min_count=args.min_count)
    write_csv(args.out, frame)
    fig_head_report(args.out, args.out_figure)
    write_json(args.summary, summary)
    print(f"head-report: {summary['n_heads']} heads ({summary['num_layers']} x {summary['num_heads']}); "
          f"{summary['positional_heads']} positional, {summary['sink_heads']} sink heads; "
          f"{len(summary['relations_considered'])} relations with >= {summary['min_count']} words "
          f"({len(summary['relations_below_min_count'])} below, left out); "
          f"-> {args.out}, {args.out_figure}, {args.summary}")
    if summary["heads_without_best_relation"]:
        print(f"head-report: {summary['heads_without_best_relation']} head(s) without a best relation")
    for what in ("importance", "coref", "detectors", "alti", "ablation"):
        if summary[what] != "ok":
            print(f"head-report: {what}: {summary[what]} (column left empty)")
    return 0
