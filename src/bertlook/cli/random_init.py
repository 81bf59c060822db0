"""CLI of bertlook.attention.random_init: ``random-init``."""

from __future__ import annotations

import argparse

from bertlook.attention.random_init import PROVENANCE_FILE


def _run_random_init(args: argparse.Namespace) -> int:
    from bertlook.attention.random_init import make_random_init_model

    prov = make_random_init_model(args.model, args.out, seed=args.seed, revision=args.revision)
    print(
        f"random-init: {prov['source_model']['spec']} -> {args.out} (seed {args.seed}; kept "
        f"{', '.join(prov['kept_parameters'])}; re-initialised {len(prov['reinitialized_parameters'])} tensors)"
    )
    return 0


def register_cli(subparsers) -> None:
    """Add the ``random-init`` subcommand."""
    p = subparsers.add_parser(
        "random-init",
        help="random-init baseline model: pretrained word/position embeddings, all other weights random (Table 3)",
        description=(
            "Load a pretrained model, re-initialise every weight except the word and position "
            "embeddings with the model's own initialiser (seeded), and save it with its tokenizer. "
            "Input: --model (hub id, local directory or package:MODULE; --revision for hub ids). "
            f"Output: --out (a Hugging Face model directory with {PROVENANCE_FILE}: source model "
            "provenance, seed, kept and re-initialised parameters). Extract its word-level attention "
            "with `bertlook extract-words --model DIR` for the random-init probe, or skip the copy: "
            "`bertlook extract-words --model SPEC --random-init-seed SEED` re-initialises in memory and "
            "gives bit-identical maps (what the workflow does)."
        ),
    )
    p.add_argument("--model", required=True, metavar="SPEC", help="input: pretrained model spec")
    p.add_argument("--revision", default=None, metavar="REV", help="hub revision (hub ids only)")
    p.add_argument("--out", required=True, metavar="DIR", help="output: model directory")
    p.add_argument("--seed", type=int, default=0, help="seed of the re-initialisation (default 0)")
    p.set_defaults(func=_run_random_init)
