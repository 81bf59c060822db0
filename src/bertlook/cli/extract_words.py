"""CLI of bertlook.attention.extract_words: ``extract-words``."""

from __future__ import annotations

import argparse
from pathlib import Path

from bertlook.cli._args import add_batch_arguments, add_model_arguments, add_shard_argument, add_step_parser
from bertlook.errors import BertlookError
from bertlook.io_utils import write_json
from bertlook.pipeline import costs


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "extract-words": "extract word-level attention maps of treebank sentences into an attention store",
}

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"extract_words": costs.Cost(estimate=costs.forward_pass, examples=costs.treebank_words,
                                  passes=costs.with_random_init, stores=costs.word_stores)}


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``extract-words`` subcommand."""
    # lazy: numpy (bertlook.attention.store), which the DAG build reading COSTS does not need
    from bertlook.attention.alignment import FROM_SPLIT_MODES
    from bertlook.attention.extract_words import TEXT_MODES
    from bertlook.attention.random_init import DEFAULT_KEEP, KEEP_CHOICES

    p = add_step_parser(
        subparsers, "extract-words", COMMANDS["extract-words"],
        description=(
            "Run a model on treebank sentences ([CLS] w1 .. wn [SEP]) and store word-level attention maps:\n"
            "attention TO a split word = sum over its tokens, FROM a split word = --from-split.\n"
            "Input:  --treebank FILE.conllu (gold words, heads, relations), a model spec.\n"
            "Output: --out DIR, an attention store (level word; float16 [layer, head, from, to] of size\n"
            "        n_words + 2 with [CLS] first and [SEP] last; records carry id, tokens, heads, rels,\n"
            "        upos, xpos, n_wordpieces, split_words; length-sorted order, match by id);\n"
            "        --summary JSON: sentences in/extracted, excluded over-long and unalignable sentences\n"
            "        (counts and ids), fraction of words split into several tokens, tokens/s, device.\n"
            "--random-init-seed SEED: the maps of the probes' random-init baseline instead: the model\n"
            "        with pretrained word and position embeddings and every other weight re-initialised\n"
            "        in memory (the weights `bertlook random-init --seed SEED` saves, bit for bit; nothing\n"
            "        is saved); meta.json and the summary record it under `random_init`.\n"
            "--random-init-keep embeddings|none: with --random-init-seed, the reading of the baseline: the\n"
            "        pretrained word and position embeddings kept (embeddings, the paper's, default) or every\n"
            "        weight re-initialised, embeddings included (none); recorded as random_init.keep.\n"
            "--norms-out DIR: also the word-level norm-based maps of Kobayashi et al. 2020 (alpha * ||f(x)||,\n"
            "        row-normalised, then the same word-level conversion) of the same forward pass, in a\n"
            "        second store (meta map 'norm'); the summary gains `norms` (sums and counts).\n"
            "--text spaces|original: the text the tokenizer sees: the treebank's words joined by single spaces\n"
            "        (default), or the sentence as written (no space after a word marked SpaceAfter=No in MISC:\n"
            "        punctuation glued to words, Chinese/Japanese without spaces); either way tokens are mapped\n"
            "        to the treebank's words by character offsets, and a token spanning two words makes the\n"
            "        sentence unalignable (summary `excluded_straddling_token`, `excluded_alignment_reasons`)."
        ),
    )
    p.add_argument("--treebank", required=True, help="CoNLL-U file of the sentences")
    add_model_arguments(p)
    p.add_argument("--out", required=True, help="output attention store directory (replaced atomically)")
    p.add_argument("--from-split", choices=FROM_SPLIT_MODES, default="mean",
                   help="attention FROM a split word: mean of its tokens' rows (paper, default), "
                        "first token's row (authors' code), or renormalised max")
    add_batch_arguments(p, unit="sentences",
                        length_help="sentences with more tokens (incl. [CLS]/[SEP]) are excluded and counted")
    p.add_argument("--summary", default=None, help="write the run summary to this JSON file")
    p.add_argument("--random-init-seed", type=int, default=None, metavar="SEED",
                   help="re-initialise every weight but the word and position embeddings (seeded) before "
                        "extracting: the random-init baseline of the probes (default: the model as is)")
    p.add_argument("--random-init-keep", choices=KEEP_CHOICES, default=None,
                   help=f"with --random-init-seed: keep the pretrained word and position embeddings (embeddings, "
                        f"the paper's reading) or re-initialise them too (none); default {DEFAULT_KEEP}")
    p.add_argument("--norms-out", default=None, metavar="DIR",
                   help="also write the word-level norm-based maps (Kobayashi et al. 2020) to a store here")
    p.add_argument("--random-init-out", default=None, metavar="DIR",
                   help="with --random-init-seed: write the model's maps to --out and then, on the same sentences "
                        "in the same process, the random-init model's to a store here")
    p.add_argument("--random-init-summary", default=None, metavar="JSON",
                   help="with --random-init-out: the random-init run's summary")
    p.add_argument("--text", choices=TEXT_MODES, default="spaces",
                   help="tokenize the words joined by single spaces (default) or the original text rebuilt "
                        "from SpaceAfter=No (original); alignment uses the treebank's words either way")
    add_shard_argument(p, "treebank sentences")
    p.set_defaults(func=_cmd_extract_words)
    return p


def _cmd_extract_words(args) -> int:
    from bertlook.attention.extract_words import WordExtractionOptions, extract_word_attention
    from bertlook.attention.random_init import DEFAULT_KEEP

    if args.random_init_keep is not None and args.random_init_seed is None:
        raise BertlookError("--random-init-keep needs --random-init-seed (it chooses the random-init model's reading)")
    keep = args.random_init_keep or DEFAULT_KEEP
    if (args.random_init_out is None) != (args.random_init_summary is None):
        raise BertlookError("give both --random-init-out and --random-init-summary, or neither")
    options = WordExtractionOptions(
        revision=args.revision, batch_size=args.batch_size, max_seq_len=args.max_seq_len, device=args.device,
        model_dtype=args.model_dtype,
        from_split=args.from_split, shard_mb=args.shard_mb, max_unk_rate=args.max_unk_rate,
        random_init_seed=args.random_init_seed, random_init_keep=keep, text=args.text,
    )
    summary = extract_word_attention(args.treebank, args.model, args.out, options, shard=args.shard,
                                     norms_out=args.norms_out, random_init_out=args.random_init_out)
    random_run = summary.pop("random_init_run", None)
    if random_run is not None:
        write_json(args.random_init_summary, random_run)
    if args.summary:
        write_json(args.summary, summary)
    frac = summary["split_word_fraction"]
    print(
        f"extract-words: {summary['n_extracted']}/{summary['n_sentences']} sentences "
        f"({summary['n_words']} words, {summary['tokens']} tokens) -> {Path(args.out)}; "
        f"excluded {summary['excluded_too_long']} over {summary['max_seq_len']} tokens, "
        f"{summary['excluded_alignment']} unalignable ({summary['excluded_straddling_token']} with a token over "
        f"two words; text {summary['text']}); "
        f"split words {'n/a' if frac is None else f'{100 * frac:.1f}%'}; from-split {summary['from_split']}; "
        f"{summary['unk_tokens']} [UNK] tokens; "
        f"{summary['tokens_per_second']} tokens/s on {summary['device']}"
        + (f"; random-init model (seed {args.random_init_seed}, keep {keep})"
           + (f" -> {Path(args.random_init_out)}" if args.random_init_out else "") if args.random_init_seed is not None
           else "")
        + (f"; norm-based maps -> {Path(args.norms_out)}" if args.norms_out else "")
    )
    return 0
