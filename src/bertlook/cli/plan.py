"""``bertlook plan``: the cost of a configuration's run from each model's ``config.json`` (argparse glue and
printing; the plan is computed by :mod:`bertlook.pipeline.plan`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "plan": "what a configuration's run costs (parameters, downloads, GPU memory and hours, disk, partitions) "
            "from each model's config.json, before anything is downloaded",
}


def _profiles_root() -> Path:
    """The checkout whose profiles/ the plan reads: the working directory's, else the one this package lives in."""
    here = Path.cwd()
    if (here / "profiles" / "slurm" / "config.yaml").is_file():
        return here
    return Path(__file__).resolve().parents[3]


def _handler(args: argparse.Namespace) -> int:
    from bertlook.cli import declared_costs, declared_steps
    from bertlook.errors import BertlookError
    from bertlook.io_utils import write_json
    from bertlook.pipeline.config import load_config
    from bertlook.pipeline.plan import plan, plan_table

    config = load_config(args.config)
    if args.configs is not None and not Path(args.configs).is_dir():
        raise BertlookError(f"--configs {args.configs}: not a directory")
    result = plan(config, declared=declared_steps(), costs=declared_costs(), configs_dir=args.configs,
                  profile=args.profile, gpus=args.gpus, gpu_tflops=args.gpu_tflops, root=_profiles_root())
    result["config"]["path"] = str(args.config)
    if args.json:
        write_json(args.json, result)
    print(plan_table(result))
    if not result["totals"]["planned"]:
        print(f"error: {args.config}: every model is refused (reasons above)", file=sys.stderr)
        return 2
    return 0


def register_cli(subparsers) -> None:
    from bertlook.pipeline.plan import GPU_TFLOPS

    p = subparsers.add_parser(
        "plan",
        help=COMMANDS["plan"],
        description=(
            "Input: CONFIG (YAML) and each model's config.json only: from --configs DIR "
            "(DIR/<org>--<name>/config.json), a local or package model, the Hugging Face cache, else downloaded "
            "(that one file; a gated model needs HF_TOKEN). Output: a table per model (family, parameters, layers x "
            "heads, download size, GPU memory and time per model job and per model, CPU time, disk, jobs on a GPU / "
            "on CPUs) with the totals (GPU-hours, downloads, disk, wall time on one GPU and on --gpus GPUs) and the "
            "partition of each job (profiles/slurm); --json writes all of it. A model bertlook cannot analyse is a "
            "row 'refused: <reason>'. Exit 2 on a bad CONFIG or config.json, or when every model is refused."),
    )
    p.add_argument("config", help="configuration YAML (e.g. config/atlas.yaml)")
    p.add_argument("--configs", metavar="DIR", default=None,
                   help="folder of config.json files, DIR/<org>--<name>/config.json (tests/fixtures/atlas_configs)")
    p.add_argument("--json", metavar="OUT", default=None, help="write the whole plan as JSON")
    p.add_argument("--gpus", type=int, default=8, help="GPUs to compare one GPU with (default 8)")
    p.add_argument("--gpu-tflops", type=float, default=None,
                   help="effective TFLOP/s of one GPU on the eager forward passes (default: the configuration's "
                        f"extraction.gpu_tflops, else {GPU_TFLOPS:g})")
    p.add_argument("--profile", choices=("slurm", "default"), default="slurm",
                   help="the Snakemake profile whose partitions the table names (default slurm)")
    p.set_defaults(func=_handler)
