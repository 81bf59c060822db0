"""``bertlook head-detectors``: argparse glue, files and printing of :mod:`bertlook.analyses.head_detectors`."""

from __future__ import annotations

import argparse

from bertlook.cli._args import add_model_arguments, add_model_dtype_argument, add_step_parser
from bertlook.io_utils import write_csv, write_json, write_text
from bertlook.pipeline import costs
from bertlook.pipeline.steps import BEYOND, CARD_SUB, GoldenTable, Page, Step, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "head-detectors": "previous-token, duplicate-token and induction heads and the sink share on repeated random tokens",
}

#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("head_detectors", (table("head_detectors.csv"), table("head_detectors.md")), switch="head_detectors",
         env="torch", beyond=True, summary=table("head_detectors.summary.json"),
         pages=(Page(table("head_detectors.md"), "head_detectors.html", BEYOND,
                     "Head detectors: previous-token, duplicate-token, induction heads", subcategory=CARD_SUB),),
         golden=(GoldenTable("head_detectors", table("head_detectors.csv"), ("layer", "head")),),
         # one forward pass over the detectors' sequences; no store
         cost=costs.Cost(estimate=costs.forward_pass, examples=costs.detector_sequences, batch=costs.detector_batch,
                         stores=costs.no_store, disk_mb=1.0)),
)

_DESCRIPTION = """\
Head detectors (Olsson et al. 2022) on sequences of random tokens repeated once, in the tokenizer's own
template ([CLS] ... [SEP], <s> ..., or nothing): per head the mean attention to the previous token
(prev_token), to the earlier occurrence of the current token (duplicate_token), to the token after it
(induction), and to the first token (sink; Xiao et al. 2023). Encoders and decoder-only models alike.

inputs:
  --model SPEC        hub id, local directory or package:MODULE [--revision]
outputs:
  --out CSV           head_detectors.csv: layer,head,prev_token,duplicate_token,induction,sink (1-indexed)
  --out-markdown MD   the top heads of each detector, the heads above --threshold, uniform-attention scores
  --summary JSON      settings, family (encoder | decoder), detected and top heads per detector, the score
                      of uniform attention, the sink share per layer, model provenance, timing

Definitions: docs/definitions.md#head-detectors.
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``head-detectors`` subcommand."""
    p = add_step_parser(subparsers, "head-detectors", COMMANDS["head-detectors"], _DESCRIPTION)
    add_model_arguments(p)
    p.add_argument("--out", required=True, metavar="CSV", help="output: head_detectors.csv")
    p.add_argument("--out-markdown", required=True, metavar="MD", help="output: head_detectors.md")
    p.add_argument("--summary", required=True, metavar="JSON", help="output: summary JSON")
    p.add_argument("--n-sequences", type=int, default=50, metavar="N", help="sequences scored (default 50)")
    p.add_argument("--length", type=int, default=25, metavar="K",
                   help="distinct random tokens per copy; a sequence holds 2K of them (default 25)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random tokens (default 0)")
    p.add_argument("--batch-size", type=int, default=16, metavar="B", help="sequences per forward pass (default 16)")
    p.add_argument("--threshold", type=float, default=0.5, metavar="X",
                   help="a head is listed as detected when its score exceeds X (default 0.5)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:N] (default auto)")
    add_model_dtype_argument(p)
    p.set_defaults(func=_run)
    return p


def _markdown(frame, summary) -> str:
    from bertlook.analyses.head_detectors import DETECTORS

    det = summary["detectors"]
    lines = [f"# Head detectors: {summary['model']} ({summary['family']})", "",
             f"{summary['n_sequences']} sequences of {summary['length']} random tokens repeated once "
             f"({summary['n_positions']} positions with the tokenizer's special tokens); a head is detected when "
             f"its score exceeds {summary['threshold']}.", "",
             "| detector | detected heads | top heads (score) | uniform attention |", "|---|---|---|---|"]
    for name in DETECTORS:
        d = det[name]
        top = ", ".join(f"{t['head']} ({t['score']:.3f})" for t in d["top_heads"])
        lines.append(f"| {name} | {d['n_detected']} | {top} | {d['uniform_attention_score']:.3f} |")
    lines += ["", "Sink share per layer (mean over heads of the attention to the first token): "
              + ", ".join(f"L{i + 1} {v:.3f}" for i, v in enumerate(summary["sink_share_per_layer"])), ""]
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    from bertlook.analyses.head_detectors import DetectorOptions, run_head_detectors

    options = DetectorOptions(n_sequences=args.n_sequences, length=args.length, seed=args.seed,
                              batch_size=args.batch_size, threshold=args.threshold, device=args.device,
                              model_dtype=args.model_dtype)
    result = run_head_detectors(args.model, options, revision=args.revision)
    summary = result.summary
    write_csv(args.out, result.frame)
    write_text(args.out_markdown, _markdown(result.frame, summary))
    write_json(args.summary, summary)
    counts = ", ".join(f"{name} {d['n_detected']}" for name, d in summary["detectors"].items())
    print(f"head-detectors: {len(result.frame)} heads of {summary['model']} ({summary['family']}), "
          f"{summary['n_sequences']} sequences; heads above {summary['threshold']}: {counts} "
          f"-> {args.out}, {args.out_markdown}, {args.summary}")
    return 0
