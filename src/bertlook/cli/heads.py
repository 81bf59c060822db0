"""``bertlook heads``: argparse glue, files and printing of :func:`bertlook.analyses.heads_step.run_heads`."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertlook.cli._args import add_step_parser, offsets_arg, table1_scoring
from bertlook.io_utils import write_csv_full, write_json, write_text
from bertlook.pipeline import costs
from bertlook.pipeline.steps import BEYOND, NORMS_SUB, Page, RUN_TABLES, Step, TWIN_TABLES, figure, figure_page, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "heads": "per-head dependency accuracy, Table 1 twin (best head per relation vs offset baselines), Fig 5 twin",
}


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("heads", (table("head_accuracy.csv"), table("table1.csv"), table("table1.md"),
                   figure("fig5_syntax_heads.png")),
         maps=("attention",), syntax=True,
         pages=(Page(table("table1.md"), "table1.html", "Tables", "Table 1 twin: single heads vs dependency relations",
                     caption="table1.rst", subcategory=TWIN_TABLES),
                Page(table("head_accuracy.csv"), "head_accuracy.html", "Tables",
                     "Accuracy of every head per relation (Table 1, Figure 5)", caption="head_accuracy.rst",
                     subcategory=RUN_TABLES),
                figure_page("fig5_syntax_heads.png", "Figures", "Figure 5 twin: heads for dependency relations",
                            caption="fig5_syntax_heads.rst")),
         cost=costs.STORE_READER),
    Step("heads_norm", (table("table1_norm.csv"), table("table1_norm.md")), rule="heads", switch="norms",
         maps=("norm",), beyond=True, summary=table("head_accuracy_norm.summary.json"),
         pages=(Page(table("table1_norm.md"), "table1_norm.html", BEYOND, "Table 1 on the norm-based maps",
                     caption="table1_norm.rst", subcategory=NORMS_SUB),
                figure_page("fig5_syntax_heads_norm.png", BEYOND, "Figure 5 twin on the norm-based maps",
                            caption="fig5_syntax_heads_norm.rst", subcategory=NORMS_SUB))),
)


_HELP = """\
Accuracy of every attention head at predicting dependency heads (twin of Table 1 of Clark et al.
2019) and the Fig 5 twin (the best det / dobj / pobj heads on a sentence).

inputs:
  --dev-attention DIR     word-level attention store with gold trees (heads, rels, xpos per record);
                          heads are chosen and scored on it, as in the paper
  --train-attention DIR   optional word-level store of the train split: adds a held-out choice
                          (head chosen on train, scored on dev)

outputs:
  --out-accuracy CSV      every head x relation x direction: relation,layer,head,direction,accuracy,count
  --out-table CSV         Table 1 twin: best head, accuracy, bootstrap CI, best offset baseline, count,
                          held-out and paper columns (accuracies as fractions 0..1); then, beyond the
                          paper: the 2-fold cross-fitted head choice on dev, paired tests of the best
                          head vs the best offset baseline and vs the runner-up head (exact McNemar,
                          bootstrap CI of the difference, Holm across rows), and the best head with
                          punctuation excluded from the candidates (nopunct_*)
  --out-markdown MD       the same as a markdown table (percent, 1 decimal)
  --out-figure PNG        Fig 5 twin
  --summary JSON          counts (sentences, words, relations, poss words switched, rows shown/skipped)
"""


def register_cli(subparsers) -> None:
    """Add the ``heads`` subcommand."""
    from bertlook.analyses.heads import DEFAULT_OFFSETS, TREEBANK_KINDS

    p = add_step_parser(subparsers, "heads", COMMANDS["heads"], _HELP)
    p.add_argument("--dev-attention", required=True, metavar="DIR", help="input: word-level dev attention store")
    p.add_argument("--train-attention", metavar="DIR", default=None,
                   help="input: word-level train attention store (held-out head choice; optional)")
    p.add_argument("--out-accuracy", required=True, metavar="CSV", help="output: head_accuracy.csv")
    p.add_argument("--out-table", required=True, metavar="CSV", help="output: table1.csv")
    p.add_argument("--out-markdown", required=True, metavar="MD", help="output: table1.md")
    p.add_argument("--out-figure", required=True, metavar="PNG", help="output: fig5_syntax_heads.png")
    p.add_argument("--summary", required=True, metavar="JSON", help="output: summary JSON")
    p.add_argument("--min-count", type=int, default=100,
                   help="relations with fewer words are not rows (except dobj, det, pobj; default 100)")
    p.add_argument("--offsets", type=offsets_arg, default=DEFAULT_OFFSETS, metavar="K,K,...",
                   help="baseline offsets (default -3,-2,-1,1,2,3; released code: -3,-2,-1,1,2)")
    p.add_argument("--poss-from-possessive", action=argparse.BooleanOptionalAction, default=True,
                   help="score a poss word with the prediction made from the following 's (default: on, as "
                   "the released code)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates over sentences (0 = no CI; default 1000)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the bootstrap and of the cross-fitting folds (default 0)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level of the Holm-adjusted paired tests (default 0.05)")
    p.add_argument("--exclude-punct-candidates", action="store_true",
                   help="punctuation words (relation punct / P or UPOS PUNCT) are never predicted as heads in "
                   "the main columns, head_accuracy.csv and Fig 5 (default: every word is a candidate; the "
                   "nopunct_* columns always show the other choice)")
    p.add_argument("--max-examples", type=int, default=None, metavar="N",
                   help="use only the first N sentences of each store (default: all)")
    p.add_argument("--treebank-kind", choices=sorted(TREEBANK_KINDS), default=None,
                   help="where the trees come from: ptb_sd (gold PTB, Stanford Dependencies), ud (gold UD), "
                   "silver (spaCy parses, ClearNLP labels); default: the store's meta 'treebank_kind'")
    p.add_argument("--treebank-name", default=None, metavar="NAME",
                   help="treebank / parser name for the notes (default: the store's meta 'treebank_name')")
    p.add_argument("--paper-comparable", action="store_true",
                   help="the run is comparable to the paper (bert-base-uncased on PTB SD dev): add ours-minus-paper")
    p.set_defaults(func=_run_heads)


def _run_heads(args: argparse.Namespace) -> int:
    from bertlook.analyses.heads import FORCED_BY_SCHEME
    from bertlook.analyses.heads_step import HeadsOptions, run_heads
    from bertlook.reporting.paper_join import join_table1
    from bertlook.reporting.example_figures import fig5_relations, fig5_syntax_heads
    from bertlook.reporting.tables import table1_markdown, trees_note

    options = HeadsOptions(
        **table1_scoring(args), alpha=args.alpha, exclude_punct_candidates=args.exclude_punct_candidates,
        max_examples=args.max_examples, treebank_kind=args.treebank_kind, treebank_name=args.treebank_name,
        paper_comparable=args.paper_comparable,
    )
    outputs = {"accuracy": args.out_accuracy, "table": args.out_table, "markdown": args.out_markdown,
               "figure": args.out_figure}
    result = run_heads(args.dev_attention, args.train_attention, options, outputs=outputs, log=print)
    dev, summary, kind = result.dev, result.summary, result.treebank_kind
    table = join_table1(result.table, result.relation_scheme, comparable=args.paper_comparable)
    title = f"Head accuracy per dependency relation (Table 1 twin): {Path(args.dev_attention).name}"
    md = table1_markdown(table, title=title,
                         corpus_note=trees_note(kind, result.treebank_name, comparable=args.paper_comparable))
    write_csv_full(args.out_accuracy, result.accuracy)
    write_csv_full(args.out_table, table)
    write_text(args.out_markdown, md)
    fig5_syntax_heads(args.dev_attention, table, args.out_figure,
                      relations=fig5_relations(FORCED_BY_SCHEME[result.relation_scheme]))
    write_json(args.summary, summary)

    all_row = table.iloc[0]
    print(
        f"heads: {dev.n_sentences} sentences, {dev.n_words} words, {len(dev.relations)} relations, "
        f"{len(table)} Table 1 rows ({kind} trees); All: head {all_row['best_head']} "
        f"{100 * all_row['accuracy']:.1f}% vs offset {int(all_row['baseline_offset']):+d} "
        f"{100 * all_row['baseline_accuracy']:.1f}%; poss words switched to the 's prediction: "
        f"{dev.n_poss_affected} of {dev.n_poss}"
    )
    paired = summary.get("paired", {})
    if paired:
        vb, vr = paired["vs_baseline"], paired["vs_runner_up"]
        print(f"heads: paired tests (Holm, alpha {args.alpha}): best head beats the best offset baseline in "
              f"{len(vb['significant_better'])} of {vb['n_tests']} rows (worse in {len(vb['significant_worse'])}), "
              f"beats the runner-up head in {len(vr['significant_better'])} of {vr['n_tests']}")
    for path in (args.out_accuracy, args.out_table, args.out_markdown, args.out_figure, args.summary):
        print(f"wrote {path}")
    return 0
