"""``bertlook surface-stats``: argparse glue, writing and printing of :mod:`bertlook.analyses.surface_stats`
(the table and the summary: :func:`~bertlook.analyses.surface_stats.run_surface_stats_step`)."""

from __future__ import annotations

import argparse
from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv, write_json
from bertlook.pipeline import costs
from bertlook.pipeline.sharding import save_partial
from bertlook.pipeline.steps import BEYOND, CONTRIBUTIONS_SUB, NORMS_SUB, GoldenTable, Page, RUN_TABLES, Step, table


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "surface-stats": "per-head attention to [CLS]/[SEP]/punctuation/self/prev/next and entropies (Figs 2, 4)",
}


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("surface_stats", (table("attention_stats.csv"),), maps=("attention",),
         pages=(Page(table("attention_stats.csv"), "attention_stats.html", "Tables",
                     "Surface statistics per head (Figures 2 and 4)", caption="attention_stats.rst",
                     subcategory=RUN_TABLES),), cost=costs.STATS_GATHER),
    Step("stats_norm", (table("attention_stats_norm.csv"),), rule="surface_stats", switch="norms",
         maps=("norm",), beyond=True, summary=table("attention_stats_norm.summary.json"),
         pages=(Page(table("attention_stats_norm.csv"), "attention_stats_norm.html", BEYOND,
                     "Surface statistics per head, norm-based maps", caption="attention_stats_norm.rst",
                     subcategory=NORMS_SUB),)),
    # ALTI per layer (Ferrando et al. 2022) read in the extraction stream (extract-segments --alti-stats-partial)
    Step("stats_alti", (table("attention_stats_alti.csv"),), rule="surface_stats", switch="contributions",
         maps=("alti",), beyond=True, summary=table("attention_stats_alti.summary.json"),
         pages=(Page(table("attention_stats_alti.csv"), "attention_stats_alti.html", BEYOND,
                     "Surface statistics per layer, ALTI (in the extraction stream)",
                     caption="attention_stats_alti.rst",
                     subcategory=CONTRIBUTIONS_SUB),),
         golden=(GoldenTable("attention_stats_alti", table("attention_stats_alti.csv"), ("layer", "head")),)),
)


def _run_stats(args: argparse.Namespace) -> int:
    from bertlook.analyses.surface_stats import PARTIAL_KIND, run_surface_stats_step, surface_stats_partial
    from bertlook.attention.store import open_store

    if bool(args.attention) == bool(args.partial):
        raise BertlookError("surface-stats: give --attention DIR or --partial NPZ ... (one of them)")
    if args.out_partial:
        if not args.attention:
            raise BertlookError("surface-stats: --out-partial needs --attention")
        meta, arrays = surface_stats_partial(open_store(args.attention), max_examples=args.max_examples,
                                             segments=args.segments)
        save_partial(args.out_partial, PARTIAL_KIND, meta, arrays)
        print(f"surface-stats: partial sums of {meta['n_examples']} of {meta['n_examples_in_store']} examples "
              f"-> {args.out_partial}")
        return 0
    if not (args.out and args.summary):
        raise BertlookError("surface-stats: give --out and --summary (or --out-partial)")
    if args.partial:
        frame, summary = run_surface_stats_step(partials=args.partial)
    else:
        frame, summary = run_surface_stats_step(args.attention, max_examples=args.max_examples,
                                                segments=args.segments)
    write_csv(args.out, frame)
    write_json(args.summary, summary)
    print(
        f"surface-stats: {summary['n_examples']} of {summary['n_examples_in_store']} examples, "
        f"{len(frame)} heads -> {args.out}, {args.summary}"
    )
    for what, count in summary["excluded_from_column"].items():
        if count:
            print(f"surface-stats: {count} example(s) left out of {what}")
    return 0


def register_cli(subparsers) -> None:
    """Add the ``surface-stats`` subcommand."""
    p = subparsers.add_parser(
        "surface-stats",
        help=COMMANDS["surface-stats"],
        description=(
            "Compute per-head surface statistics of an attention store. "
            "Input: --attention (attention store directory), or --partial (partial sums of the shards "
            "of a sharded extraction, from --out-partial). "
            "Outputs: --out (CSV, one row per head: layer,head,cls,sep,punct,self,prev,next,"
            "sep_sep,rest_sep,entropy,cls_entropy,max_attention,positional_offset,positional_fraction; "
            "columns: docs/definitions.md) and --summary (JSON: n_examples, uniform_entropy, "
            "mean_tokens, counts of examples left out of a column); or --out-partial (NPZ: sums and "
            "counts of one store, added up later with --partial)."
        ),
    )
    p.add_argument("--attention", default=None, metavar="DIR", help="input: attention store directory")
    p.add_argument("--partial", action="append", default=None, metavar="NPZ",
                   help="input: partial sums of a shard (repeatable, shard order) instead of --attention")
    p.add_argument("--out", default=None, metavar="CSV", help="output: per-head statistics (attention_stats.csv)")
    p.add_argument("--summary", default=None, metavar="JSON", help="output: summary JSON (summary.json)")
    p.add_argument("--out-partial", default=None, metavar="NPZ",
                   help="output: only the partial sums and counts of --attention (no table)")
    p.add_argument("--max-examples", type=int, default=None, metavar="N",
                   help="use only the first N segments of --segments (without it: the first N examples of the "
                        "store) (default: all)")
    p.add_argument("--segments", default=None, metavar="JSONL",
                   help="input: the segments file of the store, for --max-examples")
    p.set_defaults(func=_run_stats)
