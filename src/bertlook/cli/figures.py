"""CLI of :mod:`bertlook.reporting.figures`: ``figures`` and ``fig1-example`` (argparse glue,
summaries, printing; the drawing lives in the reporting module)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertlook.cli._args import add_step_parser
from bertlook.errors import BertlookError
from bertlook.naming import parse_head_label, parse_head_labels
from bertlook.pipeline import costs
from bertlook.pipeline.sharding import save_partial
from bertlook.pipeline.steps import BEYOND, NORMS_SUB, Step, figure, figure_page

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "figures": "draw the PNG twins of the paper's Figs 1, 2, 4 and 6",
    "fig1-example": "save the Fig 1 example of a sharded extraction, if this shard's store holds it",
}


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("figures", tuple(figure(n) for n in ("fig1_example_heads.png", "fig2_special_tokens.png", "fig4_entropy.png",
                                          "fig6_head_clusters.png")),
         pages=(figure_page("fig1_example_heads.png", "Figures", "Figure 1 twin: example heads",
                            caption="fig1_example_heads.rst"),
                figure_page("fig2_special_tokens.png", "Figures",
                            "Figure 2 twin: attention to [CLS], [SEP], . and ,", caption="fig2_special_tokens.rst"),
                figure_page("fig4_entropy.png", "Figures", "Figure 4 twin: attention entropy",
                            caption="fig4_entropy.rst"),
                figure_page("fig6_head_clusters.png", "Figures", "Figure 6 twin: head clusters",
                            caption="fig6_head_clusters.rst")),
         cost=costs.PLOT_GATHER),
    Step("fig_norms", (figure("fig_norms.png"),), rule="figures", switch="norms", maps=("attention", "norm"),
         beyond=True,
         pages=(figure_page("fig_norms.png", BEYOND, "Figure: attention vs norm-based maps", caption="fig_norms.rst",
                            subcategory=NORMS_SUB),)),
)


_HELP = """\
Draw the PNG twins of the paper's figures.

inputs:
  --attention DIR        attention store (extract-segments step); Fig 1 draws one of its examples
  --example NPZ          or: the Fig 1 example files of the shards of a sharded extraction
                         (`bertlook fig1-example`, repeatable; exactly one holds the example)
  --stats CSV            attention_stats.csv (surface-stats step): one row per head
  --stats-summary JSON   surface-stats summary: n_examples, uniform_entropy, mean_tokens
  --clusters CSV         head_clusters.csv (cluster-heads step): layer,head,x,y,behavior
  --norm-stats CSV       optional: attention_stats_norm.csv (surface-stats on the norm-based store of
                         `extract-segments --norms-out`); with --norm-summaries and --out-fig-norms
  --norm-summaries JSON  the extraction summaries with `norms` (one gathered/unsharded, or every shard's)

outputs (in --out-dir):
  fig1_example_heads.png   Fig 1: example heads' attention on one example
  fig2_special_tokens.png  Fig 2: attention to [CLS], [SEP], ". ," per head by layer
  fig4_entropy.png         Fig 4: attention entropy and [CLS] entropy per head by layer
  fig6_head_clusters.png   Fig 6: MDS embedding of the heads by layer and by behaviour
  --out-fig-norms PNG      optional: attention vs norm-based shares (Kobayashi et al. 2020) and mean
                           ||f(x)|| per token class, by layer
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``figures`` subcommand to an ``argparse`` subparsers object."""
    p = add_step_parser(subparsers, "figures", COMMANDS["figures"], _HELP)
    p.add_argument("--attention", default=None, metavar="DIR", help="attention store directory (input)")
    p.add_argument("--example", action="append", default=None, metavar="NPZ",
                   help="input: instead of --attention, the shards' Fig 1 example files (repeatable)")
    p.add_argument("--stats", required=True, metavar="CSV", help="attention_stats.csv (input)")
    p.add_argument("--stats-summary", required=True, metavar="JSON", help="surface-stats summary JSON (input)")
    p.add_argument("--clusters", required=True, metavar="CSV", help="head_clusters.csv (input)")
    p.add_argument("--out-dir", required=True, metavar="DIR", help="directory for the four PNGs (output)")
    p.add_argument(
        "--example-heads",
        default="auto",
        metavar="auto|L-H,...",
        help="heads for Fig 1: 'auto' (one characteristic head per behaviour, from --stats) or a "
        "comma-separated list of 1-indexed labels such as '1-1,3-1,8-7,11-6' (default: auto)",
    )
    p.add_argument("--example-index", type=int, default=0, metavar="I",
                   help="index (storage order) of the example drawn in Fig 1 (default: 0)")
    p.add_argument("--norm-stats", default=None, metavar="CSV",
                   help="input: surface statistics of the norm-based store (with --norm-summaries, --out-fig-norms)")
    p.add_argument("--norm-summaries", nargs="+", action="extend", default=None, metavar="JSON",
                   help="input: extraction summaries with `norms` (the gathered one, or every shard's in order; "
                        "repeatable)")
    p.add_argument("--out-fig-norms", default=None, metavar="PNG",
                   help="output: the norm-based attention figure (Kobayashi et al. 2020)")
    p.set_defaults(func=_cli_figures)

    e = add_step_parser(
        subparsers, "fig1-example", COMMANDS["fig1-example"],
        description=(
            "Inputs: --attention DIR (one shard's token-level store), --segments JSONL (the segments\n"
            "file), --example-index I (figures.example_index: position in the order of the unsharded\n"
            "store, i.e. longest segment first, ties by id, over-long segments excluded).\n"
            "Output: --out NPZ: the example's map and tokens when this shard holds it, else a note\n"
            "that it does not; `bertlook figures --example` reads the files of all shards."
        ),
    )
    e.add_argument("--attention", required=True, metavar="DIR", help="input: a shard's attention store")
    e.add_argument("--segments", required=True, metavar="JSONL", help="input: the segments file")
    e.add_argument("--example-index", type=int, default=0, metavar="I", help="Fig 1 example (default 0)")
    e.add_argument("--out", required=True, metavar="NPZ", help="output: the example file")
    e.set_defaults(func=_cli_fig1_example)
    return p


def _cli_fig1_example(args: argparse.Namespace) -> int:
    from bertlook.attention.fig1_example import FIG1_KIND, fig1_example_partial

    meta, arrays = fig1_example_partial(args.attention, args.segments, args.example_index)
    save_partial(args.out, FIG1_KIND, meta, arrays)
    where = "holds" if meta["found"] else "does not hold"
    print(f"fig1-example: {args.attention} {where} example {args.example_index} (id {meta['id']!r}) -> {args.out}")
    return 0


def _cli_figures(args: argparse.Namespace) -> int:
    out_dir = Path(args.out_dir)
    norm_flags = (args.norm_stats, args.norm_summaries, args.out_fig_norms)
    if any(norm_flags) and not all(norm_flags):
        raise BertlookError("figures: --norm-stats, --norm-summaries and --out-fig-norms go together (all three or none)")
    from bertlook.attention.store import open_store
    from bertlook.attention.fig1_example import load_fig1_example
    from bertlook.reporting.example_figures import (
        EXAMPLE_BEHAVIOURS, choose_example_heads, draw_fig1, fig1_example_heads,
    )
    from bertlook.reporting.figures import FIGURE_FILES, fig2_special_tokens, fig4_entropy, fig6_head_clusters
    from bertlook.reporting.plotting import read_stats_columns

    if bool(args.attention) == bool(args.example):
        raise BertlookError("figures: give --attention DIR or --example NPZ ... (one of them)")
    if args.attention:
        store = open_store(args.attention)
        num_layers, num_heads, source = store.num_layers, store.num_heads, args.attention
    else:
        example_meta, example_attn = load_fig1_example(args.example)
        if int(example_meta["example_index"]) != int(args.example_index):
            raise BertlookError(f"{', '.join(args.example)}: the example files hold example "
                                f"{example_meta['example_index']}, not --example-index {args.example_index}")
        num_layers, num_heads = int(example_meta["num_layers"]), int(example_meta["num_heads"])
        source = ", ".join(args.example)
    spec = str(args.example_heads).strip()
    if spec.lower() == "auto":
        stats = read_stats_columns(args.stats, [c for c, _ in EXAMPLE_BEHAVIOURS])
        chosen = choose_example_heads(stats)
        for choice in chosen:
            try:
                parse_head_label(f"{choice.layer}-{choice.head}", num_layers, num_heads)
            except BertlookError as err:
                raise BertlookError(f"{args.stats}: does not match the attention store {source}: {err}") from None
        heads = [(c.layer, c.head) for c in chosen]
        labels: list[str] | None = [c.label for c in chosen]
        shown: list[bool] | None = [c.shown for c in chosen]
        for c in chosen:
            if not c.shown:
                print(f"figures: Fig 1 panel not drawn: {c.label}")
    else:
        heads = parse_head_labels(spec, num_layers, num_heads)
        labels = shown = None
    if args.attention:
        fig1 = fig1_example_heads(args.attention, heads, out_dir / FIGURE_FILES["fig1"],
                                  example_index=args.example_index, labels=labels, shown=shown)
    else:
        fig1 = draw_fig1(example_meta["tokens"], example_attn, heads, out_dir / FIGURE_FILES["fig1"],
                         labels=labels, shown=shown,
                         special_tokens=(example_meta.get("special_tokens") or {}).values())
    written = [
        fig1,
        fig2_special_tokens(args.stats, out_dir / FIGURE_FILES["fig2"]),
        fig4_entropy(args.stats, args.stats_summary, out_dir / FIGURE_FILES["fig4"]),
        fig6_head_clusters(args.clusters, out_dir / FIGURE_FILES["fig6"]),
    ]
    if args.out_fig_norms:
        from bertlook.reporting.extra_figures import fig_norms

        written.append(fig_norms(args.stats, args.norm_stats, args.norm_summaries, args.out_fig_norms))
    heads_txt = ", ".join(f"{l}-{h}" for (l, h), ok in zip(heads, shown or [True] * len(heads)) if ok)
    print(f"figures: example heads {heads_txt} on example {args.example_index}")
    for path in written:
        print(f"wrote {path}")
    return 0
