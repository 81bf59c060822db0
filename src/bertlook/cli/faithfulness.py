"""CLI of bertlook.analyses.faithfulness: ``faithfulness`` (which measure to trust)."""

from __future__ import annotations

import argparse

from bertlook.cli._args import (add_figure_arguments, add_model_arguments, add_step_parser, check_no_figure,
                               draw_figure_from)
from bertlook.errors import BertlookError
from bertlook.pipeline import costs
from bertlook.pipeline.sizing import MIB, segments_input, sum_flops
from bertlook.pipeline.steps import BEYOND, GoldenTable, Page, Step, figure, figure_page, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "faithfulness": "which measure to trust: agreement of each map kind with removing a token or a head",
}

#: the report's subcategory of the step's pages
FAITHFULNESS_SUB = "Which measure to trust"


def _flops(job) -> float:
    """The forward passes of the sample: per segment one for the maps, one per removed token, ``n`` layer passes
    per layer for value zeroing (= ``n`` forward passes), 3 for the gradients; with a pre-training head one pass
    per head over the sample."""
    cfg, dims = job.config, job.dims()
    c = cfg.get("contributions") or {}
    ex = segments_input(job)
    k = min(int(c.get("faithfulness_segments", 8)), max(1, ex.count))
    n = max(1, ex.longest)
    passes = k * (1 + int(c.get("ablated_tokens", 16)) + n + (3 if dims.mlm_head else 0))
    passes += k * dims.layers * dims.heads if dims.mlm_head else 0
    return passes * sum_flops(dims, costs.Examples.uniform(1, n))


def _cost(job, cost) -> costs.Estimate:
    """:func:`_flops` at the CPU's rate; memory: the model and one segment's maps and value-zeroing copies."""
    dims, n = job.dims(), max(1, segments_input(job).longest)
    maps = (3 * dims.layers * dims.heads * n * n + 32 * n * dims.hidden * 4) * 4 / MIB
    return costs.BASE_TORCH_MB + dims.weights_mb + maps, costs.STARTUP_S + _flops(job) / costs.CPU_FLOPS, 1.0


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("faithfulness", (table("faithfulness.csv"), table("faithfulness.md"), table("head_ablation.csv")),
         switch="contributions", env="torch", beyond=True, summary=table("faithfulness.summary.json"),
         pages=(Page(table("faithfulness.md"), "faithfulness.html", BEYOND,
                     "Which measure to trust: agreement with token ablations", caption="faithfulness.rst",
                     subcategory=FAITHFULNESS_SUB),),
         cost=costs.Cost(estimate=_cost, flops=_flops),
         golden=(GoldenTable("faithfulness", table("faithfulness.csv"), ("measure", "ground_truth")),
                 GoldenTable("head_ablation", table("head_ablation.csv"), ("layer", "head")))),
    # the figure, drawn from the table in the analysis env (the model's env has no matplotlib)
    Step("faithfulness_figure", (figure("fig_faithfulness.png"),), switch="contributions", beyond=True,
         pages=(figure_page("fig_faithfulness.png", BEYOND, "Figure: which measure to trust",
                            caption="fig_faithfulness.rst", subcategory=FAITHFULNESS_SUB),),
         cost=costs.PLOT_GATHER),
)

_HELP = """\
Which measure to trust: on a seeded sample of segments, remove sampled tokens one at a time (the sequence
one shorter) and compare what it does with what each measure of i <- j says: attention (last layer and
mean over layers, head mean), norm-based maps, rollout, ALTI, ALTI rollout, value zeroing (last layer and
its rollout) and gradient x attention. Ground truths: the change of every other token's final-layer
representation (1 - cos) and the change of the model's loss (masked-LM at the seeded masked positions of
the gradients step, or next-token for a decoder). Spearman correlations averaged over the columns (one
per removed token), 95% percentile bootstrap intervals over segments. Heads: the loss change of removing
each head (mean or zero ablation) against the head report's gradient importance. A model without its
pre-training head (the offline MiniLM) has no loss: those rows say "not run" and why.

inputs:
  --segments JSONL   segments (corpora step)
  --model SPEC       the run's model (hub id, local dir, package:MODULE) [--revision]

outputs (all required; written only when everything was computed):
  --out-table CSV    faithfulness.csv: measure,kind,ground_truth,spearman,ci_low,ci_high,n_segments,n_pairs,note
  --out-markdown MD  the report page "Which measure to trust"
  --out-heads CSV    head_ablation.csv: layer,head,loss_change,abs_loss_change,gradient_importance,
                     gradient_importance_raw,rank_loss_change,rank_gradient_importance,note
  --summary JSON     sample, seed, seconds per part, excluded segments and tokens with reasons

the figure (no model: the analysis env):
  --figure-from CSV --out-figure PNG   the correlations with their intervals per measure, from faithfulness.csv

Definitions: docs/definitions.md#which-measure-to-trust-faithfulness
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``faithfulness`` subcommand."""
    p = add_step_parser(subparsers, "faithfulness", COMMANDS["faithfulness"], _HELP)
    p.add_argument("--segments", default=None, metavar="JSONL", help="segments JSONL (input)")
    add_model_arguments(p, required=False)
    for flag, what in (("--out-table", "faithfulness.csv"), ("--out-markdown", "faithfulness.md"),
                       ("--out-heads", "head_ablation.csv"), ("--summary", "faithfulness.summary.json")):
        p.add_argument(flag, default=None, metavar=flag.rsplit("-", 1)[-1].upper(), help=f"{what} (output)")
    add_figure_arguments(p, table="faithfulness.csv", figure="fig_faithfulness.png")
    p.add_argument("--n-segments", type=int, default=8,
                   help="segments in the seeded sample (contributions.faithfulness_segments; default 8)")
    p.add_argument("--ablated-tokens", type=int, default=16,
                   help="tokens removed one at a time per segment (contributions.ablated_tokens; default 16)")
    p.add_argument("--head-ablation", choices=("mean", "zero"), default="mean",
                   help="a head's output replaced by its mean over the sample's tokens, or by 0 (default mean)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples over segments (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the samples, the masks and the resamples (default 0)")
    p.add_argument("--segment-ids", choices=("zeros", "pair"), default="zeros",
                   help="token type ids: zeros or pair (default zeros)")
    p.add_argument("--value-zeroing-layers", choices=("all", "last"), default="all",
                   help="value zeroing of every layer (and its rollout) or of the last layer only: n layer passes "
                        "per segment instead of layers x n (default all)")
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda", help="device (default auto)")
    p.set_defaults(func=_run)
    return p


def _run(args: argparse.Namespace) -> int:
    if args.figure_from and not args.segments:  # the figure's call (tests/test_envs.py decides this test)
        return draw_figure_from(args, "faithfulness", _figure)
    return _compute(args)


def _figure():
    from bertlook.reporting.faithfulness_figure import fig_faithfulness

    return fig_faithfulness


def _compute(args: argparse.Namespace) -> int:
    """The model's part: the tables, the report page and the summary (written once all is computed)."""
    from bertlook.analyses.faithfulness import FaithfulnessOptions, faithfulness_markdown, run_faithfulness
    from bertlook.io_utils import json_safe, write_csv, write_json, write_text

    check_no_figure(args, "faithfulness")
    outs = [args.out_table, args.out_markdown, args.out_heads, args.summary]
    if not (args.segments and args.model and all(outs)):
        raise BertlookError("faithfulness: give --segments, --model, --out-table, --out-markdown, --out-heads and "
                            "--summary (the figure: --figure-from CSV --out-figure PNG)")
    if len(set(outs)) != len(outs):
        raise BertlookError("faithfulness: the output paths must differ")
    options = FaithfulnessOptions(segments=args.n_segments, ablated_tokens=args.ablated_tokens,
                                  head_ablation=args.head_ablation, bootstrap=args.bootstrap, seed=args.seed,
                                  segment_ids=args.segment_ids, device=args.device, revision=args.revision,
                                  value_zeroing_layers=args.value_zeroing_layers)
    result = run_faithfulness(args.segments, args.model, options)
    markdown = faithfulness_markdown(result.table, result.summary)
    write_csv(args.out_table, result.table)
    write_text(args.out_markdown, markdown)
    write_csv(args.out_heads, result.heads)
    write_json(args.summary, json_safe(result.summary))
    s = result.summary
    best = result.table.dropna(subset=["spearman"])
    best = best[best["ground_truth"] == "representation_change"].sort_values("spearman", ascending=False)
    top = ", ".join(f"{r.measure} {r.spearman:+.2f}" for r in best.head(3).itertuples())
    print(f"faithfulness: {len(s['sample_ids'])} segments, {s['n_removed_tokens']} removed tokens, "
          f"{s['seconds_total']:.1f} s on {s['device']}; representation change, best: {top}")
    if s["reason"]:
        print(f"faithfulness: loss ground truth and head ablation: {s['reason']}")
    for path in outs:
        print(f"wrote {path}")
    return 0
