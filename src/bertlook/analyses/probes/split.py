"""The batched engine's inputs (torch): one split's features held in memory and the padded rows of a step.

:class:`SplitFeatures` reads a split once: the sentences of one or more stores of the same corpus (checked with
:func:`~bertlook.analyses.probes.data.corpus_signature`), their GloVe vectors and the attention of each
source (float16, ``[word (i), word (j), layer*head]`` blocks and the ROOT features ``[word, 2, 2K]``).
:class:`Rows` are the (seed, sentence) rows of one chunk of a training or evaluation step: their padded GloVe
inputs and each sentence's maps in float32, built once and shared by the cohorts
(:mod:`bertlook.analyses.probes.cohorts`).

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from bertlook.analyses.probes.data import ProbeData, corpus_signature
from bertlook.errors import BertlookError


class SplitFeatures:
    """One split held in memory: the sentences of ``sources`` (name -> :class:`ProbeData`, all with the same
    sentences), their GloVe vectors and the attention of the sources named in ``attention`` (float16)."""

    def __init__(self, sources: dict[str, ProbeData], *, attention: Iterable[str] = ()):
        if not sources:
            raise BertlookError("no attention store to read the sentences from")
        self.sources = dict(sources)
        self.data = next(iter(self.sources.values()))
        ref = corpus_signature(self.data)
        for other in list(self.sources.values())[1:]:
            if corpus_signature(other) != ref:
                raise BertlookError(f"{other.path} and {self.data.path} hold different sentences (ids, words, "
                                    "heads or punctuation): their probes cannot share one training loop")
        self.n = len(self.data.sentences)
        self.lengths = np.array([s.n_words for s in self.data.sentences], dtype=np.int64)  # [sentence]
        self.num_heads_total = self.data.num_heads_total
        self.glove_dim = self.data.glove.dim if self.data.glove is not None else 0
        self.dep: list[torch.Tensor] = []  # [word, d_glove] per sentence
        if self.glove_dim:
            self.dep = [torch.from_numpy(self.data.glove.vectors(s.glove_rows)) for s in self.data.sentences]
        self.words: dict[str, list[np.ndarray]] = {}  # source -> [word (i), layer*head, word (j)] per sentence
        self.root: dict[str, list[np.ndarray]] = {}  # source -> [word, probe_feature, 2] per sentence
        names = [name for name in dict.fromkeys(attention) if name != "uniform"]
        for name in names:
            if name not in self.sources:
                raise BertlookError(f"no {name!r} attention store given")
        workers = max(1, min(len(names), torch.get_num_threads()))
        # the stores in parallel (each its own file; numpy's copies and reads release the GIL: the demo's three
        # train stores 2.3 -> 1.4 s on two threads), kept in the order asked
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for name, (words, root) in zip(names, pool.map(self._read_attention, names)):
                self.words[name], self.root[name] = words, root

    def cand(self, n: int, released: bool = False) -> torch.Tensor:
        """The candidate vectors ``[candidate, d_glove]`` of sentence ``n`` (0 = ROOT, a zero vector), as
        :func:`bertlook.analyses.probes.features.candidate_vectors` (``released``: the released code's off-by-one)."""
        if not self.glove_dim:
            return torch.zeros(int(self.lengths[n]) + 1, 0)
        dep = self.dep[n]  # [word, d_glove]
        root = dep.new_zeros(1, dep.shape[1])  # [1, d_glove]
        return torch.cat([dep, root] if released else [root, dep])  # [candidate, d_glove]

    def _read_attention(self, name: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The float16 word-word blocks ``[word (i), word (j), layer*head]`` (``A(i->j)``) and ROOT features ``[word, 2,
        2K]`` of every sentence of source ``name``, as views of two arrays allocated once (the maps read in between
        leave no holes)."""
        data, K = self.sources[name], self.num_heads_total
        if data.num_heads_total != K:
            raise BertlookError(f"{data.path} has {data.num_heads_total} heads but {self.data.path} has {K}")
        sizes = self.lengths * self.lengths * K  # [sentence]
        words_all = np.empty(int(sizes.sum()), dtype=np.float16)  # every sentence's block, back to back
        root_all = np.empty(int(self.lengths.sum()) * 4 * K, dtype=np.float16)
        words, root = [], []
        w_at = r_at = 0
        for s in data.sentences:
            W = s.n_words
            A = data.store.get(s.index)  # [layer, head, query_word, key_word]
            if A.shape[-1] != W + 2:
                raise BertlookError(f"{data.path}: sentence {s.id!r}: map of size {A.shape[-1]} for {W} words")
            A = A.reshape(K, W + 2, W + 2)  # [layer*head, query_word, key_word]
            w = words_all[w_at : w_at + W * W * K].reshape(W, W, K)  # [word (i), word (j), layer*head]
            w[...] = A[:, 1 : W + 1, 1 : W + 1].transpose(1, 2, 0)
            # [word, 2, probe_feature]: x_i0 = a rt[i, 0] + b rt[i, 1]
            rt = root_all[r_at : r_at + W * 4 * K].reshape(W, 2, 2 * K)
            rt[:, 0, :K], rt[:, 0, K:] = A[:, 1 : W + 1, 0].T, A[:, 0, 1 : W + 1].T  # A(i->[CLS]) ; A([CLS]->i)
            rt[:, 1, :K], rt[:, 1, K:] = A[:, 1 : W + 1, W + 1].T, A[:, W + 1, 1 : W + 1].T  # A(i->[SEP]) ; A([SEP]->i)
            words.append(w)
            root.append(rt)
            w_at, r_at = w_at + W * W * K, r_at + W * 4 * K
        return words, root

    def nbytes(self) -> int:
        """Bytes of the attention held."""
        return int(sum(a.nbytes for d in (self.words, self.root) for v in d.values() for a in v))  # views: their sizes

    def maps(self, source: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Sentence ``n``'s attention as float32: ``gt`` ``[word (i), word (j), layer*head]`` = ``A(i->j)`` (so
        ``x_ij = [gt[i, j] ; gt[j, i]]``, the probes' pair features) and the ROOT candidate's features ``rt`` ``[word,
        2, 2K]`` (``x_i0 = a rt[i, 0] + b rt[i, 1]``: ``rt[i, 0]`` = A(i->[CLS]) ; A([CLS]->i), ``rt[i, 1]`` =
        A(i->[SEP]) ; A([SEP]->i))."""
        try:
            gt, rt = self.words[source][n], self.root[source][n]
        except KeyError:
            raise BertlookError(f"the {source!r} attention was not read") from None
        return torch.from_numpy(gt).float(), torch.from_numpy(rt).float()


class Rows:
    """The (seed, sentence) rows of one chunk of a step (their padded inputs built once, shared by the cohorts)."""

    def __init__(self, split: SplitFeatures, pairs: Sequence[tuple[int, int]], n_seeds: int):
        self.split = split
        self.seed_index = [int(p[0]) for p in pairs]
        self.sent = [int(p[1]) for p in pairs]
        self.identity = self.seed_index == list(range(n_seeds))  # row r belongs to seed r
        self.seed_tensor = torch.tensor(self.seed_index, dtype=torch.long)  # [row]
        self.lengths = [int(split.lengths[n]) for n in self.sent]
        self.R, self.Wm = len(self.sent), max(self.lengths)
        self._cache: dict[Any, Any] = {}

    def per_seed(self, p: torch.Tensor) -> torch.Tensor:
        """``p[seed of each row]`` (``[seed, ...]`` -> ``[row, ...]``)."""
        return p if self.identity else p.index_select(0, self.seed_tensor)

    def maps(self, source: str, r: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row ``r``'s :meth:`SplitFeatures.maps` (converted once per sentence and chunk, shared by the cohorts and by
        the rows of one sentence)."""
        key = ("maps", source, self.sent[r])
        if key not in self._cache:
            self._cache[key] = self.split.maps(source, self.sent[r])
        return self._cache[key]

    def glove(self, released: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(dep ``[row, Wm, d]``, cand ``[row, 1 (+1 released), Wm + 1, d]``), zero padding."""
        if ("glove", released) not in self._cache:
            d = self.split.glove_dim
            dep, cand = torch.zeros(self.R, self.Wm, d), torch.zeros(self.R, 1 + released, self.Wm + 1, d)
            for r, (n, W) in enumerate(zip(self.sent, self.lengths)):
                if d:
                    dep[r, :W] = self.split.dep[n]
                    cand[r, 0, : W + 1] = self.split.cand(n)
                    if released:
                        cand[r, 1, : W + 1] = self.split.cand(n, True)
            self._cache["glove", released] = dep, cand
        return self._cache["glove", released]

    def heads(self, r: int) -> torch.Tensor:
        """The gold heads ``[word]`` of row ``r``'s sentence."""
        return torch.from_numpy(self.split.data.sentences[self.sent[r]].heads)  # [word]
