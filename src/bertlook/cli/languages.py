"""``bertlook languages``: argparse glue, summary and printing of :mod:`bertlook.analyses.languages`."""

from __future__ import annotations

import argparse

from bertlook.cli._args import add_step_parser
from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv, write_json, write_text
from bertlook.pipeline import costs

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "languages": "cross-language summary: each relation's best head per treebank and whether the treebanks share them",
}

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"languages": costs.PLOT_GATHER}



_DESCRIPTION = """\
One model, several treebanks (usually one per language): do the same heads track the same relations?
(Ravishankar et al. 2021, "Attention Can Reflect Syntactic Structure (If You Let It)".) Nothing is
recomputed from the maps: the inputs are the `heads` step's head_accuracy.csv of each treebank.

inputs (each of the three repeated, the same number of times, in the same order; at least 2):
  --head-accuracy CSV  head_accuracy.csv (heads) of one treebank
  --label L            the treebank's label (unique), e.g. de_gsd
  --language X         its language code, e.g. de

outputs:
  --out-best CSV       relation,direction,treebank,best_head,accuracy,runner_up_head,runner_up_accuracy,count
  --out-agreement CSV  relation,direction,n_treebanks,treebanks,same_best_head,n_distinct_best_heads,
                       modal_best_head,modal_count,mean_spearman,n_spearman_pairs,transfer,n_transfer_pairs
  --out-markdown MD    the table with a short explanation of the columns
  --out-figure PNG     relations x treebanks heatmap per direction (best head, accuracy, shared or not)
  --summary JSON       per treebank: language, relations scored / below --min-count / skipped; relations
                       in one treebank only; headline numbers per direction

Relations with fewer than --min-count words in a treebank are left out there (listed in the summary);
root and punctuation are never scored. --base-relations merges UD subtypes (nsubj:pass -> nsubj),
recombining correct = round(accuracy * count) per head.

Definitions: docs/definitions.md#cross-language-summary.
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``languages`` subcommand."""
    p = add_step_parser(subparsers, "languages", COMMANDS["languages"], _DESCRIPTION)
    p.add_argument("--head-accuracy", action="append", required=True, metavar="CSV",
                   help="input: head_accuracy.csv of one treebank (repeat per treebank)")
    p.add_argument("--label", action="append", required=True, metavar="L",
                   help="label of that treebank (repeat, same order)")
    p.add_argument("--language", action="append", required=True, metavar="X",
                   help="language code of that treebank (repeat, same order)")
    p.add_argument("--min-count", type=int, default=100, metavar="N",
                   help="compare a relation in a treebank with at least N words (default 100, as Table 1)")
    p.add_argument("--base-relations", action="store_true",
                   help="merge UD subtypes into their base relation (nsubj:pass -> nsubj) before comparing")
    p.add_argument("--out-best", required=True, metavar="CSV", help="output: best head per relation and treebank")
    p.add_argument("--out-agreement", required=True, metavar="CSV", help="output: agreement per relation")
    p.add_argument("--out-markdown", required=True, metavar="MD", help="output: markdown table")
    p.add_argument("--out-figure", required=True, metavar="PNG", help="output: heatmap")
    p.add_argument("--summary", required=True, metavar="JSON", help="output: summary JSON")
    p.set_defaults(func=_run)
    return p


def _check_repeats(args: argparse.Namespace) -> None:
    n = {"--head-accuracy": len(args.head_accuracy), "--label": len(args.label), "--language": len(args.language)}
    if len(set(n.values())) != 1:
        raise BertlookError("--head-accuracy, --label and --language must be given the same number of times "
                            f"(one each per treebank), got {', '.join(f'{k} x{v}' for k, v in n.items())}")
    labels = [s.strip() for s in args.label]
    if any(not s for s in labels):
        raise BertlookError("--label: empty treebank label")
    dups = sorted({s for s in labels if labels.count(s) > 1})
    if dups:
        raise BertlookError(f"--label: duplicate treebank label(s) {', '.join(dups)} (one label per treebank)")
    if len(labels) < 2:
        raise BertlookError(f"a cross-language summary needs at least 2 treebanks, got {len(labels)}")
    if args.min_count < 0:
        raise BertlookError(f"--min-count must be >= 0, got {args.min_count}")


def _run(args: argparse.Namespace) -> int:
    from bertlook.analyses.languages import (agreement, base_relations, base_relations_info, best_heads,
                                             languages_summary, load_head_accuracy)
    from bertlook.reporting.extra_figures import fig_languages
    from bertlook.reporting.tables import languages_markdown

    _check_repeats(args)
    labels = [s.strip() for s in args.label]
    languages = [s.strip() for s in args.language]
    frames = {lab: load_head_accuracy(path) for lab, path in zip(labels, args.head_accuracy)}
    infos = None
    if args.base_relations:
        infos = {lab: base_relations_info(f) for lab, f in frames.items()}
        frames = {lab: base_relations(f) for lab, f in frames.items()}
    best = best_heads(frames, min_count=args.min_count)
    agree = agreement(frames, min_count=args.min_count)
    summary = languages_summary(frames, best, agree, languages=dict(zip(labels, languages)),
                                min_count=args.min_count, inputs=dict(zip(labels, args.head_accuracy)),
                                base_relations_infos=infos)
    if best.empty:
        from bertlook.errors import BertlookError

        raise BertlookError(f"no relation has at least {args.min_count} words in any treebank: nothing to compare")
    write_csv(args.out_best, best)
    write_csv(args.out_agreement, agree)
    write_text(args.out_markdown, languages_markdown(best, agree, labels, languages, min_count=args.min_count,
                                                     base_relations=args.base_relations))
    fig_languages(best, agree, args.out_figure)
    write_json(args.summary, summary)
    below = sum(t["n_relations_below_min_count"] for t in summary["treebanks"].values())
    print(f"languages: {summary['n_treebanks']} treebanks ({', '.join(labels)}); "
          f"{summary['n_relations_compared']} relations compared in >= 2 treebanks, "
          f"{summary['n_relations_in_one_treebank']} in one only; {below} (treebank, relation) pair(s) below "
          f"{args.min_count} words, left out; -> {args.out_best}, {args.out_agreement}, {args.out_markdown}, "
          f"{args.out_figure}, {args.summary}")
    for lab, info in (infos or {}).items():
        if info["max_rounding_residual"] > 0.1:
            print(f"languages: warning: {lab}: accuracy * count is up to {info['max_rounding_residual']:.2f} words "
                  "from a whole number: the merged subtype accuracies are approximate")
    for direction, h in summary["headline"].items():
        if h["n_relations"]:
            print(f"languages: {direction}: same best head in {h['n_same_best_head']} of {h['n_relations']} "
                  f"relations")
    return 0
