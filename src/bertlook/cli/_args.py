"""Helpers shared by the CLI modules: a step's subparser, the flags of the model-running steps (``--model`` /
``--revision`` of every step that loads a model or its tokenizer, the batch flags, ``--max-unk-rate`` and
``--shard I/K``), ``--offsets`` of ``heads`` and ``rollout``.

Light imports only: :mod:`bertlook.attention.guards` and :mod:`bertlook.pipeline.sharding` import
the standard library alone at module level.
"""

from __future__ import annotations

import argparse

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
