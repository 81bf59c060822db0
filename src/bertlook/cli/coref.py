"""``bertlook coref-extract`` and ``bertlook coref``: argparse glue, writing and printing of
:mod:`bertlook.attention.coref_maps` (the model run over :mod:`bertlook.data.conll2012` parts) and
:mod:`bertlook.analyses.coref` (the scoring, its tables and summary:
:func:`~bertlook.analyses.coref.run_coref_step`)."""

from __future__ import annotations

import sys
from pathlib import Path

from bertlook.cli._args import add_batch_arguments, add_model_arguments, add_step_parser
from bertlook.errors import BertlookError
from bertlook.io_utils import write_csv_full, write_json, write_text
from bertlook.pipeline import costs
from bertlook.pipeline.steps import Page, Step, TWIN_TABLES, table


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "coref-extract": "CoNLL-2012 parts -> word-level attention store with gold mentions",
    "coref": "antecedent selection accuracy per head + baselines (Table 2 twin)",
}


#: the steps of a run this command makes (gathered by bertlook.cli.declared_steps)
STEPS = (
    Step("coref", (table("table2.csv"), table("table2.md"), table("coref_heads.csv")),
         pages=(Page(table("table2.md"), "table2.html", "Tables", "Table 2 twin: coreference", caption="table2.rst",
                     subcategory=TWIN_TABLES),), cost=costs.SMALL),
)

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"coref_extract": costs.Cost(estimate=costs.forward_pass, examples=costs.coref_documents)}


_EXTRACT_HELP = """\
Read CoNLL-2012 coreference files, truncate every document part to the model window and store
word-level attention maps with the gold mentions (the input of `bertlook coref`).

inputs:
  --conll FILE|DIR      CoNLL-2012 *_conll / *.gold_conll file (repeat for several; a directory = every
                        *gold_conll file below it)
  --model SPEC          hub id, local model directory, or package:MODULE (--revision for hub ids)
outputs:
  --out DIR             word-level attention store: [layer, head, from, to] of size n_words + 2 per part,
                        records with id (<doc>#<part>), tokens, pos, mentions [start, end, cluster],
                        mention_heads, head_pos, head_source, truncation counts
  --summary JSON        counts: documents/parts read, parts without mentions (skipped), parts with
                        unusable parse trees (last-word heads), mentions dropped by truncation (cut /
                        outside), excluded parts, head sources, mentions with antecedents per type
Bad input stops with 'error: FILE:LINE: ...' (exit 2). Definitions: docs/coreference.md.
"""

_SCORE_HELP = """\
Antecedent selection accuracy of every attention head and of three baselines (twin of Table 2).

inputs:
  --attention DIR       store from `bertlook coref-extract`
  --candidates          all (every other word of the part; default) or mentions (head words of earlier
                        mentions only)
outputs:
  --out-table CSV       table2.csv: system (nearest, head_match, rule_based, neural [paper only],
                        best_head), all/pronoun/proper/nominal (fractions), n_*, paper_* (fractions),
                        head, paper_head, label, note
  --out-markdown MD     table2.md (percent)
  --out-heads CSV       coref_heads.csv: layer, head, all, pronoun, proper, nominal, n
  --summary JSON        every count (from extraction and scoring) and the accuracies
Without a corpus: `coref --not-run REASON --out-table ... --out-markdown ... --out-heads ... --summary ...`
writes tables that say "not run: REASON" (exit 0).
"""


def register_cli(subparsers) -> None:
    """Add the ``coref-extract`` and ``coref`` subcommands."""
    from bertlook.analyses.coref import CANDIDATES
    from bertlook.data.coref_mentions import HEAD_RULES

    from bertlook.attention.alignment import FROM_SPLIT_MODES

    p = add_step_parser(subparsers, "coref-extract", COMMANDS["coref-extract"], _EXTRACT_HELP)
    p.add_argument("--conll", action="append", required=True, metavar="FILE",
                   help="input: CoNLL-2012 file or directory (repeatable)")
    add_model_arguments(p)
    p.add_argument("--out", required=True, metavar="DIR", help="output: attention store directory (replaced atomically)")
    p.add_argument("--from-split", choices=FROM_SPLIT_MODES, default="mean",
                   help="attention FROM a split word: mean (default), first, max")
    p.add_argument("--head-rule", choices=HEAD_RULES, default="tree",
                   help="mention head word: tree (Collins head rules on the gold parse; last word when the "
                        "span is not a constituent or the tree is unusable; default) or last (last word)")
    add_batch_arguments(p, unit="parts", length_help="wordpieces per part incl. [CLS]/[SEP]; whole words are kept")
    p.add_argument("--summary", default=None, metavar="JSON", help="output: summary JSON")
    p.set_defaults(func=_cmd_coref_extract)

    q = add_step_parser(subparsers, "coref", COMMANDS["coref"], _SCORE_HELP)
    q.add_argument("--attention", metavar="DIR", default=None, help="input: store from coref-extract")
    q.add_argument("--not-run", metavar="REASON", default=None,
                   help="write 'not run' tables with this reason instead of scoring (no corpus configured)")
    q.add_argument("--candidates", choices=CANDIDATES, default="all",
                   help="argmax over all other words (default) or over head words of earlier mentions")
    q.add_argument("--out-table", required=True, metavar="CSV", help="output: table2.csv")
    q.add_argument("--out-markdown", required=True, metavar="MD", help="output: table2.md")
    q.add_argument("--out-heads", required=True, metavar="CSV", help="output: coref_heads.csv")
    q.add_argument("--summary", required=True, metavar="JSON", help="output: summary JSON")
    q.add_argument("--max-examples", type=int, default=None, metavar="N", help="score only the first N parts")
    q.set_defaults(func=_cmd_coref)


def _cmd_coref_extract(args) -> int:
    from bertlook.attention.coref_maps import extract_coref_attention

    s = extract_coref_attention(args.conll, args.model, args.out, revision=args.revision,
                                max_seq_len=args.max_seq_len, from_split=args.from_split, head_rule=args.head_rule,
                                batch_size=args.batch_size, device=args.device, shard_mb=args.shard_mb,
                                model_dtype=args.model_dtype,
                                max_unk_rate=args.max_unk_rate)
    if args.summary:
        write_json(args.summary, s)
    r, t = s["read"], s["truncation"]
    print(f"coref-extract: {r['parts']} parts of {r['documents']} documents read "
          f"({r['parts_without_mentions']} without mentions skipped, {r['parts_with_unusable_tree']} with unusable "
          f"trees); {s['n_examples']} parts -> {Path(args.out)} ({t['parts_truncated']} truncated); mentions "
          f"kept {t['mentions_kept']}, dropped cut {t['mentions_dropped_cut']}, outside "
          f"{t['mentions_dropped_outside']}; excluded parts {t['parts_excluded_alignment']} unalignable, "
          f"{t['parts_excluded_empty']} empty; {s['tokens_per_second']} tokens/s on {s['device']}")
    return 0


def _cmd_coref(args) -> int:
    from bertlook.analyses.coref import (
        TABLE2_CSV_COLUMNS,
        not_run_summary,
        run_coref_step,
        write_not_run,
    )
    from bertlook.reporting.formatting import pct
    from bertlook.reporting.paper_join import join_table2
    from bertlook.reporting.tables import table2_markdown, table2_note

    if args.not_run is not None:
        if args.attention:
            raise BertlookError("give either --attention or --not-run, not both")
        note = write_not_run(args.out_table, args.out_markdown, args.out_heads, args.not_run)
        write_json(args.summary, not_run_summary(args.not_run))
        print(f"coref: {note}")
        return 0
    if not args.attention:
        raise BertlookError("coref needs --attention DIR (or --not-run REASON when no corpus is configured)")
    result = run_coref_step(args.attention, candidates=args.candidates, max_examples=args.max_examples)
    table = join_table2(result.table, TABLE2_CSV_COLUMNS)
    title = f"Coreference: antecedent selection accuracy (Table 2 twin): {Path(args.attention).name}"
    write_csv_full(args.out_table, table)
    write_csv_full(args.out_heads, result.heads)
    write_text(args.out_markdown, table2_markdown(table, title=title, note=table2_note(result.store, args.candidates)))
    summary = result.summary
    write_json(args.summary, summary)
    scores = result.scores
    best = summary["best_head"]
    acc = summary["best_head_accuracy"]
    print(f"coref: {scores.n_parts} parts, {int(scores.counts[0])} mentions with antecedents; best head "
          f"{best or '-'} {pct(acc['all']) if acc else '–'}%; rule-based "
          f"{pct(summary['baselines']['rule_based']['all'])}%", file=sys.stdout)
    return 0
