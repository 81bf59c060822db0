"""CLI of bertlook.attention.extraction: ``extract-segments`` (and, through :mod:`bertlook.cli.sharding`,
``merge-stores`` and ``gather-extraction``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertlook.attention.extraction import SEGMENT_ID_MODES
from bertlook.cli._args import add_batch_arguments, add_model_arguments, add_shard_argument


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``extract-segments`` subcommand."""
    p = subparsers.add_parser(
        "extract-segments",
        help="extract token-level attention maps of a model into an attention store",
        description=(
            "Run a model on paper-style segments ([CLS] A [SEP] B [SEP]) and store its attention maps.\n"
            "Input:  --segments segments.jsonl (from `bertlook segments`), a model spec.\n"
            "Output: --out DIR, an attention store (meta.json, index.jsonl, shard-*.bin: float16\n"
            "        [layer, head, from, to] per example, in length-sorted order; match by id);\n"
            "        --summary JSON with counts (excluded over-long examples), tokens/s, device.\n"
            "--norms-out DIR: also the norm-based maps of Kobayashi et al. 2020 (alpha * ||f(x)||, row-\n"
            "        normalised) of the same forward pass, in a second store (meta map 'norm'); the\n"
            "        summary gains `norms` (mean ||f(x)|| per layer and token class, as sums and counts)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--segments", required=True, help="segments JSONL (id, tokens, segment_ids per line)")
    add_model_arguments(p)
    p.add_argument("--out", required=True, help="output attention store directory (replaced atomically)")
    p.add_argument("--segment-ids", choices=SEGMENT_ID_MODES, default="zeros",
                   help="token type ids: zeros (authors' code, default) or pair (A=0, B=1)")
    add_batch_arguments(p, unit="examples", length_help="examples with more wordpieces are excluded and counted")
    p.add_argument("--summary", default=None, help="write the run summary to this JSON file")
    p.add_argument("--norms-out", default=None, metavar="DIR",
                   help="also write the norm-based maps (Kobayashi et al. 2020) to a store here (replaced atomically)")
    add_shard_argument(p, "segments")
    p.set_defaults(func=_cmd_extract)
    from bertlook.cli import sharding

    sharding.register_cli(subparsers)
    return p


def _cmd_extract(args) -> int:
    from bertlook.attention.extraction import extract_segments
    from bertlook.io_utils import write_json

    summary = extract_segments(
        args.segments, args.model, args.out, revision=args.revision, batch_size=args.batch_size,
        segment_ids=args.segment_ids, max_seq_len=args.max_seq_len, device=args.device, shard_mb=args.shard_mb,
        max_unk_rate=args.max_unk_rate, shard=args.shard, norms_out=args.norms_out,
    )
    if args.summary:
        write_json(args.summary, summary)
    print(
        f"extract-segments: {summary['n_examples']} examples ({summary['tokens']} tokens) -> {Path(args.out)}; "
        f"excluded {summary['excluded_too_long']} over {summary['max_seq_len']} wordpieces; "
        f"{summary['unk_tokens']} [UNK] tokens; "
        f"{summary['tokens_per_second']} tokens/s on {summary['device']}"
        + (f"; norm-based maps -> {Path(args.norms_out)}" if args.norms_out else "")
    )
    return 0
