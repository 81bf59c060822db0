"""CLI of :mod:`bertlook.reporting.atlas`: ``atlas`` (argparse glue and printing; the reading lives in the
reporting modules)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertlook.pipeline import costs

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "atlas": "every model of a configuration on one page: atlas.html, atlas.csv, atlas.json",
}

#: what the job of the rule ``atlas`` (workflow/rules/atlas.smk, every model's run) costs (bertlook.pipeline.costs)
COSTS = {"atlas": costs.SMALL}


def _load_config(path: str) -> dict:
    """The validated configuration of ``path``: YAML (strict), or JSON (the workflow's dump of its validated
    config: read as JSON, since a YAML 1.1 reader takes a number such as ``1e-09`` for a string)."""
    import json

    from bertlook.errors import BertlookError
    from bertlook.pipeline.config import load_config, validate_config

    if Path(path).suffix.lower() != ".json":
        return load_config(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BertlookError(f"{path}: not a readable JSON configuration: {err}") from None
    if not isinstance(data, dict):
        raise BertlookError(f"{path}: a configuration must be a mapping")
    return validate_config(data, source=str(path))


def _cmd_atlas(args: argparse.Namespace) -> int:
    from bertlook.reporting.atlas import atlas_data, write_atlas
    from bertlook.reporting.atlas_runs import FAILED, INCOMPLETE, NOT_RUN, RAN

    config = _load_config(args.config)  # a bad CONFIG: BertlookError, exit 2 (nothing written)
    out = Path(args.out) if args.out else Path(config["results_dir"]) / f"{config['run_name']}-atlas"
    data = atlas_data(config)
    paths = write_atlas(data, out)
    for rec in data["models"]:
        if rec["status"] in (FAILED, INCOMPLETE):
            print(f"atlas: {rec['label']}: {rec['status']}: {rec['reason']}")
        for problem in rec["problems"]:
            print(f"atlas: {rec['label']}: warning: left out: {problem}")
    c = data["counts"]
    print(f"atlas: {len(data['models'])} model(s): {c[RAN]} ran, {c[FAILED]} did not run, {c[INCOMPLETE]} "
          f"incomplete, {c[NOT_RUN]} not run yet -> {paths['html']}, {paths['csv']}, {paths['json']}")
    return 0


def register_cli(subparsers) -> None:
    """Add ``atlas``."""
    p = subparsers.add_parser(
        "atlas", help=COMMANDS["atlas"],
        description="Input: a configuration (YAML, or the JSON the workflow writes) and whatever run directories "
        "{results_dir}/{run_name}-{label} of its models exist. Outputs (--out, default "
        "{results_dir}/{run_name}-atlas/): atlas.html (self-contained: a sortable models x metrics table with "
        "family filters, a metric against parameter count, profiles against relative depth, a link to each "
        "model's explorer), atlas.csv (one row per model) and atlas.json (the data; bertlook.open_atlas reads it "
        "as one tidy frame). A model whose run has no manifest.json is a row that says why: the first `error:` "
        "line of its logs (newest first), or `not run yet`. Never fails because a model failed; exit 2 only on "
        "a bad CONFIG or an unwritable --out.",
    )
    p.add_argument("config", metavar="CONFIG", help="the configuration whose models: list the atlas shows")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (default {results_dir}/{run_name}-atlas)")
    p.set_defaults(func=_cmd_atlas)
