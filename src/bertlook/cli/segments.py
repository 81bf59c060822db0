"""``bertlook segments``: Wikipedia dump (or a Hugging Face dataset) -> paper-style segments or document windows
(``--layout``; JSONL) and a summary.

The computation and the summary live in :mod:`bertlook.data.segments`
(:func:`~bertlook.data.segments.run_segments_step`); this module holds the argparse glue, the writing and printing.
"""

from __future__ import annotations

import argparse
import functools
import sys

from bertlook.cli._args import add_model_arguments
from bertlook.data.sentences import SPLITTERS, check_language, resolve_splitter
from bertlook.data.segments import LAYOUTS
from bertlook.io_utils import write_json
from bertlook.pipeline import costs
from bertlook.pipeline.config import resolve_data_path


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "segments": "Wikipedia dump -> paper-style [CLS] A [SEP] B [SEP] segments, or document windows (JSONL)",
}

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"segments": costs.Cost(estimate=costs.segmenter)}


def _handler(args: argparse.Namespace) -> int:
    from bertlook.data.segments import SegmentOptions, run_segments_step, write_segments
    from bertlook.attention.modeling import load_tokenizer, resolve_model

    # the language, the corpus spec and the dump path are checked before the tokenizer loads
    language = check_language(args.language)
    splitter = resolve_splitter(language, args.splitter)
    hf_spec = None
    if args.hf_dataset is not None:
        from bertlook.data.hf_corpus import parse_spec_json

        hf_spec = parse_spec_json(args.hf_dataset)
    dump = resolve_data_path(args.dump) if hf_spec is None else None
    tokenizer = load_tokenizer(resolve_model(args.model, args.revision))
    options = SegmentOptions(n_segments=args.n_segments, max_seq_len=args.max_seq_len, seed=args.seed,
                             max_articles=args.max_articles, language=language, splitter=splitter, layout=args.layout)
    reader = {}  # the documents of the Hugging Face dataset (else: of the dump)
    if hf_spec is not None:
        from bertlook.data.hf_corpus import dataset_label, describe_hf_dataset, iter_hf_documents, normalize_spec

        reader = dict(corpus=describe_hf_dataset(hf_spec), source=dataset_label(normalize_spec(hf_spec)),
                      reader=functools.partial(iter_hf_documents, hf_spec))
    result = run_segments_step(tokenizer, dump, options=options, model=args.model, revision=args.revision, **reader)
    summary, counts = result.summary, result.counts
    write_segments(args.out, result.segments)
    write_json(args.summary, summary)
    print(
        f"segments: {summary['segments_produced']}/{summary['segments_requested']} "
        f"{'window segments' if args.layout == 'window' else 'segments'} from "
        f"{summary['documents_used']} documents ({summary['truncated_segments']} truncated, "
        f"{summary['single_sentence_chunks_skipped']} single-sentence chunks skipped, mean "
        f"{summary['mean_tokens']} / max {summary['max_tokens']} tokens); pages read "
        f"{counts['pages_read']}, redirects {counts['redirects_skipped']}, non-article "
        f"{counts['non_article_pages_skipped']}, without sentences "
        f"{counts['documents_without_sentences']}; -> {args.out}"
    )
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "segments",
        help=COMMANDS["segments"],
        description=(
            "Input: --dump (MediaWiki .xml.bz2 / .xml dump, or package:PKG/relative/path) or "
            "--hf-dataset (a Hugging Face datasets corpus, a JSON object with keys path, name, split, "
            "data_files, streaming, revision, text_field, title_field), and the "
            "tokenizer of --model. Output: --out (segments JSONL: id, doc, doc_index, text_a, text_b, "
            "tokens, segment_ids, truncated) and --summary (JSON with every count, including pages "
            "and sentences skipped). Segments are made as in BERT's create_pretraining_data.py "
            "(no random next sentence), the first --n-segments kept and shuffled with --seed; with "
            "--layout window each segment is one document window instead (long contexts: consecutive "
            "sentences up to --max-seq-len, the last one cut, as one part, segment ids 0). "
            "Sentences are split in --language with --splitter (see docs/definitions.md, Sentence "
            "splitting); both, the splitter as resolved, go into the summary."
        ),
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--dump", metavar="PATH", help="MediaWiki XML dump (.xml.bz2 or .xml)")
    src.add_argument("--hf-dataset", metavar="JSON",
                     help='Hugging Face dataset spec, e.g. \'{"path": "parquet", "data_files": "a.parquet"}\' or '
                          '\'{"path": "wikimedia/wikipedia", "name": "20231101.en", "streaming": true}\'; '
                          "its description (revision, fingerprint, sha256) goes into the summary under corpus")
    add_model_arguments(p, help="input: model whose tokenizer is used (hub id, local dir, package:MODULE)")
    p.add_argument("--out", required=True, metavar="segments.jsonl", help="output segments JSONL")
    p.add_argument("--summary", required=True, metavar="summary.json", help="output summary JSON")
    p.add_argument("--n-segments", type=int, default=1000, help="segments to keep (default 1000)")
    p.add_argument("--max-seq-len", type=int, default=128,
                   help="maximum wordpieces per segment, special tokens included (default 128)")
    p.add_argument("--layout", choices=LAYOUTS, default="pair",
                   help="pair: the paper's [CLS] A [SEP] B [SEP] (a decoder: its own prefix A B suffix; default); "
                        "window: a document's consecutive sentences up to --max-seq-len less the special tokens, "
                        "the last sentence cut at the end, as one part ([CLS] W [SEP], a decoder's prefix W "
                        "suffix; segment ids 0): long contexts")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--max-articles", type=int, default=None, metavar="N",
                   help="read at most N kept articles (default: all that are needed)")
    p.add_argument("--language", default="en", metavar="CODE",
                   help="ISO 639 code of the corpus language, e.g. en, de, zh (default en)")
    p.add_argument("--splitter", choices=SPLITTERS, default="auto",
                   help="sentence splitter: spacy (spaCy's sentencizer on spacy.blank(CODE)), rules "
                        "(bertlook's rule-based splitter, also for scripts without spaces), auto (spacy "
                        "where spaCy supports the language without extra packages, else rules; default)")
    p.set_defaults(func=_handler)
