"""``bertlook treebank``: dependency trees (local files, a UD release, silver parses) -> train/dev CoNLL-U.

The computation lives in :mod:`bertlook.data.gold_treebank` and :mod:`bertlook.data.silver_treebank`; this module holds the argparse glue and printing.
"""

from __future__ import annotations

import argparse
import sys

from bertlook.cli._args import add_step_parser
from bertlook.data.silver_treebank import DEFAULT_SPACY_MODEL, prepare_silver
from bertlook.data.gold_treebank import (
    UD_DEFAULT_DEV_FILE,
    UD_DEFAULT_RELEASE,
    UD_DEFAULT_REPO,
    UD_DEFAULT_TRAIN_FILE,
    UD_URL_TEMPLATE,
    prepare_local,
    prepare_ud,
)
from bertlook.data.sentences import SPLITTERS
from bertlook.errors import BertlookError
from bertlook.pipeline import costs
from bertlook.pipeline.config import resolve_data_path


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "treebank": "dependency trees (local PTB-SD/UD files, a UD release, or silver spaCy parses) -> train/dev CoNLL-U",
}

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = dict.fromkeys(("treebank", "treebank_ud"), costs.Cost(estimate=costs.treebank_builder))


def _need(args: argparse.Namespace, source: str, *flags: str) -> None:
    missing = [f for f in flags if getattr(args, f.lstrip("-").replace("-", "_")) in (None, "")]
    if missing:
        raise BertlookError(f"--source {source} needs {', '.join(missing)}")


def _handler(args: argparse.Namespace) -> int:
    if args.source == "local":
        _need(args, "local", "--dev")
        train = resolve_data_path(args.train) if args.train else None
        result = prepare_local(train, resolve_data_path(args.dev), args.format, args.out_train,
                               args.out_dev, args.strip_subtypes, summary=args.summary,
                               ud_v2_relations=args.ud_v2_relations)
        train_text = (f"train {result['train']['sentences']} sentences" if result["train"]
                      else "no train split (empty train file written)")
        print(f"treebank: local ({result['dev']['format']}): dev {result['dev']['sentences']} sentences, "
              f"{train_text}; multi-root {result['dev']['multi_root_sentences']} (dev), "
              f"multi-word tokens skipped {result['dev']['multiword_tokens_skipped']} (dev) "
              f"-> {args.out_dev}, {args.out_train}")
    elif args.source == "ud":
        _need(args, "ud", "--download-dir")
        result = prepare_ud(args.ud_repo, args.ud_release, args.out_train, args.out_dev,
                            download_dir=args.download_dir, train_file=args.ud_train_file,
                            dev_file=args.ud_dev_file, base_url=args.ud_base_url,
                            train_sha256=args.train_sha256, dev_sha256=args.dev_sha256,
                            strip_subtypes=args.strip_subtypes, summary=args.summary,
                            ud_v2_relations=args.ud_v2_relations)
        print(f"treebank: ud {args.ud_repo} {args.ud_release}: dev {result['dev']['sentences']} "
              f"sentences (sha256 {result['dev']['input_sha256'][:12]}), train "
              f"{result['train']['sentences']} sentences (sha256 {result['train']['input_sha256'][:12]}); "
              f"multi-word tokens skipped {result['dev']['multiword_tokens_skipped']} + "
              f"{result['train']['multiword_tokens_skipped']}, empty nodes skipped "
              f"{result['dev']['empty_nodes_skipped']} + {result['train']['empty_nodes_skipped']} "
              f"-> {args.out_dev}, {args.out_train}")
    else:
        _need(args, "silver", "--segments")
        if (args.dump is None) == (args.hf_dataset is None):
            raise BertlookError("--source silver needs exactly one of --dump, --hf-dataset "
                                "(the corpus the segments were made from)")
        hf_spec = None
        if args.hf_dataset is not None:
            from bertlook.data.hf_corpus import parse_spec_json

            hf_spec = parse_spec_json(args.hf_dataset)
        dump = resolve_data_path(args.dump) if args.dump is not None else None
        from bertlook.data.sentences import check_language, resolve_splitter

        language = check_language(args.language)
        result = prepare_silver(dump, args.segments, args.out_train,
                                args.out_dev, train_sentences=args.train_sentences,
                                dev_sentences=args.dev_sentences, max_words=args.max_words,
                                seed=args.seed, spacy_model=args.spacy_model,
                                strip_subtypes=args.strip_subtypes, max_articles=args.max_articles,
                                summary=args.summary, hf_dataset=hf_spec, language=language,
                                splitter=resolve_splitter(language, args.splitter))
        sk = result["skipped"]
        print(f"treebank: silver ({result['parser']['name']} {result['parser']['version']}): dev "
              f"{result['dev']['sentences']}/{result['dev']['requested']} sentences from "
              f"{result['dev']['documents']} documents, train {result['train']['sentences']}/"
              f"{result['train']['requested']} from {result['train']['documents']} documents "
              f"({result['documents_used_by_segments']} segment documents excluded); skipped "
              f"{sk['multi_root']} multi-root, {sk['too_long']} > {result['max_words']} words, "
              f"{sk['whitespace_tokens']} with whitespace tokens -> {args.out_dev}, {args.out_train}")
    for w in result.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    return 0


def register_cli(subparsers) -> None:
    p = add_step_parser(
        subparsers, "treebank", COMMANDS["treebank"],
        description=(
            "Make the dependency treebank for head accuracy (Table 1) and the probes.\n\n"
            "Inputs, by --source:\n"
            "  local   --dev FILE [--train FILE] --format auto|conllu|conllx: your files, e.g. PTB in\n"
            "          Stanford Dependencies as CoNLL-X (what the paper used; LDC licensed) or UD CoNLL-U\n"
            "  ud      a UD treebank from GitHub at a pinned release (--ud-repo, --ud-release,\n"
            "          --ud-train-file, --ud-dev-file, --ud-base-url), cached in --download-dir,\n"
            "          optional --train-sha256/--dev-sha256\n"
            "  silver  --dump (MediaWiki dump, or package:PKG/path) or --hf-dataset JSON (the Hugging\n"
            "          Face dataset spec given to `bertlook segments`) and --segments (segments.jsonl):\n"
            "          spaCy parses of sentences from documents no segment uses, split by document\n"
            "Outputs:\n"
            "  --out-train, --out-dev  CoNLL-U (sent_id, text, 10 columns; LEMMA/FEATS/DEPS/MISC '_');\n"
            "                          with --source local and no --train, --out-train has no sentences\n"
            "  --summary               JSON: inputs and their sha256, sentence/word counts, skipped\n"
            "                          lines and sentences, relation frequencies, parser version\n"
            "Bad input stops with 'error: FILE:LINE: ...' (exit 2)."
        ),
    )
    p.add_argument("--source", required=True, choices=("local", "ud", "silver"), help="where the trees come from")
    p.add_argument("--out-train", required=True, metavar="PATH", help="output train split (CoNLL-U)")
    p.add_argument("--out-dev", required=True, metavar="PATH", help="output dev split (CoNLL-U)")
    p.add_argument("--summary", required=True, metavar="JSON", help="output summary JSON")
    p.add_argument("--strip-subtypes", action="store_true",
                   help="turn subtyped relations into their base (nmod:poss -> nmod)")
    p.add_argument("--ud-v2-relations", action="store_true",
                   help="--source ud/local with UD files: rename UD v1 relations to UD v2 (dobj -> obj, "
                        "nsubjpass -> nsubj:pass, neg -> advmod/det, nmod on a verb -> obl, ...); the summary "
                        "counts each renaming per split (relations_renamed)")
    g = p.add_argument_group("--source local")
    g.add_argument("--train", metavar="PATH", default=None, help="train file (optional)")
    g.add_argument("--dev", metavar="PATH", default=None, help="dev file")
    g.add_argument("--format", choices=("auto", "conllu", "conllx"), default="auto",
                   help="input format; auto: .conllu = CoNLL-U, .conll/.conllx/.txt/.tsv/.sd = CoNLL-X")
    g = p.add_argument_group("--source ud")
    g.add_argument("--ud-repo", default=UD_DEFAULT_REPO, help=f"default {UD_DEFAULT_REPO}")
    g.add_argument("--ud-release", default=UD_DEFAULT_RELEASE, help=f"release tag, default {UD_DEFAULT_RELEASE}")
    g.add_argument("--ud-train-file", default=UD_DEFAULT_TRAIN_FILE, help=f"default {UD_DEFAULT_TRAIN_FILE}")
    g.add_argument("--ud-dev-file", default=UD_DEFAULT_DEV_FILE, help=f"default {UD_DEFAULT_DEV_FILE}")
    g.add_argument("--ud-base-url", default=UD_URL_TEMPLATE, metavar="URL-TEMPLATE",
                   help="URL template with {repo}, {release}, {file} (default: GitHub raw files)")
    g.add_argument("--train-sha256", metavar="HEX", default=None, help="expected sha256 of the train file")
    g.add_argument("--dev-sha256", metavar="HEX", default=None, help="expected sha256 of the dev file")
    g.add_argument("--download-dir", metavar="DIR", default=None, help="where the UD files are cached")
    g = p.add_argument_group("--source silver")
    g.add_argument("--dump", metavar="PATH", default=None, help="MediaWiki dump the segments were made from")
    g.add_argument("--hf-dataset", metavar="JSON", default=None,
                   help="instead of --dump: the Hugging Face dataset spec the segments were made from "
                        "(the --hf-dataset of `bertlook segments`)")
    g.add_argument("--segments", metavar="segments.jsonl", default=None,
                   help="segments whose documents (doc_index) are excluded")
    g.add_argument("--train-sentences", type=int, default=2000, help="default 2000")
    g.add_argument("--dev-sentences", type=int, default=500, help="default 500")
    g.add_argument("--max-words", type=int, default=60, help="skip longer sentences (default 60)")
    g.add_argument("--seed", type=int, default=0, help="seed of the document shuffle (default 0)")
    g.add_argument("--spacy-model", default=DEFAULT_SPACY_MODEL, help=f"default {DEFAULT_SPACY_MODEL}")
    g.add_argument("--max-articles", type=int, default=None, metavar="N",
                   help="read at most N kept articles of the dump (default: all)")
    g.add_argument("--language", default="en", metavar="CODE",
                   help="corpus language, as given to `bertlook segments` (default en)")
    g.add_argument("--splitter", choices=SPLITTERS, default="auto",
                   help="sentence splitter, as given to `bertlook segments` (default auto)")
    p.set_defaults(func=_handler)
