"""CLI of :mod:`bertlook.reporting.manifest`: ``manifest`` (argparse glue and printing; the record is
built by the reporting module)."""

from __future__ import annotations

import argparse
import json

from bertlook.errors import BertlookError
from bertlook.io_utils import write_json
from bertlook.pipeline import costs
from bertlook.pipeline.config import validate_config


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "manifest": "write the provenance record manifest.json of a run",
}

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"manifest": costs.SMALL}


def _cli(args: argparse.Namespace) -> int:
    from bertlook.reporting.manifest import build_manifest

    config = validate_config(json.loads(args.config_json), source="--config-json")
    steps = {}
    for item in args.summary or []:
        name, sep, path = item.partition("=")
        if not sep:
            raise BertlookError(f"--summary {item!r}: expected NAME=PATH")
        steps[name] = path
    manifest = build_manifest(run=args.run, config=config, corpus_path=args.corpus,
                              attention_dir=args.attention, step_summaries=steps)
    write_json(args.out, manifest)
    print(f"wrote {args.out}")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "manifest",
        help=COMMANDS["manifest"],
        description="Inputs: the effective configuration (JSON), the Wikipedia dump file, the attention "
        "store (for model provenance) and the step summaries. Output: manifest.json.",
    )
    p.add_argument("--run", required=True, help="run name ({run_name}-{label})")
    p.add_argument("--config-json", required=True, help="the effective configuration as a JSON string")
    p.add_argument("--corpus", default=None,
                   help="Wikipedia dump file used by the run (omit for wikipedia.hf_dataset: the segments "
                        "summary's `corpus` entry is recorded instead)")
    p.add_argument("--attention", required=True,
                   help="attention store directory of the segments, or its meta.json (e.g. the gathered "
                        "attention/segments.meta.json of a sharded run)")
    p.add_argument("--summary", action="append", metavar="NAME=PATH", help="a step summary JSON (repeatable)")
    p.add_argument("--out", required=True, help="manifest.json to write")
    p.set_defaults(func=_cli)
