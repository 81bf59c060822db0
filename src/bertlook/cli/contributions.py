"""``bertlook contributions``: argparse glue, files and printing of
:func:`bertlook.analyses.contribution_stats.run_contributions` (ALTI and value zeroing beside attention, norm-based
maps and rollout: surface statistics and Table 1 per map kind on seeded samples)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bertlook.cli._args import (add_figure_arguments, add_model_arguments, add_step_parser, add_table1_arguments,
                               check_no_figure, draw_figure_from, table1_scoring)
from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv, write_csv_full, write_json, write_text
from bertlook.pipeline import costs
from bertlook.pipeline.steps import BEYOND, CONTRIBUTIONS_SUB, GoldenTable, Page, Step, figure, figure_page, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "contributions": "ALTI and value zeroing beside attention, norms and rollout: shares, entropy and Table 1 per "
                     "map kind on seeded samples",
}

#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("contributions",
         (table("contribution_stats.csv"), table("contribution_heads.csv"), table("table1_contributions.csv"),
          table("table1_contributions.md")),
         switch="contributions", beyond=True, env="torch", summary=table("contribution_stats.summary.json"),
         pages=(Page(table("contribution_stats.csv"), "contribution_stats.html", BEYOND,
                     "ALTI and value zeroing: shares and entropy per layer and map kind",
                     caption="contribution_stats.rst", subcategory=CONTRIBUTIONS_SUB),
                Page(table("table1_contributions.md"), "table1_contributions.html", BEYOND,
                     "ALTI and value zeroing: Table 1 per map kind", caption="table1_contributions.rst",
                     subcategory=CONTRIBUTIONS_SUB)),
         cost=costs.CONTRIBUTIONS,
         golden=(GoldenTable("contribution_stats", table("contribution_stats.csv"), ("kind", "layer")),
                 GoldenTable("contribution_heads", table("contribution_heads.csv"), ("kind", "layer", "head")),
                 GoldenTable("table1_contributions", table("table1_contributions.csv"), ("kind", "relation")))),
    # the figure, drawn from the table in the analysis env (the model's env has no matplotlib)
    Step("contributions_figure", (figure("fig_contributions.png"),), switch="contributions", beyond=True,
         pages=(figure_page("fig_contributions.png", BEYOND, "Figure: [CLS], [SEP] and '. ,' shares per map kind",
                            caption="fig_contributions.rst", subcategory=CONTRIBUTIONS_SUB),),
         cost=costs.PLOT_GATHER),
)

_HELP = """\
ALTI (Ferrando et al. 2022), ALTI per head, ALTI over layers and value zeroing (Mohebbi et al. 2023) beside the
attention weights, the norm-based maps (Kobayashi et al. 2020) and attention rollout, through the surface
statistics and Table 1. A step of its own that runs the model on seeded samples: value zeroing costs n extra
layer passes per layer and example. (ALTI per layer is also read inside the extraction stream, on many more
segments: extract-segments --alti-stats-partial, attention_stats_alti.csv.)

inputs:
  --model SPEC [--revision REV]   the run's model
  --segments JSONL       segments (a seeded sample of --n-segments of them)
  --treebank CONLLU      dev treebank with gold trees (a seeded sample of --n-sentences sentences)

outputs (all required but --out-explorer):
  --out-stats CSV        contribution_stats.csv: kind,per,layer,cls,sep,punct,other,entropy,n_examples
                         (per = head_mean: the mean over the heads of a per-head kind; layer: a per-layer kind)
  --out-heads CSV        contribution_heads.csv: kind,layer,head,... of the per-head kinds (attention, norm,
                         alti_heads)
  --out-table CSV        table1_contributions.csv: per kind and relation the best head (per = head) or layer
                         (per = layer), its accuracy, the best offset baseline, the word count
  --out-markdown MD      the same as markdown
  --summary JSON         sample sizes and ids, seed, seconds per part, value zeroing layer passes, exclusions
  --out-explorer NPZ     optional: word-level alti_heads, alti_rollout and value_zeroing maps of the head
                         explorer's short dev sentences (its map menu; joined by sentence id)

figure (a second call, in the analysis environment: the model's has no matplotlib):
  --figure-from CSV --out-figure PNG   fig_contributions.png from contribution_stats.csv: [CLS] / [SEP] / ". ,"
                         shares per layer, one panel per kind

Definitions: docs/definitions.md#alti-and-value-zeroing
"""


def _check_inputs(args: argparse.Namespace) -> None:
    check_no_figure(args, "contributions")
    if not args.model or not args.segments or not args.treebank:
        raise BertlookError("contributions: give --model, --segments and --treebank (or --figure-from CSV "
                            "--out-figure PNG)")
    outs = {"--out-stats": args.out_stats, "--out-heads": args.out_heads, "--out-table": args.out_table,
            "--out-markdown": args.out_markdown, "--summary": args.summary}
    missing = [k for k, v in outs.items() if not v]
    if missing:
        raise BertlookError(f"contributions: give {', '.join(missing)}")
    for flag, path in (("--segments", args.segments), ("--treebank", args.treebank)):
        if not Path(path).is_file():
            raise BertlookError(f"{path}: {flag}: no such file")
    for flag, value in (("--n-segments", args.n_segments), ("--n-sentences", args.n_sentences),
                        ("--batch-size", args.batch_size), ("--value-zeroing-segments", args.value_zeroing_segments)):
        if value is not None and value < 1:
            raise BertlookError(f"contributions: {flag} must be at least 1 (got {value})")


def _run(args: argparse.Namespace) -> int:
    if args.figure_from and not args.segments:  # the figure's call (tests/test_envs.py decides this test)
        return draw_figure_from(args, "contributions", _figure)
    return _compute(args)


def _figure():
    from bertlook.reporting.contributions import fig_contributions

    return fig_contributions


def _compute(args: argparse.Namespace) -> int:
    """The model's part: the tables, Table 1's markdown, the explorer's maps and the summary (written once all is
    computed; the figure is drawn from the table by a second call, in the analysis environment)."""
    from bertlook.analyses.contribution_stats import ContributionOptions, run_contributions
    from bertlook.analyses.contribution_table1 import Table1Settings
    from bertlook.analyses.contribution_explorer import write_explorer_maps
    from bertlook.reporting.explorer import SAMPLE_SENTENCES, SAMPLE_WORDS
    from bertlook.reporting.tables import table1_contributions_markdown

    _check_inputs(args)
    settings = Table1Settings(**table1_scoring(args), treebank_kind=args.treebank_kind, from_split=args.from_split,
                              text=args.text)
    opts = ContributionOptions(segments=args.n_segments, sentences=args.n_sentences, seed=args.seed,
                               value_zeroing_segments=args.value_zeroing_segments,
                               explorer_sentences=SAMPLE_SENTENCES if args.out_explorer else 0,
                               explorer_words=SAMPLE_WORDS,
                               batch_size=args.batch_size, device=args.device, revision=args.revision,
                               table1=settings)
    # compute everything first, then write: a failure leaves no output of this run
    result = run_contributions(args.model, args.segments, args.treebank, opts)
    t = result.summary["table1"]
    note = (f"Model {args.model}; {t['n_sentences']} dev sentences of {Path(args.treebank).name} (a seeded sample, "
            f"seed {args.seed}), {t['n_words']} words, the same sentences for every kind. A per-layer kind has one "
            "\"head\" per layer (its best layer is shown); ALTI per head is bertlook's extension. No paper columns.")
    md = table1_contributions_markdown(result.table1, title="Table 1 per map kind (ALTI and value zeroing)", note=note)
    write_csv(args.out_stats, result.stats)
    write_csv(args.out_heads, result.heads)
    write_csv_full(args.out_table, result.table1)
    write_text(args.out_markdown, md)
    if args.out_explorer:
        write_explorer_maps(args.out_explorer, result.explorer)
    write_json(args.summary, result.summary)
    _print_lines(args, result)
    return 0


def _print_lines(args: argparse.Namespace, result) -> None:
    s = result.summary
    sec = s["seconds"]
    print(f"contributions: {s['n_examples']} segments, {s['table1']['n_sentences']} dev sentences; "
          f"{sum(s['value_zeroing_layer_passes'].values())} value zeroing layer passes; seconds: maps and ALTI "
          f"{sec['alti_and_maps']:.1f}, value zeroing {sec['value_zeroing']:.1f}, total {sec['total']:.1f}")
    last = result.stats.groupby("kind", sort=False).tail(1)
    for r in last.itertuples(index=False):
        print(f"contributions: {r.kind} layer {r.layer}: [CLS] {r.cls:.3f} [SEP] {r.sep:.3f} '. ,' {r.punct:.3f} "
              f"other {r.other:.3f}; entropy {r.entropy:.2f} nats")
    best = s["table1"]["best_all"]
    print("contributions: Table 1 All: " + json.dumps({k: (v["best"], round(v["accuracy"], 3)) if v else None
                                                       for k, v in best.items()}))
    for path in (args.out_stats, args.out_heads, args.out_table, args.out_markdown, args.summary):
        print(f"wrote {path}")


def register_cli(subparsers) -> None:
    """Add the ``contributions`` subcommand."""
    p = add_step_parser(subparsers, "contributions", COMMANDS["contributions"], _HELP)
    add_model_arguments(p, required=False)
    p.add_argument("--segments", default=None, metavar="JSONL", help="input: segments JSONL")
    p.add_argument("--treebank", default=None, metavar="CONLLU", help="input: dev treebank (CoNLL-U, gold trees)")
    add_figure_arguments(p, table="contribution_stats.csv", figure="fig_contributions.png")
    for name in ("out-stats", "out-heads", "out-table", "out-markdown", "summary"):
        p.add_argument(f"--{name}", default=None, metavar="PATH", help="output (see above)")
    p.add_argument("--out-explorer", default=None, metavar="NPZ",
                   help="output (optional): word-level ALTI per head, ALTI over layers and value zeroing of the head "
                        "explorer's short dev sentences (the explorer's map menu)")
    p.add_argument("--n-segments", type=int, default=24, metavar="N", help="segments in the sample (default 24)")
    p.add_argument("--n-sentences", type=int, default=64, metavar="N", help="dev sentences in the sample (default 64)")
    p.add_argument("--value-zeroing-segments", type=int, default=None, metavar="N",
                   help="value zeroing on the first N segments of the sample only (its cost: n layer passes per layer "
                        "and segment; default: every sampled segment); the other kinds on every one")
    p.add_argument("--seed", type=int, default=0, help="seed of the samples and of the bootstrap (default 0)")
    p.add_argument("--batch-size", type=int, default=1,
                   help="examples per forward pass (default 1: ALTI's distance tensors grow with the batch; on the CPU "
                        "one example at a time is as fast and peaks at 0.85 GB for MiniLM, a batch of 8 at 1.6 GB)")
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda", help="device (default auto)")
    p.add_argument("--from-split", choices=("mean", "first", "max"), default="mean",
                   help="attention FROM a split word (as extract-words; default mean)")
    p.add_argument("--text", choices=("spaces", "original"), default="spaces",
                   help="how a sentence is written for the tokenizer (as extract-words; default spaces)")
    add_table1_arguments(p, treebank_kind="ud")
    p.set_defaults(func=_run)
