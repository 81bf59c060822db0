"""CLI of bertlook.analyses.gradients: ``gradients``."""

from __future__ import annotations

import argparse
import sys

from bertlook.cli._args import add_model_arguments, add_step_parser, shard_arg
from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv, write_json
from bertlook.pipeline import costs
from bertlook.pipeline.sharding import load_partial, save_partial
from bertlook.pipeline.steps import GoldenTable, Page, RUN_TABLES, Step, figure, figure_page, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "gradients": "gradient importance of attention to [SEP] / '. ,' / other tokens per layer (Fig 3)",
}


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("gradients", (table("sep_gradients.csv"), figure("fig3_sep_gradients.png")),
         pages=(Page(table("sep_gradients.csv"), "sep_gradients.html", "Tables",
                     "Gradients of attention to [SEP] per layer (Figure 3)", caption="sep_gradients.rst",
                     subcategory=RUN_TABLES),
                figure_page("fig3_sep_gradients.png", "Figures", "Figure 3 twin: gradients of attention to [SEP]",
                            caption="fig3_sep_gradients.rst")),
         golden=(GoldenTable("head_importance", table("head_importance.csv"), ("layer", "head")),),
         cost=costs.Cost(estimate=costs.gradients)),
)

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"gradients_shard": STEPS[0].cost}


_HELP = """\
Gradient importance of attention to [SEP] (twin of Fig 3): gradient of the masked-LM loss with
respect to every attention probability, averaged per layer for attention to [SEP], to "." / ","
and to other tokens, beside the attention mass itself. Needs a model with its pre-training
masked-LM head; for a checkpoint without one (e.g. the offline MiniLM sentence encoder) the
outputs say "not run" and why, and the command still exits 0.

inputs:
  --segments JSONL   segments (corpora step): [CLS] A [SEP] B [SEP] wordpieces
  --model SPEC       model with a masked-LM head (hub id, local dir, package:MODULE) [--revision]
  --partial NPZ      or: the partial sums of the shards of a sharded run (repeatable, shard order)

sharded runs (extraction.shards): `--shard I/K --out-partial NPZ` computes the sums and counts of the
I-th of K contiguous ranges of the segments (masks drawn as in one run), `--partial` adds them up.

outputs:
  --out-table CSV    layer,target,mean_abs_grad,attention_mass (3 targets per layer, layer 1-indexed);
                     not run: one row with empty numbers and a `note` column
  --out-figure PNG   Fig 3 twin: attention mass and mean |gradient| per layer and target
  --summary JSON     status ("ok" / "not run"), reason, settings, counts (masked tokens, excluded
                     segments), mean loss, timing, device, model provenance
  --out-importance CSV  optional: head_importance.csv, layer,head,importance,importance_raw: the mean
                     |dL/dxi_h| over the masked segments of a gate xi_h on head h's output (Michel et
                     al. 2019), importance = raw / l2 norm of its layer; not run: one row with a `note`

Definitions (masking procedure, loss, averaging): docs/definitions.md#gradient-importance-of-attention-to-sep.
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``gradients`` subcommand to an ``argparse`` subparsers object."""
    from bertlook.analyses.gradients import GRAD_AVERAGES, MASK_MODES, SEGMENT_ID_MODES, TARGET_TOKEN_MODES

    p = add_step_parser(subparsers, "gradients", COMMANDS["gradients"], _HELP)
    p.add_argument("--segments", default=None, metavar="JSONL", help="segments JSONL (input)")
    add_model_arguments(p, required=False)
    p.add_argument("--out-table", default=None, metavar="CSV", help="sep_gradients.csv (output)")
    p.add_argument("--out-figure", default=None, metavar="PNG", help="fig3_sep_gradients.png (output)")
    p.add_argument("--summary", default=None, metavar="JSON", help="summary JSON (output)")
    p.add_argument("--out-importance", default=None, metavar="CSV",
                   help="head_importance.csv (output, optional): per-head gradient importance (Michel et al. 2019)")
    p.add_argument("--shard", type=shard_arg, default=None, metavar="I/K",
                   help="only shard I of K: the I-th of K contiguous ranges of the segments used (with --out-partial)")
    p.add_argument("--out-partial", default=None, metavar="NPZ",
                   help="output: only the partial sums and counts (of --shard), no table or figure")
    p.add_argument("--partial", action="append", default=None, metavar="NPZ",
                   help="input: the shards' partial sums (repeatable, shard order) instead of --segments/--model")
    p.add_argument("--seed", type=int, default=0, help="seed of the masking generator (default 0)")
    p.add_argument("--batch-size", type=int, default=8, help="segments per batch (default 8)")
    p.add_argument("--max-examples", type=int, default=None, metavar="N",
                   help="use the first N segments of the file (default: all)")
    p.add_argument("--mask-rate", type=float, default=0.15,
                   help="fraction of the non-special tokens masked per segment (default 0.15)")
    p.add_argument("--mask-mode", choices=MASK_MODES, default="bert",
                   help="bert: 80%% [MASK] / 10%% unchanged / 10%% random token; mask_only: all [MASK] (default bert)")
    p.add_argument("--segment-ids", choices=SEGMENT_ID_MODES, default="zeros",
                   help="token type ids: zeros (authors' code) or pair (A = 0, B = 1) (default zeros)")
    p.add_argument("--target-tokens", choices=TARGET_TOKEN_MODES, default="original",
                   help="classify to-tokens by the original tokens or by the masked input (default original)")
    p.add_argument("--grad-average", choices=GRAD_AVERAGES, default="pooled",
                   help="pooled: mean over all entries of all segments; segment: mean of per-segment means (default pooled)")
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda", help="device (default auto)")
    p.set_defaults(func=_cli_gradients)
    return p


def _cli_gradients(args: argparse.Namespace) -> int:
    from bertlook.analyses.gradients import (
        PARTIAL_KIND, GradientOptions, gradient_partial, reduce_gradients, reduce_head_importance,
    )

    if args.partial and (args.segments or args.model):
        raise BertlookError("gradients: give --partial NPZ ... or --segments/--model, not both")
    if not args.partial and not (args.segments and args.model):
        raise BertlookError("gradients: give --segments and --model (or --partial NPZ ...)")
    options = GradientOptions(
        revision=args.revision, seed=args.seed, batch_size=args.batch_size,
        max_examples=args.max_examples, device=args.device, segment_ids=args.segment_ids,
        mask_rate=args.mask_rate, mask_mode=args.mask_mode, target_tokens=args.target_tokens,
        grad_average=args.grad_average,
    )
    if args.out_partial:
        if args.partial:
            raise BertlookError("gradients: --out-partial needs --segments and --model")
        meta, arrays = gradient_partial(args.segments, args.model, options, shard=args.shard)
        save_partial(args.out_partial, PARTIAL_KIND, meta, arrays)
        what = f"{meta['n_examples']} segments" if meta["status"] == "ok" else meta["reason"]
        print(f"gradients: partial sums ({what}) -> {args.out_partial}")
        return 0
    if args.shard is not None:
        raise BertlookError("gradients: --shard needs --out-partial")
    missing = [f for f, v in (("--out-table", args.out_table), ("--out-figure", args.out_figure),
                              ("--summary", args.summary)) if not v]
    if missing:
        raise BertlookError(f"gradients: give {', '.join(missing)} (or --out-partial)")
    if args.partial:
        partials = [load_partial(p, PARTIAL_KIND) for p in args.partial]
        where = list(args.partial)
    else:  # one run: the partial sums of all segments, reduced (= sep_gradient_importance)
        partials = [gradient_partial(args.segments, args.model, options)]
        where = [str(args.segments)]
    frame, summary = reduce_gradients(partials, where=where)
    importance = reduce_head_importance(partials, where=where)[0] if args.out_importance else None
    write_csv(args.out_table, frame)
    if importance is not None:
        write_csv(args.out_importance, importance)
    from bertlook.reporting.figures import fig3_sep_gradients

    fig3_sep_gradients(args.out_table, args.out_figure)
    write_json(args.summary, summary)
    if summary["status"] != "ok":
        print(f"gradients: {summary['reason']}", file=sys.stderr)
        also = f", {args.out_importance}" if args.out_importance else ""
        print(f"gradients: not run; wrote the note to {args.out_table}, {args.out_figure}, {args.summary}{also}")
        return 0
    sep = frame[frame["target"] == "[SEP]"]
    print(
        f"gradients: {summary['n_examples']} segments ({summary['masked_tokens']} masked tokens, "
        f"{summary['excluded_too_long']} too long, {summary['excluded_no_maskable_token']} without a maskable "
        f"token excluded), mean loss {summary['mean_loss']:.3f}, {summary['seconds']:.1f} s on "
        f"{summary['device']}; mean |grad| to [SEP] by layer: "
        + " ".join(f"{v:.2e}" for v in sep["mean_abs_grad"]) + f" -> {args.out_table}"
    )
    if importance is not None:
        top = importance.sort_values("importance_raw", ascending=False, kind="stable").head(3)
        print("gradients: head importance (mean |dL/dxi|), top heads: "
              + ", ".join(f"{r.layer}-{r.head} {r.importance_raw:.3g}" for r in top.itertuples())
              + f" -> {args.out_importance}")
    return 0
