"""``bertlook tree-heads``: argparse glue, files and printing of :func:`bertlook.analyses.tree_heads.run_tree_heads`."""

from __future__ import annotations

import argparse
from bertlook.cli._args import add_step_parser
from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv, write_json, write_text
from bertlook.pipeline import costs
from bertlook.pipeline.steps import BEYOND, GoldenTable, Page, Step, TREES_SUB, figure, figure_page, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "tree-heads": "a whole dependency tree decoded from every single head (Htut et al. 2019): UAS, UUAS vs baselines",
}



#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("tree_heads", (table("tree_heads.csv"), table("tree_heads_best.csv"), table("tree_heads.md"),
                        figure("fig_tree_heads.png")),
         switch="tree_heads", maps=("attention",), beyond=True, summary=table("tree_heads.summary.json"),
         pages=(Page(table("tree_heads.md"), "tree_heads.html", BEYOND, "Single-head trees: best head per layer",
                     caption="tree_heads_best.rst", subcategory=TREES_SUB),
                Page(table("tree_heads.csv"), "tree_heads_all.html", BEYOND, "Single-head trees: every head",
                     caption="tree_heads.rst", subcategory=TREES_SUB),
                figure_page("fig_tree_heads.png", BEYOND, "Figure: single-head trees by layer",
                            caption="fig_tree_heads.rst", subcategory=TREES_SUB)),
         cost=costs.Cost(estimate=costs.tree_decoder),
         golden=(GoldenTable("tree_heads", table("tree_heads.csv"), ("layer", "head")),
                 GoldenTable("tree_heads_best", table("tree_heads_best.csv"), ("row",)))),
)


_DESCRIPTION = """\
For every head and dev sentence, decode a tree from the head's word-level map and score it against the
gold tree (beyond the paper; Htut et al. 2019, "Do Attention Heads in BERT Track Syntactic Dependencies?"):
UAS of the maximum spanning arborescence (Chu-Liu-Edmonds) with the gold root word attached to ROOT, in
both directions (dep2head: score of head j for word i = A(i -> j); head2dep: A(j -> i)), and UUAS of the
undirected maximum spanning tree of A + A^T; baselines on the same words: right-branching with the gold
root (UAS, UUAS) and the adjacent chain (UUAS). Scored words: non-punctuation words (as Table 3) that are
not the gold root.

inputs:
  --dev-attention DIR   word-level attention store of the dev split (extract-words), with gold heads

outputs:
  --out-table CSV       tree_heads.csv: layer,head,uas_dep2head,uas_head2dep,uuas,n_words (fractions)
  --out-best CSV        tree_heads_best.csv: row,uas_head,uas_direction,uas,uuas_head,uuas,n_words
                        (one row per layer, "all layers", then right_branching and adjacent_chain)
  --out-markdown MD     the best heads per layer next to the baselines, in percent
  --out-figure PNG      fig_tree_heads.png: best head per layer vs baselines; UAS and UUAS heatmaps
  --summary JSON        counts (sentences, scored / excluded words, trees decoded), baselines, timing

Definitions: docs/definitions.md#single-head-trees-tree-heads.
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``tree-heads`` subcommand."""
    p = add_step_parser(subparsers, "tree-heads", COMMANDS["tree-heads"], _DESCRIPTION)
    p.add_argument("--dev-attention", required=True, metavar="DIR", help="input: word-level store, dev split")
    p.add_argument("--max-sentences", type=int, default=None, metavar="N",
                   help="the first N sentences of the store only (default: all)")
    p.add_argument("--out-table", required=True, metavar="CSV", help="output: tree_heads.csv")
    p.add_argument("--out-best", required=True, metavar="CSV", help="output: tree_heads_best.csv")
    p.add_argument("--out-markdown", required=True, metavar="MD", help="output: tree_heads.md")
    p.add_argument("--out-figure", required=True, metavar="PNG", help="output: fig_tree_heads.png")
    p.add_argument("--summary", required=True, metavar="JSON", help="output: summary JSON")
    p.add_argument("--note", default="", help="text put under the Markdown table (model, treebank, ...)")
    p.set_defaults(func=_run)
    return p


def _run(args: argparse.Namespace) -> int:
    from bertlook.analyses.tree_heads import run_tree_heads
    from bertlook.reporting.extra_figures import fig_tree_heads
    from bertlook.reporting.tables import tree_heads_markdown

    if args.max_sentences is not None and args.max_sentences < 1:
        raise BertlookError(f"--max-sentences must be >= 1, got {args.max_sentences}")
    result = run_tree_heads(args.dev_attention, max_sentences=args.max_sentences, log=print)
    best, info = result.best, result.info
    write_csv(args.out_table, result.per_head)
    write_csv(args.out_best, best)
    write_text(args.out_markdown, tree_heads_markdown(best, note=args.note))
    fig_tree_heads(args.out_table, args.out_best, args.out_figure)
    write_json(args.summary, result.summary)
    c = info["counts"]
    top = best[best["row"] == "all layers"].iloc[0]
    b = info["baselines"]
    print(f"tree-heads: {c['trees_decoded']} trees ({c['n_sentences']} sentences x {c['num_layers'] * c['num_heads']} "
          f"heads x 2 directions) in {info['seconds']:.1f} s; {c['n_scored_words']} scored words "
          f"({c['n_punct_words_excluded']} punctuation, {c['n_root_words_excluded']} gold roots excluded); "
          f"best UAS {100 * top['uas']:.1f} ({top['uas_head']} {top['uas_direction']}) vs right-branching "
          f"{100 * b['right_branching']['uas']:.1f}; best UUAS {100 * top['uuas']:.1f} ({top['uuas_head']}) vs "
          f"adjacent chain {100 * b['adjacent_chain']['uuas']:.1f} -> {args.out_table}, {args.out_best}, "
          f"{args.out_markdown}, {args.out_figure}, {args.summary}")
    return 0
