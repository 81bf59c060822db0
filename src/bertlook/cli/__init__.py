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

#: The lazy registry: subcommand -> (module that registers it, one-line help), in pipeline order.
#: ``bertlook --help`` lists these without importing any step module; ``bertlook STEP ...`` imports
#: only STEP's module (whose computation modules import numpy/pandas/torch at the top).
#: tests/test_layout.py checks that each module registers exactly its names with the same help.
STEPS: dict[str, tuple[str, str]] = {
    "validate-config": ("bertlook.cli.preflight", "check a configuration file against the schema"),
    "runs": ("bertlook.cli.preflight", "print the run names of a configuration, one per line"),
    "preflight": ("bertlook.cli.preflight", "check that every model and corpus of a configuration can be reached"),
    "download": ("bertlook.cli.download",
                 "download a file (e.g. the Wikipedia dump) with retries and checksum verification"),
    "fetch": ("bertlook.cli.fetch",
              "download every input of a configuration (models, dump, UD, GloVe) before a cluster run"),
    "segments": ("bertlook.cli.segments", "Wikipedia dump -> paper-style [CLS] A [SEP] B [SEP] segments (JSONL)"),
    "extract-segments": ("bertlook.cli.extract_segments",
                         "run a model once over the segments: attention stores and the statistics of the same pass"),
    "merge-stores": ("bertlook.cli.extract_segments",
                     "gather the shard stores of a sharded extraction into one attention store"),
    "gather-extraction": ("bertlook.cli.extract_segments",
                          "gather the summaries of a sharded segment extraction (no maps needed)"),
    "treebank": ("bertlook.cli.treebank", "dependency trees (local PTB-SD/UD files, a UD release, or silver spaCy "
                                          "parses) -> train/dev CoNLL-U"),
    "extract-words": ("bertlook.cli.extract_words",
                      "extract word-level attention maps of treebank sentences into an attention store"),
    "surface-stats": ("bertlook.cli.surface_stats",
                      "per-head attention to [CLS]/[SEP]/punctuation/self/prev/next and entropies (Figs 2, 4)"),
    "cluster-heads": ("bertlook.cli.cluster_heads",
                      "Jensen-Shannon divergences between heads, 2-D MDS embedding, behaviour labels (Fig 6)"),
    "figures": ("bertlook.cli.figures", "draw the PNG twins of the paper's Figs 1, 2, 4 and 6"),
    "fig1-example": ("bertlook.cli.figures",
                     "save the Fig 1 example of a sharded extraction, if this shard's store holds it"),
    "heads": ("bertlook.cli.heads", "per-head dependency accuracy, Table 1 twin (best head per relation vs offset "
                                    "baselines), Fig 5 twin"),
    "tree-heads": ("bertlook.cli.tree_heads",
                   "a whole dependency tree decoded from every single head (Htut et al. 2019): UAS, UUAS vs baselines"),
    "random-init": ("bertlook.cli.random_init", "random-init baseline model: pretrained word/position embeddings, "
                                                "all other weights random (Table 3)"),
    "probes": ("bertlook.cli.probes",
               "attention-based dependency parsing probes and baselines (Table 3), on the norm maps, ablations"),
    "probe-ablations": ("bertlook.cli.probe_ablations",
                        "per-layer ablations of the Attn+GloVe probe: which layers' attention carries its accuracy"),
    "coref-extract": ("bertlook.cli.coref", "CoNLL-2012 parts -> word-level attention store with gold mentions"),
    "coref": ("bertlook.cli.coref", "antecedent selection accuracy per head + baselines (Table 2 twin)"),
    "gradients": ("bertlook.cli.gradients",
                  "gradient importance of attention to [SEP] / '. ,' / other tokens per layer (Fig 3)"),
    "rollout": ("bertlook.cli.rollout",
                "attention rollout (Abnar & Zuidema 2020): per-layer shares and entropy, Table 1 on rollout maps"),
    "head-report": ("bertlook.cli.head_report",
                    "per-head report card: importance, confidence, positional, sink, entropy, behaviour, best relation"),
    "languages": ("bertlook.cli.languages",
                  "cross-language summary: each relation's best head per treebank and whether the treebanks share them"),
    "manifest": ("bertlook.cli.manifest", "write the provenance record manifest.json of a run"),
    "compare": ("bertlook.cli.compare", "a run's numbers against the paper's (comparison.csv / .md)"),
    "check-regression": ("bertlook.cli.compare", "exit 1 when a run regresses against the paper or a golden file"),
    "make-golden": ("bertlook.cli.compare", "write a golden JSON of every checked number of a run"),
    "models-summary": ("bertlook.cli.compare", "several runs (models) side by side: table, markdown, figure"),
    "resources": ("bertlook.cli.resources",
                  "per-rule measured resources (wall, CPU, RSS, I/O) of a run from its benchmark files"),
    "report-pages": ("bertlook.cli.report_pages",
                     "the HTML report's pages: tables as HTML (percents), figures as page-sized PNGs"),
}

#: Modules registering subcommands, in pipeline order.
STEP_MODULES = list(dict.fromkeys(module for module, _ in STEPS.values()))


def requested_step(argv: list[str] | None) -> str | None:
    """The subcommand named in ``argv`` (the first argument that is not an option), if any."""
    return next((a for a in (argv or []) if not a.startswith("-")), None)


def build_parser(step: str | None = None, *, full: bool = False) -> argparse.ArgumentParser:
    """The ``bertlook`` parser. Only ``step``'s module is imported (all of them with ``full``); every
    other subcommand is a stub with its help line, enough for ``bertlook --help``."""
    parser = argparse.ArgumentParser(
        prog="bertlook",
        description="Re-run 'What Does BERT Look At?' (Clark et al., 2019) step by step. "
        "Each subcommand is one pipeline step; `bertlook STEP --help` lists its inputs and outputs.",
    )
    parser.add_argument("--version", action="version", version=f"bertlook {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="step", metavar="STEP")
    load = set(STEP_MODULES) if full else {STEPS[step][0]} if step in STEPS else set()
    for name, (module, help_text) in STEPS.items():
        if name in sub.choices:
            continue  # registered with its module
        if module in load:
            importlib.import_module(module).register_cli(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def _close_progress_bars() -> None:
    """Finish the progress bars of a failed step, so its ``error:`` line starts a line of the log."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", None) or ()):
        bar.close()


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(requested_step(argv))
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
