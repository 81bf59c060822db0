"""Helpers shared by the CLI modules: a step's subparser, the flags of the model-running steps (``--model`` /
``--revision`` of every step that loads a model or its tokenizer, the batch flags, ``--max-unk-rate`` and
``--shard I/K``), ``--offsets`` of ``heads`` and ``rollout``, the Table 1 flags of ``rollout`` and ``contributions``
(:func:`add_table1_arguments`, :func:`table1_scoring`), the figure of a model step drawn by a second call
(:func:`add_figure_arguments`, :func:`draw_figure_from`).

Light imports only: :mod:`bertlook.attention.guards` and :mod:`bertlook.pipeline.sharding` import
the standard library alone at module level.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable

from bertlook.attention.guards import DEFAULT_MAX_UNK_RATE, check_max_unk_rate
from bertlook.errors import BertlookError
from bertlook.pipeline.sharding import parse_shard

MODEL_HELP = "input: model spec: hub id, local model directory, or package:MODULE"


def add_step_parser(subparsers, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """The subcommand ``name`` with its one-line ``help``; its ``--help`` prints ``description`` as written
    (line breaks and indentation kept)."""
    return subparsers.add_parser(name, help=help, description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)


def add_model_arguments(p, *, required: bool = True, help: str = MODEL_HELP) -> None:
    """--model / --revision, shared by every step that runs a model (or reads its tokenizer); ``required=False``:
    ``--model`` defaults to None (a step that can read partial sums instead)."""
    p.add_argument("--model", required=required, default=None, metavar="SPEC", help=help)
    p.add_argument("--revision", default=None, metavar="REV",
                   help="hub revision (branch, tag or commit) for a hub id")


def add_batch_arguments(p, *, unit: str, length_help: str) -> None:
    """--batch-size / --max-seq-len / --device / --shard-mb of the attention-extraction steps."""
    p.add_argument("--batch-size", type=int, default=16, help=f"{unit} per forward pass (default 16)")
    p.add_argument("--max-seq-len", type=int, default=128, help=f"{length_help} (default 128)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default auto")
    p.add_argument("--shard-mb", type=float, default=256, help="attention shard file size in MiB (default 256)")
    add_model_dtype_argument(p)
    add_unk_argument(p)


def add_model_dtype_argument(p) -> None:
    """--model-dtype of the steps that load a model for its maps."""
    p.add_argument("--model-dtype", choices=("float32", "auto"), default="float32",
                   help="weights in float32 (default), or auto: on a GPU the checkpoint's own dtype (bfloat16 / "
                        "float16: half the memory of a large model; float32 on the CPU)")


def _rate_arg(text: str) -> float:
    try:
        return check_max_unk_rate(text)
    except BertlookError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_unk_argument(p) -> None:
    """--max-unk-rate (extraction.max_unk_rate): stop above this fraction of unknown tokens."""
    p.add_argument("--max-unk-rate", type=_rate_arg, default=DEFAULT_MAX_UNK_RATE, metavar="RATE",
                   help="stop, before running the model, when more than this fraction (0..1) of the "
                        f"non-special tokens is the tokenizer's unknown token [UNK] (default {DEFAULT_MAX_UNK_RATE})")


def shard_arg(text: str) -> tuple[int, int]:
    """argparse ``type`` of ``--shard``."""
    try:
        return parse_shard(text)
    except BertlookError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_shard_argument(p, what: str) -> None:
    """--shard I/K (extraction.shards): only the I-th of K contiguous ranges of the input."""
    p.add_argument("--shard", type=shard_arg, default=None, metavar="I/K",
                   help=f"extract only shard I of K: the I-th of K contiguous ranges of the {what} by index "
                        "(the summary then holds what `gather-extraction` / `merge-stores` need)")


def offsets_arg(text: str) -> tuple[int, ...]:
    """argparse ``type`` of ``--offsets`` (``heads``, ``rollout``): comma-separated baseline offsets."""
    from bertlook.analyses.heads import parse_offsets

    try:
        return parse_offsets(s.strip() for s in str(text).split(",") if s.strip())
    except BertlookError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_table1_arguments(p, *, treebank_kind: str | None) -> None:
    """How Table 1 is scored (:class:`bertlook.analyses.table1.Table1Scoring`, but ``--seed``, whose meaning is the
    step's): --min-count, --offsets, --poss-from-possessive, --bootstrap, --confidence, and --treebank-kind with
    the default ``treebank_kind`` (None: the word store's meta)."""
    from bertlook.analyses.heads import DEFAULT_OFFSETS, TREEBANK_KINDS

    p.add_argument("--min-count", type=int, default=100,
                   help="relations with fewer words are not rows (except the scheme's forced rows; default 100)")
    p.add_argument("--offsets", type=offsets_arg, default=DEFAULT_OFFSETS, metavar="K,K,...",
                   help="baseline offsets (default -3,-2,-1,1,2,3)")
    p.add_argument("--poss-from-possessive", action=argparse.BooleanOptionalAction, default=True,
                   help="score a poss word with the prediction made from the following 's (default: on, as heads)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates over sentences (0 = no CI; default 1000)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    p.add_argument("--treebank-kind", choices=sorted(TREEBANK_KINDS), default=treebank_kind,
                   help="where the trees come from (default: " + (treebank_kind or "the word store's meta "
                                                                   "'treebank_kind'") + ")")


def table1_scoring(args: argparse.Namespace) -> dict[str, Any]:
    """The fields of :class:`bertlook.analyses.table1.Table1Scoring` from the flags of the same names."""
    from bertlook.analyses.table1 import Table1Scoring

    return {f.name: getattr(args, f.name) for f in dataclasses.fields(Table1Scoring)}


def add_figure_arguments(p, *, table: str, figure: str) -> None:
    """--figure-from CSV / --out-figure PNG of a model step whose figure is drawn by a second call from its table
    alone, in the analysis environment (the model's has no matplotlib): :func:`draw_figure_from`."""
    p.add_argument("--figure-from", default=None, metavar="CSV",
                   help=f"input: {table}; draw --out-figure only (no model)")
    p.add_argument("--out-figure", default=None, metavar="PNG", help=f"output: {figure}, with --figure-from")


def draw_figure_from(args: argparse.Namespace, step: str, load: Callable[[], Callable[[Any, Any], Any]]) -> int:
    """The second call of a model step: ``--out-figure`` drawn from the table ``--figure-from`` alone (no model), by
    the function ``load()`` imports. The handler calls it under ``if args.figure_from and not args.segments:``, a
    test of flags that tests/test_envs.py decides by the rule's flags (the model's rule names --segments): the
    plotting import stays in a branch the model environment (no matplotlib) never takes. The model's call checks
    :func:`check_no_figure`."""
    if not args.out_figure or args.model:
        raise BertlookError(f"{step}: --figure-from CSV takes --out-figure PNG only")
    load()(args.figure_from, args.out_figure)
    print(f"wrote {args.out_figure}")
    return 0


def check_no_figure(args: argparse.Namespace, step: str) -> None:
    """The model's call of a step with :func:`add_figure_arguments`: no figure flag (the figure is a second call)."""
    if args.figure_from or args.out_figure:
        raise BertlookError(f"{step}: --figure-from CSV takes --out-figure PNG only (a second call, without the "
                            "model and its inputs)")
