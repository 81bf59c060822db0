"""CLI of :mod:`bertlook.reporting.compare`: ``compare``, ``check-regression``, ``make-golden`` and
``models-summary`` (argparse glue, summaries, printing; the computation lives in the reporting module)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv, write_json, write_text
from bertlook.pipeline import costs
from bertlook.pipeline.steps import Page, Step, golden_tables


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "compare": "a run's numbers against the paper's (comparison.csv / .md)",
    "check-regression": "exit 1 when a run regresses against the paper or a golden file",
    "make-golden": "write a golden JSON of every checked number of a run",
    "models-summary": "several runs (models) side by side: table, markdown, figure",
}


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("compare", ("comparison.csv", "comparison.md"),
         pages=(Page("comparison.md", "comparison.html", "Comparison with the paper", "Comparison with the paper",
                     caption="comparison.rst"),), cost=costs.SMALL),
)

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"models_summary": costs.SMALL}


def _cmd_compare(args: argparse.Namespace) -> int:
    from bertlook.reporting.compare import (
        FAIL, NOT_COMPARABLE, NOT_MEASURED, NOT_RUN, NOTHING_COMPARABLE, PASS, status_counts, write_comparison,
    )

    run_dir = Path(args.run_dir)
    out_csv = args.out_csv or run_dir / "comparison.csv"
    out_md = args.out_markdown or run_dir / "comparison.md"
    df = write_comparison(run_dir, out_csv, out_md)
    c = status_counts(df)
    print(f"compare: {df.attrs['run']}: {c[PASS]} PASS, {c[FAIL]} FAIL, {c[NOT_COMPARABLE]} not comparable, "
          f"{c[NOT_RUN]} not run, {c[NOT_MEASURED]} not measured -> {out_csv}, {out_md}")
    if c[PASS] + c[FAIL] == 0:
        print(f"compare: {NOTHING_COMPARABLE}")
    return 0


def _golden_tables() -> list:
    """The golden tables of every declared step (bertlook.cli.declared_steps): their groups beside the
    hand-written ones of bertlook.reporting.golden."""
    from bertlook.cli import declared_steps

    return golden_tables(declared_steps())


def _cmd_check(args: argparse.Namespace) -> int:
    from bertlook.reporting.compare import check_against_paper
    from bertlook.reporting.golden import check_against_golden

    if args.against == "paper":
        return check_against_paper(args.results_dir)
    if not Path(args.against).is_file():
        raise BertlookError(f"{args.against}: golden file not found (--against paper|FILE)")
    return check_against_golden(args.results_dir, args.against, tables=_golden_tables())


def _cmd_make_golden(args: argparse.Namespace) -> int:
    from bertlook.reporting.golden import is_check, make_golden, read_tolerances

    if args.tolerances is None:
        print("make-golden: warning: no --tolerances: argmax-based numbers must then match to the word")
    doc = make_golden(args.run_dir, read_tolerances(args.tolerances), tables=_golden_tables())
    write_json(args.out, doc)
    sizes = ", ".join(f"{k} {len(g['values'])}" for k, g in doc["groups"].items())
    n_checks = sum(is_check(v) for g in doc["groups"].values() for v in g["values"].values())
    print(f"make-golden: {args.out}: {sizes}; {n_checks} numbers with a range from the computation")
    return 0


def _split_labels(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [x.strip() for x in text.split(",")]


def _cmd_models_summary(args: argparse.Namespace) -> int:
    from bertlook.reporting.models_summary import fig_models_summary, models_summary, models_summary_markdown

    df = models_summary(args.run_dir, _split_labels(args.labels))
    write_csv(args.out_csv, df)
    write_text(args.out_markdown, models_summary_markdown(df))
    outs = [str(args.out_csv), str(args.out_markdown)]
    if args.out_figure:
        fig_models_summary(df, args.out_figure)
        outs.append(str(args.out_figure))
    print(f"models-summary: {len(df.attrs['labels'])} run(s), {len(df)} rows -> {', '.join(outs)}")
    return 0


def register_cli(subparsers) -> None:
    """Add ``compare``, ``check-regression``, ``make-golden`` and ``models-summary``."""
    p = subparsers.add_parser(
        "compare", help=COMMANDS["compare"],
        description="Inputs: RUN_DIR/manifest.json (which sections are comparable), tables/table1.csv, "
        "tables/attention_stats.csv, and when present tables/table2.csv and tables/table3.csv. Outputs: "
        "comparison.csv (section,item,metric,paper,reproduced,difference,tolerance,status,note) and "
        "comparison.md. Status: PASS / FAIL / not comparable / not run / not measured.",
    )
    p.add_argument("--run-dir", required=True, metavar="DIR", help="results/{run}/ (with manifest.json)")
    p.add_argument("--out-csv", default=None, metavar="CSV", help="output (default RUN_DIR/comparison.csv)")
    p.add_argument("--out-markdown", default=None, metavar="MD", help="output (default RUN_DIR/comparison.md)")
    p.set_defaults(func=_cmd_compare)

    q = subparsers.add_parser(
        "check-regression", help=COMMANDS["check-regression"],
        description="Inputs: RUN_DIR (its manifest.json and tables) and `paper` or a golden JSON. "
        "--against paper: exit 1 when a comparable row of the comparison FAILs (non-comparable "
        "rows never fail; when nothing is comparable it says so and exits 0). --against FILE: compare every "
        "number of the run with a golden JSON (bertlook make-golden) within the file's per-group "
        "tolerances; exit 1 listing each differing, missing or extra number. Exit 2: bad input.",
    )
    q.add_argument("results_dir", metavar="RUN_DIR", help="results/{run}/")
    q.add_argument("--against", required=True, metavar="paper|FILE", help="`paper` or a golden JSON file")
    q.set_defaults(func=_cmd_check)

    g = subparsers.add_parser(
        "make-golden", help=COMMANDS["make-golden"],
        description="Input: RUN_DIR; output: the golden JSON. Collects attention_stats.csv (every head and column), table1.csv, the All rows of "
        "head_accuracy.csv, table3.csv, table2.csv, sep_gradients.csv (values or not-run status), the "
        "behaviour labels of head_clusters.csv, a summary of js_divergence.csv (sum, 5 largest), the twins "
        "beyond the paper and the integer counts of the step summaries, with rtol/atol per group; with "
        "--tolerances, the argmax-based numbers (accuracies, UAS, head choices, p-values) get the ranges "
        "another CPU may give them (bertlook.reporting.golden_ranges).",
    )
    g.add_argument("run_dir", metavar="RUN_DIR", help="results/{run}/")
    g.add_argument("--tolerances", default=None, metavar="JSON",
                   help="word tolerances measured by scripts/measure_tolerance.py (tests/golden/tolerances.json)")
    g.add_argument("--out", required=True, metavar="JSON", help="golden file to write (e.g. tests/golden/offline-minilm.json)")
    g.set_defaults(func=_cmd_make_golden)

    m = subparsers.add_parser(
        "models-summary", help=COMMANDS["models-summary"],
        description="Inputs: run directories (tables/table1.csv, tables/attention_stats.csv, tables/table3.csv "
        "when present). Outputs: CSV, markdown, figure. One row per (model, metric): best-head accuracy per Table 1 relation present in every "
        "run, probe UAS per probe, mean [SEP] attention over the middle third of the layers, largest "
        "previous- / next-token attention. Figure: grouped bars (Table 1 relations; probes).",
    )
    m.add_argument("--run-dir", action="append", required=True, metavar="DIR", help="a run directory (repeatable)")
    m.add_argument("--labels", default=None, metavar="A,B,...", help="one label per --run-dir (default: directory names)")
    m.add_argument("--out-csv", required=True, metavar="CSV", help="output: models_summary.csv")
    m.add_argument("--out-markdown", required=True, metavar="MD", help="output: models_summary.md")
    m.add_argument("--out-figure", default=None, metavar="PNG", help="output: fig_models_summary.png")
    m.set_defaults(func=_cmd_models_summary)
