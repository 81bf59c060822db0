"""``bertlook rollout``: argparse glue, files and printing of :func:`bertlook.analyses.rollout.run_rollout`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bertlook.cli._args import add_step_parser, add_table1_arguments, table1_scoring
from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv, write_csv_full, write_json, write_text
from bertlook.pipeline import costs
from bertlook.pipeline.sharding import save_partial
from bertlook.pipeline.steps import BEYOND, GoldenTable, Page, ROLLOUT_SUB, Step, figure, figure_page, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "rollout": "attention rollout (Abnar & Zuidema 2020): per-layer shares and entropy, Table 1 on rollout maps",
}


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("rollout", (table("rollout_stats.csv"), figure("fig_rollout.png")), switch="rollout", maps=("rollout",),
         beyond=True, summary=table("rollout_stats.summary.json"),
         pages=(Page(table("rollout_stats.csv"), "rollout_stats.html", BEYOND, "Rollout statistics per layer",
                     caption="rollout_stats.rst", subcategory=ROLLOUT_SUB),
                figure_page("fig_rollout.png", BEYOND, "Figure: attention rollout by layer", caption="fig_rollout.rst",
                            subcategory=ROLLOUT_SUB)),
         golden=(GoldenTable("rollout_stats", table("rollout_stats.csv"), ("layer",)),), cost=costs.STATS_GATHER),
    Step("rollout_table1", (table("table1_rollout.csv"), table("table1_rollout.md")), rule="rollout_words",
         switch="rollout", maps=("rollout",), beyond=True, summary=table("table1_rollout.summary.json"),
         pages=(Page(table("table1_rollout.md"), "table1_rollout.html", BEYOND, "Table 1 on the rollout maps",
                     caption="table1_rollout.rst", subcategory=ROLLOUT_SUB),), cost=costs.STORE_READER),
)

_HELP = """\
Attention rollout (Abnar & Zuidema 2020): per layer, A_hat = 0.5 mean_h(A) + 0.5 I (rows renormalised),
R_1 = A_hat_1, R_l = A_hat_l R_{l-1}; computed from stored maps (no model run), float64.

per-layer statistics (token-level store, attention or norm maps):
  --attention DIR        token-level store (attention/segments-*)
  --partial NPZ          or: partial sums of the shards (repeatable, shard order), from --out-partial
  --out-partial NPZ      output: only the sums and counts of --attention (no table)
  --out CSV              output: rollout_stats.csv: layer,cls,sep,punct,other,entropy,uniform_entropy
  --out-figure PNG       output (optional): shares and entropy per layer
  --max-examples N, --segments JSONL   the first N segments of the file (as surface-stats)

Table 1 on rollout maps (word-level store with gold trees; "head" L-1 = the rollout up to layer L):
  --word-attention DIR   word-level store (attention/words-dev)
  --out-table CSV        best layer per relation vs offset baselines, bootstrap CI (no paper numbers)
  --out-markdown MD      the same as markdown
  --out-accuracy CSV     every layer x relation x direction

  --summary JSON         counts and settings of what ran (required unless --out-partial)

Definitions: docs/definitions.md#attention-rollout-abnar--zuidema-2020
"""


def _table1_note(t: dict[str, Any]) -> str:
    """The corpus note of the Markdown Table 1 on rollout, from its summary entries ``t``."""
    from bertlook.analyses.heads import TREEBANK_KINDS

    name = t["treebank_name"]
    trees = TREEBANK_KINDS[t["treebank_kind"]][1] + (f" ({name})" if name else "")
    return (f"Trees: {trees}. Maps: attention rollout (Abnar & Zuidema 2020) of the word-level "
            f"{t['rollout_of']} maps, A_hat = 0.5 mean over heads + 0.5 I; the \"head\" L-1 is the "
            f"rollout up to layer L (one per layer, {t['num_layers']} layers). The paper has no rollout "
            "numbers: no paper columns.")


def _check_outputs(args: argparse.Namespace, stats_mode: bool, table_mode: bool) -> None:
    """The outputs of a run that is not ``--out-partial`` match its inputs (else an error)."""
    if not args.summary:
        raise BertlookError("rollout: give --summary JSON (or --out-partial)")
    if stats_mode and not args.out:
        raise BertlookError("rollout: --attention / --partial need --out CSV")
    if not stats_mode and (args.out or args.out_figure):
        raise BertlookError("rollout: --out / --out-figure need --attention or --partial")
    table_outs = (args.out_table, args.out_markdown, args.out_accuracy)
    if table_mode and not all(table_outs):
        raise BertlookError("rollout: --word-attention needs --out-table, --out-markdown and --out-accuracy")
    if not table_mode and any(table_outs):
        raise BertlookError("rollout: --out-table / --out-markdown / --out-accuracy need --word-attention")


def _run_rollout(args: argparse.Namespace) -> int:
    from bertlook.analyses.rollout import PARTIAL_KIND, RolloutTable1Options, rollout_partial, run_rollout
    from bertlook.attention.store import open_store

    stats_mode = bool(args.attention or args.partial)
    table_mode = bool(args.word_attention)
    if args.attention and args.partial:
        raise BertlookError("rollout: give --attention DIR or --partial NPZ ... (not both)")
    if not (stats_mode or table_mode):
        raise BertlookError("rollout: give --attention DIR, --partial NPZ ... or --word-attention DIR")
    if args.out_partial:
        if not args.attention or table_mode:
            raise BertlookError("rollout: --out-partial needs --attention (and no --partial / --word-attention)")
        meta, arrays = rollout_partial(open_store(args.attention, level="token"), max_examples=args.max_examples,
                                       segments=args.segments)
        save_partial(args.out_partial, PARTIAL_KIND, meta, arrays)
        print(f"rollout: partial sums of {meta['n_examples']} of {meta['n_examples_in_store']} examples "
              f"-> {args.out_partial}")
        return 0
    _check_outputs(args, stats_mode, table_mode)

    # compute everything first, then write: a failure leaves no output of this run
    options = RolloutTable1Options(**table1_scoring(args), max_sentences=args.max_examples_words,
                                   treebank_kind=args.treebank_kind, treebank_name=args.treebank_name)
    result = run_rollout(args.attention or None, partials=args.partial or None,
                         word_attention=args.word_attention or None, max_examples=args.max_examples,
                         segments=args.segments, table1_options=options)
    frame, summary = result.stats, result.summary
    if result.table is not None:
        from bertlook.reporting.tables import table1_markdown

        title = ("Dependency accuracy of attention rollout per relation (Table 1 on rollout): "
                 f"{Path(args.word_attention).name}")
        md = table1_markdown(result.table, title=title, corpus_note=_table1_note(summary["table1"]))
    if frame is not None:
        write_csv(args.out, frame)
        if args.out_figure:
            from bertlook.reporting.extra_figures import fig_rollout

            fig_rollout(args.out, args.out_figure)
    if result.table is not None:
        write_csv_full(args.out_accuracy, result.accuracy)
        write_csv_full(args.out_table, result.table)
        write_text(args.out_markdown, md)
    write_json(args.summary, summary)
    _print_lines(args, result)
    return 0


def _print_lines(args: argparse.Namespace, result) -> None:
    """The lines a run prints: the statistics, Table 1 on rollout, the files written."""
    frame, summary = result.stats, result.summary
    if frame is not None:
        s = summary["stats"]
        print(f"rollout: {s['n_examples']} of {s['n_examples_in_store']} examples ({s['map']} maps), "
              f"{len(frame)} layers -> {args.out}")
        excluded = s["excluded"]["not selected (max_examples)"]
        if excluded:
            print(f"rollout: {excluded} example(s) of the store not selected (--max-examples)")
        last = frame.iloc[-1]
        print(f"rollout: last layer shares [CLS] {last['cls']:.3f} [SEP] {last['sep']:.3f} "
              f"'. ,' {last['punct']:.3f} other {last['other']:.3f}; entropy {last['entropy']:.2f} "
              f"(uniform {last['uniform_entropy']:.2f}) nats")
    if result.table is not None:
        t = summary["table1"]
        all_row = t["best_layer"]["All"]
        print(f"rollout: Table 1 on rollout: {t['n_sentences']} of {t['n_sentences_in_store']} sentences, "
              f"{t['n_words']} words, {len(t['rows'])} rows; All: layer {all_row['layer']} {all_row['direction']} "
              f"{100 * all_row['accuracy']:.1f}% vs offset {all_row['baseline_offset']:+d} "
              f"{100 * all_row['baseline_accuracy']:.1f}%")
    for path in (args.out, args.out_figure, args.out_accuracy, args.out_table, args.out_markdown, args.summary):
        if path:
            print(f"wrote {path}")


def register_cli(subparsers) -> None:
    """Add the ``rollout`` subcommand."""
    p = add_step_parser(subparsers, "rollout", COMMANDS["rollout"], _HELP)
    p.add_argument("--attention", default=None, metavar="DIR", help="input: token-level attention (or norm) store")
    p.add_argument("--partial", action="append", default=None, metavar="NPZ",
                   help="input: partial sums of a shard (repeatable, shard order) instead of --attention")
    p.add_argument("--out-partial", default=None, metavar="NPZ",
                   help="output: only the partial sums and counts of --attention (no table)")
    p.add_argument("--out", default=None, metavar="CSV", help="output: per-layer statistics (rollout_stats.csv)")
    p.add_argument("--out-figure", default=None, metavar="PNG", help="output: figure of the per-layer statistics")
    p.add_argument("--summary", default=None, metavar="JSON", help="output: summary JSON")
    p.add_argument("--max-examples", type=int, default=None, metavar="N",
                   help="statistics: use only the first N segments of --segments (without it: the first N "
                        "examples of the store) (default: all)")
    p.add_argument("--segments", default=None, metavar="JSONL",
                   help="input: the segments file of the store, for --max-examples")
    p.add_argument("--word-attention", default=None, metavar="DIR",
                   help="input: word-level store with gold trees (Table 1 on rollout)")
    p.add_argument("--out-table", default=None, metavar="CSV", help="output: Table 1 on rollout (CSV)")
    p.add_argument("--out-markdown", default=None, metavar="MD", help="output: Table 1 on rollout (markdown)")
    p.add_argument("--out-accuracy", default=None, metavar="CSV", help="output: accuracy of every layer's rollout")
    add_table1_arguments(p, treebank_kind=None)
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    p.add_argument("--max-sentences", dest="max_examples_words", type=int, default=None, metavar="N",
                   help="Table 1: use only the first N sentences of --word-attention (default: all)")
    p.add_argument("--treebank-name", default=None, metavar="NAME",
                   help="treebank / parser name for the note (default: the store's meta 'treebank_name')")
    p.set_defaults(func=_run_rollout)
