"""``bertlook fetch CONFIG``: fetch every input of a configuration before a cluster run.

The fetching lives in :mod:`bertlook.data.fetch` (models: :mod:`bertlook.attention.model_fetch`); this module
holds the argparse glue and printing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "fetch": "download every input of a configuration (models, dump, UD, GloVe) before a cluster run",
}


def _handler(args: argparse.Namespace) -> int:
    import functools

    from bertlook.attention.model_fetch import fetch_model
    from bertlook.data.fetch import fetch_config
    from bertlook.pipeline.config import load_config

    config = load_config(args.config)
    out = fetch_config(config, fetch_model=functools.partial(fetch_model, echo=print), retries=args.retries,
                       timeout=args.timeout, summary=args.summary)
    where = args.summary or Path(config["resources_dir"]) / "fetch.json"
    if out["errors"]:
        for line in out["errors"]:
            print(f"error: {line}", file=sys.stderr)
        print(f"error: {args.config}: {len(out['errors'])} input(s) could not be fetched; summary: {where}",
              file=sys.stderr)
        return 2
    print(f"{args.config}: every input is in place; summary: {where}")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "fetch",
        help=COMMANDS["fetch"],
        description=(
            "Input: CONFIG (YAML). Fetches every input where the workflow expects it: hub models at their "
            "pinned revision into the Hugging Face cache (safetensors, tokenizer and config files only; the disk "
            "space checked against the hub's file sizes first; gated models with the token of HF_TOKEN, "
            "never written anywhere), "
            "the Wikipedia dump, the UD treebank files and GloVe into resources_dir (checksums verified, "
            "with the {file}.download.json summaries of the download rules, so Snakemake schedules no "
            "download job); local paths and packages are checked. Files already there with a matching "
            "checksum are not downloaded again. Output: every file's sha256 on stdout and "
            "{resources_dir}/fetch.json. Exit 2 with an error: line per input that cannot be fetched (the others "
            "are fetched all the same)."
        ),
    )
    p.add_argument("config", help="configuration YAML (e.g. config.yaml)")
    p.add_argument("--retries", type=int, default=3, help="attempts per download (default 3)")
    p.add_argument("--timeout", type=float, default=60.0, help="socket timeout in seconds (default 60)")
    p.add_argument("--summary", metavar="JSON", default=None,
                   help="where to write the summary (default {resources_dir}/fetch.json)")
    p.set_defaults(func=_handler)
