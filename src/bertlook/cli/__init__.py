"""``bertlook <step> ...``: every pipeline step as a command-line subcommand.

One module per step in this package (``bertlook.cli.<step>``) exposes ``register_cli(subparsers)``
with the step's argparse glue, summaries and printing; the computation lives in the stage
packages. Handlers return an exit code. User errors (:class:`bertlook.errors.BertlookError`) print ``error: ...`` and exit 2 without a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from bertlook import __version__
from bertlook.errors import BertlookError

# Modules registering subcommands, in pipeline order.
STEP_MODULES = [
    "bertlook.cli.preflight",
    "bertlook.cli.download",
    "bertlook.cli.fetch",
    "bertlook.cli.segments",
    "bertlook.cli.extract_segments",
    "bertlook.cli.treebank",
    "bertlook.cli.extract_words",
    "bertlook.cli.surface_stats",
    "bertlook.cli.cluster_heads",
    "bertlook.cli.figures",
    "bertlook.cli.heads",
    "bertlook.cli.random_init",
    "bertlook.cli.probes",
    "bertlook.cli.coref",
    "bertlook.cli.gradients",
    "bertlook.cli.manifest",
    "bertlook.cli.compare",
    "bertlook.cli.resources",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertlook",
        description="Re-run 'What Does BERT Look At?' (Clark et al., 2019) step by step. "
        "Each subcommand is one pipeline step; `bertlook STEP --help` lists its inputs and outputs.",
    )
    parser.add_argument("--version", action="version", version=f"bertlook {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="step", metavar="STEP")
    for name in STEP_MODULES:
        importlib.import_module(name).register_cli(sub)
    return parser


def _close_progress_bars() -> None:
    """Finish the progress bars of a failed step, so its ``error:`` line starts a line of the log."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", None) or ()):
        bar.close()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except BertlookError as err:
        _close_progress_bars()
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
