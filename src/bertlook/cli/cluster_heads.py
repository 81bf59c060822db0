"""``bertlook cluster-heads``: argparse glue, summaries and printing of :mod:`bertlook.analyses.cluster_heads`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING
from bertlook.errors import BertlookError, check_at_least
from bertlook.io_utils import write_csv
from bertlook.pipeline import costs
from bertlook.pipeline.sharding import load_partial, save_partial
from bertlook.pipeline.steps import BEYOND, NORMS_SUB, Page, RUN_TABLES, Step, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "cluster-heads": "Jensen-Shannon divergences between heads, 2-D MDS embedding, behaviour labels (Fig 6)",
}


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("cluster_heads", (table("js_divergence.csv"), table("head_clusters.csv")), maps=("attention",), env="torch",
         pages=(Page(table("js_divergence.csv"), "js_divergence.html", "Tables",
                     "JS divergence between heads (Figure 6)", caption="js_divergence.rst", subcategory=RUN_TABLES),
                Page(table("head_clusters.csv"), "head_clusters.html", "Tables",
                     "Head embedding and behaviour labels (Figure 6)", caption="head_clusters.rst",
                     subcategory=RUN_TABLES)),
         cost=costs.STATS_GATHER),
    Step("cluster_heads_norm", (table("head_clusters_norm.csv"),), rule="cluster_heads", switch="norms",
         maps=("norm",), env="torch", beyond=True,
         pages=(Page(table("head_clusters_norm.csv"), "head_clusters_norm.html", BEYOND,
                     "Head embedding and behaviour labels, norm-based maps", caption="head_clusters_norm.rst",
                     subcategory=NORMS_SUB),)),
)


if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def _read_stats(path) -> "pd.DataFrame":
    import pandas as pd

    try:
        return pd.read_csv(path)
    except FileNotFoundError:
        raise BertlookError(f"{path}: statistics file not found") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as err:
        raise BertlookError(f"{path}: cannot read statistics CSV: {err}") from None


def _run_cluster(args: argparse.Namespace) -> int:
    from bertlook.analyses.cluster_heads import (
        PARTIAL_KIND,
        cluster_matrix,
        js_divergence_partial,
        reduce_js_divergence,
    )
    from bertlook.attention.store import open_store

    threads = args.threads
    if threads is None:
        import os

        env = os.environ.get("OMP_NUM_THREADS", "").strip()
        threads = int(env) if env.isdigit() and int(env) > 0 else 1
    check_at_least("--threads", threads, 1)
    check_at_least("--js-rows", args.js_rows, 1, optional=True)

    if bool(args.attention) == bool(args.partial):
        raise BertlookError("cluster-heads: give --attention DIR or --partial NPZ ... (one of them)")
    if args.out_partial:
        if not args.attention:
            raise BertlookError("cluster-heads: --out-partial needs --attention")
        meta, arrays = js_divergence_partial(open_store(args.attention), max_examples=args.max_examples,
                                             segments=args.segments, num_threads=threads, progress=True,
                                             rows=args.js_rows, seed=args.seed)
        save_partial(args.out_partial, PARTIAL_KIND, meta, arrays)
        print(f"cluster-heads: JS divergence sums of {meta['n_examples']} of {meta['n_examples_in_store']} examples "
              f"-> {args.out_partial}")
        return 0
    missing = [f for f, v in (("--stats", args.stats), ("--out-js", args.out_js), ("--out-clusters", args.out_clusters))
               if not v]
    if missing:
        raise BertlookError(f"cluster-heads: give {', '.join(missing)} (or --out-partial)")
    if args.partial:
        partials = [load_partial(p, PARTIAL_KIND) for p in args.partial]
        D, info = reduce_js_divergence(partials, where=args.partial)
    else:
        store = open_store(args.attention)
        meta, arrays = js_divergence_partial(store, max_examples=args.max_examples, segments=args.segments,
                                             num_threads=threads, progress=True, rows=args.js_rows, seed=args.seed)
        D, info = reduce_js_divergence([(meta, arrays)], where=[store.path])
    stats = _read_stats(args.stats)
    try:
        js_df, clusters_df = cluster_matrix(
            D, stats, info["num_layers"], info["num_heads"], seed=args.seed,
            n_init=args.mds_n_init, max_iter=args.mds_max_iter, eps=args.mds_eps,
        )
    except BertlookError as err:
        if str(err).startswith("statistics table"):
            raise BertlookError(f"{args.stats}: {err}") from None
        raise
    write_csv(args.out_js, js_df)
    write_csv(args.out_clusters, clusters_df)
    used, total = info["n_examples"], info["n_examples_in_store"]
    counts = clusters_df["behavior"].value_counts().to_dict()
    how = "" if info.get("estimator", "exact") == "exact" else f" (JS estimated from {info['rows']} rows per example)"
    print(
        f"cluster-heads: {used} of {total} examples{how}, {len(clusters_df)} heads -> "
        f"{args.out_js}, {args.out_clusters}; behaviours: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    return 0


def register_cli(subparsers) -> None:
    """Add the ``cluster-heads`` subcommand."""
    p = subparsers.add_parser(
        "cluster-heads",
        help=COMMANDS["cluster-heads"],
        description=(
            "Compare every pair of heads by the Jensen-Shannon divergence of their attention "
            "(summed over from-tokens and examples), embed the heads in 2-D with metric MDS and label "
            "their behaviour from the surface statistics. Inputs: --attention (attention store "
            "directory) or --partial (the summed matrices of the shards of a sharded extraction, from "
            "--out-partial), --stats (attention_stats.csv from `bertlook surface-stats`). Outputs: --out-js "
            "(K x K CSV, first column `head`, columns 'L-H') and --out-clusters (CSV: "
            "layer,head,x,y,behavior); or --out-partial (NPZ: the summed matrix of one store, no MDS)."
        ),
    )
    p.add_argument("--attention", default=None, metavar="DIR", help="input: attention store directory")
    p.add_argument("--partial", action="append", default=None, metavar="NPZ",
                   help="input: a shard's summed JS matrix (repeatable, shard order) instead of --attention")
    p.add_argument("--stats", default=None, metavar="CSV", help="input: per-head statistics (attention_stats.csv)")
    p.add_argument("--out-js", default=None, metavar="CSV", help="output: JS divergence matrix (js_divergence.csv)")
    p.add_argument("--out-clusters", default=None, metavar="CSV",
                   help="output: MDS coordinates and behaviour per head (head_clusters.csv)")
    p.add_argument("--out-partial", default=None, metavar="NPZ",
                   help="output: only the summed JS matrix of --attention (no MDS, no --stats needed)")
    p.add_argument("--segments", default=None, metavar="JSONL",
                   help="input: the segments file of the store: --max-examples N then means the first N "
                        "segments of this file")
    p.add_argument("--seed", type=int, default=0,
                   help="random seed of the MDS initialisation and of --js-rows' sampled rows (default 0)")
    p.add_argument("--js-rows", type=int, default=None, metavar="R",
                   help="estimate the JS sums from R sampled query rows per example (stratified, seeded with --seed "
                        "and the example id; docs/definitions.md: its measured error) instead of every row (the "
                        "default: the paper's exact definition); for long contexts")
    p.add_argument("--max-examples", type=int, default=None, metavar="N",
                   help="use only the first N segments of --segments (without it: the first N examples of "
                        "the store) (default: all)")
    p.add_argument("--mds-n-init", type=int, default=4, help="MDS restarts (default 4; released code: 5)")
    p.add_argument("--mds-max-iter", type=int, default=300, help="MDS iterations per restart (default 300; released: 1000)")
    p.add_argument("--mds-eps", type=float, default=1e-9, help="MDS convergence tolerance (default 1e-9; released: 1e-10)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="worker threads for the JS divergence matrix (default: $OMP_NUM_THREADS, else 1; "
                   "results do not depend on it)")
    p.set_defaults(func=_run_cluster)
