"""CLI of bertlook.attention.random_init: ``random-init``."""

from __future__ import annotations

import argparse

from bertlook.attention.random_init import DEFAULT_KEEP, KEEP_CHOICES, make_random_init_model, PROVENANCE_FILE
from bertlook.cli._args import add_model_arguments


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "random-init": "random-init baseline model: pretrained word/position embeddings, all other weights random (Table 3)",
}


def _run_random_init(args: argparse.Namespace) -> int:
    prov = make_random_init_model(args.model, args.out, seed=args.seed, revision=args.revision, keep=args.keep)
    print(
        f"random-init: {prov['source_model']['spec']} -> {args.out} (seed {args.seed}; keep {prov['keep']}: kept "
        f"{', '.join(prov['kept_parameters']) or 'nothing'} ({prov['n_kept_elements']} values); re-initialised "
        f"{len(prov['reinitialized_parameters'])} tensors ({prov['n_reinitialized_elements']} values))"
    )
    return 0


def register_cli(subparsers) -> None:
    """Add the ``random-init`` subcommand."""
    p = subparsers.add_parser(
        "random-init",
        help=COMMANDS["random-init"],
        description=(
            "Load a pretrained model, re-initialise every weight except the word and position "
            "embeddings (--keep embeddings, the paper's reading; --keep none: those too) with the model's "
            "own initialiser (seeded), and save it with its tokenizer. "
            "Input: --model (hub id, local directory or package:MODULE; --revision for hub ids). "
            f"Output: --out (a Hugging Face model directory with {PROVENANCE_FILE}: source model "
            "provenance, seed, keep, kept and re-initialised parameters). Extract its word-level attention "
            "with `bertlook extract-words --model DIR` for the random-init probe, or skip the copy: "
            "`bertlook extract-words --model SPEC --random-init-seed SEED [--random-init-keep KEEP]` "
            "re-initialises in memory and gives bit-identical maps (what the workflow does)."
        ),
    )
    add_model_arguments(p, help="input: pretrained model spec")
    p.add_argument("--out", required=True, metavar="DIR", help="output: model directory")
    p.add_argument("--seed", type=int, default=0, help="seed of the re-initialisation (default 0)")
    p.add_argument("--keep", choices=KEEP_CHOICES, default=DEFAULT_KEEP,
                   help="keep the pretrained word and position embeddings (embeddings, the paper's reading, "
                        "default) or re-initialise every weight (none)")
    p.set_defaults(func=_run_random_init)
