"""Vectorised training and evaluation of the Table 3 probes (issue 24): every probe variant x seed of a run
(Table 3, Table 3 on the norm maps, the random-init probe, the per-layer ablations) trained in one loop.

The reference, :func:`bertlook.analyses.probes.reference.train_probe`, trains one model at a time. Here each
cohort of probes (:mod:`bertlook.analyses.probes.cohorts`) holds its parameters as ``[seed, variant, ...]``
tensors: every (variant, seed) model starts from the reference's parameters (its module is built the old way
under ``torch.manual_seed(seed)`` and copied in) and sees the reference's sentence order (one
:func:`~bertlook.analyses.probes.features.epoch_batches` generator per seed); each model's gradient is that of
its own loss (written out by hand, no autograd) and one Adam (:class:`FusedAdam`) steps them all: Adam is
elementwise, so that is each model's own Adam (same lr, betas, eps), up to float rounding. Attention is read
once per store (:class:`~bertlook.analyses.probes.split.SplitFeatures`, float16). :class:`BatchedProbes` is the
engine: the cohorts of a run, their training (groups of cohorts in parallel: forked processes on Linux,
:mod:`~bertlook.analyses.probes.workers`, threads elsewhere) and evaluation (argmax and batched MST decoding).
Only the torch environment's commands import this module.

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import gc
import time
from typing import Any, Sequence

import numpy as np
import torch

from bertlook.analyses.probes import workers
from bertlook.analyses.probes.catalogue import HIDDEN, MAX_BATCH_ELEMENTS, ProbeTask
from bertlook.analyses.probes.cohorts import COHORTS, Grads
from bertlook.analyses.probes.features import epoch_batches, split_group
from bertlook.analyses.probes.split import Rows, SplitFeatures
from bertlook.analyses.probes.uas import uas_dict
from bertlook.analyses.trees import chu_liu_edmonds_batch
from bertlook.attention.extraction import progress_bar
from bertlook.errors import BertlookError, check_at_least


# ======================================================================================== optimiser
class FusedAdam:
    """Adam over ``params`` (their ``.grad``) with torch's defaults (betas 0.9, 0.999, eps 1e-8, no weight decay, as
    the reference's ``torch.optim.Adam(params, lr=lr)``): ``torch._fused_adam_``, the kernel of
    ``torch.optim.Adam(fused=True)``, called directly (importing ``torch.optim`` pulls in ``torch._dynamo``: 2 s
    of every run). Elementwise, so one Adam over stacked models is each model's own Adam."""

    def __init__(self, params: Sequence[torch.Tensor], lr: float):
        self.params, self.lr = list(params), float(lr)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.steps = [torch.zeros((), dtype=torch.float32) for _ in self.params]

    def step(self) -> None:
        torch._foreach_add_(self.steps, 1)
        torch._fused_adam_(self.params, [p.grad for p in self.params], self.exp_avg, self.exp_avg_sq, [], self.steps,
                           amsgrad=False, lr=self.lr, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8,
                           maximize=False, grad_scale=None, found_inf=None)


# =========================================================================================== engine
class BatchedProbes:
    """Every task of ``tasks`` x every seed as stacked models trained in one loop (see the module doc);
    ``columns``: the tasks in the order of the models' variant axis (cohort by cohort).

    The cohorts never interact (each model's loss reads only its own scores), so ``threads`` > 1 trains
    groups of cohorts in parallel (forked processes, or threads: :meth:`_run`), each group with its own Adam
    over its own parameters and the same sentence orders."""

    def __init__(self, tasks: Sequence[ProbeTask], seeds: Sequence[int], *, num_heads_total: int, glove_dim: int,
                 lr: float = 0.002):
        tasks = list(dict.fromkeys(tasks))
        self.seeds = [int(s) for s in seeds]
        if not tasks:
            raise BertlookError("no probe to train")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise BertlookError(f"seeds must be distinct and at least one, got {self.seeds}")
        if not (lr > 0):
            raise BertlookError(f"learning rate must be > 0, got {lr}")
        self.K, self.glove_dim, self.lr = int(num_heads_total), int(glove_dim), float(lr)
        needs_glove = [t.probe for t in tasks if t.probe not in ("attn", "distances_only")]
        if needs_glove and not self.glove_dim:
            raise BertlookError(f"probe(s) {', '.join(dict.fromkeys(needs_glove))} need GloVe vectors (--glove)")
        groups: dict[tuple, list[ProbeTask]] = {}
        for t in tasks:  # one cohort per (family, attention read)
            groups.setdefault((t.family, t.maps if t.family in ("attn", "mlp") else ""), []).append(t)
        self.cohorts = [COHORTS[family](maps, group, self.seeds, self.K, self.glove_dim)
                        for (family, maps), group in groups.items()]
        self.columns = [t for c in self.cohorts for t in c.tasks]
        self.maps = sorted({t.maps for t in self.columns if t.family in ("attn", "mlp")})
        self.n_parameters = int(sum(p.numel() for c in self.cohorts for p in c.params()))
        #: cohort groups in forked processes rather than threads (:meth:`_run`; the same numbers either way)
        self.processes = True
        self.parallel = ""  # how the last train / evaluation ran: "1 thread", "2 processes of 9.2 + 8.6 ms ..."
        #: group the cohorts by their step times measured on the split before training (:meth:`_measure`) rather
        #: than by their estimates (``cost()``); either way the same numbers, only the balance differs
        self.measure = True
        self.costs: dict[str, list[float]] | None = None  # measured ms per step: {"train": .., "evaluate": ..}

    @property
    def n_models(self) -> int:
        return len(self.columns) * len(self.seeds)

    def _groups(self, threads: int, phase: str = "train") -> list[list[int]]:
        """The cohorts (indices) of each thread (:meth:`_loads`), by the step times measured for ``phase``
        (:attr:`costs`) where there are, else by the cohorts' estimates."""
        return [g for _, g in self._loads(threads, phase)]

    def _loads(self, threads: int, phase: str) -> list[tuple[float, list[int]]]:
        """:meth:`_groups` with each group's cost (ms per step): two groups split as evenly as the costs allow
        (every split tried, up to 12 cohorts), more groups longest first onto the least loaded."""
        cost = (self.costs or {}).get(phase) or [c.cost() for c in self.cohorts]
        n, total = len(self.cohorts), sum(cost)
        if min(int(threads), n) == 2 and n <= 12:
            best = min(range(1, 2 ** (n - 1)),  # the last cohort always in the second group
                       key=lambda m: (abs(total - 2 * sum(c for k, c in enumerate(cost) if m >> k & 1)), m))
            first = [k for k in range(n) if best >> k & 1]
            second = [k for k in range(n) if not best >> k & 1]
            return [(sum(cost[k] for k in g), g) for g in (first, second)]
        loads: list[tuple[float, list[int]]] = [(0.0, []) for _ in range(max(1, min(int(threads), n)))]
        for k in sorted(range(n), key=lambda k: -cost[k]):
            i = min(range(len(loads)), key=lambda i: loads[i][0])
            loads[i] = (loads[i][0] + cost[k], loads[i][1] + [k])
        return [(load, sorted(g)) for load, g in loads if g]

    def _measure(self, split: SplitFeatures, order: list, budget: int,
                 samples: int = 16) -> dict[str, list[float]] | None:
        """Each cohort's ms per step on one torch thread, forward (``evaluate``) and forward plus backward
        (``train``), over ``samples`` steps spread over one epoch (``order`` ``[seed][step]``: every seed's rows of
        those steps), after one step untimed; None for an epoch too short to measure (the estimates then). The
        estimates (``cost()``) were measured on one CPU; another CPU weighs the cohorts differently (the demo's two
        groups: 17.0 / 20.0 s on an AMD EPYC by the estimates). Nothing is trained: the gradients go to a scratch
        accumulator, and training starts with its own."""
        picks = sorted({int(x) for x in np.linspace(0, len(order[0]) - 1, samples + 1)})
        if len(picks) < 2:
            return None
        fwd, both = np.zeros(len(self.cohorts)), np.zeros(len(self.cohorts))
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for i, step in enumerate(picks):
                for rows in self._step_rows(split, order, step, budget):
                    for m in self.maps:  # converted once per chunk in training too: not any one cohort's cost
                        if m != "uniform":
                            for r in range(rows.R):
                                rows.maps(m, r)
                    for k, c in enumerate(self.cohorts):
                        t0 = time.perf_counter()
                        ctx, _, grads = self._scores_grads(k, rows, [])
                        t1 = time.perf_counter()
                        c.backward(rows, ctx, grads, Grads(c.params()))
                        if i:  # the first step warms up
                            fwd[k] += t1 - t0
                            both[k] += time.perf_counter() - t0
        finally:
            torch.set_num_threads(before)
        n = len(picks) - 1
        return {"train": (1e3 * both / n).tolist(), "evaluate": (1e3 * fwd / n).tolist()}

    def _run(self, threads: int, work, *args, phase: str = "train") -> list:
        """``work(cohort indices, *args)`` for each group of :meth:`_groups`, in parallel, each with ``threads //
        groups`` threads of torch's own (so a cohort's arithmetic is the same for every ``threads`` that gives one
        torch thread per group): in forked processes (:mod:`~bertlook.analyses.probes.workers`: the trained
        parameters come back) where :attr:`processes` and the platform allow, else in threads."""
        loads = self._loads(threads, phase)
        groups = [g for _, g in loads]
        before = torch.get_num_threads()

        def one(g):
            torch.set_num_threads(max(1, int(threads) // len(groups)))  # per thread (OpenMP's setting is the caller's)
            return work(g, *args)

        forked = len(groups) > 1 and self.processes and workers.AVAILABLE
        self.parallel = f"{len(groups)} {'processes' if forked else 'threads' if len(groups) > 1 else 'thread'}"
        if len(groups) > 1:  # the balance: each group's ms per step, measured (or estimated)
            how = "measured" if (self.costs or {}).get(phase) else "estimated"
            self.parallel += f" of {' + '.join(f'{load:.1f}' for load, _ in loads)} ms per step, {how}"
        try:
            if len(groups) == 1:
                return [one(groups[0])]
            if forked:
                torch.set_num_threads(max(1, int(threads) // len(groups)))
                return workers.run_forked(groups, work, args,
                                                lambda g: [p for k in g for p in self.cohorts[k].params()])
            with concurrent.futures.ThreadPoolExecutor(len(groups)) as pool:
                return [f.result() for f in [pool.submit(one, g) for g in groups]]
        finally:
            torch.set_num_threads(before)

    def _scores_grads(self, k: int, rows: Rows, out: list, want_grads: bool = True):
        """Cohort ``k``'s forward on ``rows``; per row the log-probabilities ``[variant, word, candidate]`` into ``out``
        and, with ``want_grads``, its losses ``[row, variant]`` and ``d loss / d scores`` = softmax - one-hot gold."""
        scores, ctx = self.cohorts[k].forward(rows)
        losses, grads = [], []
        for r, s in enumerate(scores):
            lp = torch.log_softmax(s, dim=-1)  # [variant, word, candidate]
            out.append(lp)
            if want_grads:
                ar, heads = torch.arange(lp.shape[1]), rows.heads(r)
                losses.append(-lp[:, ar, heads].sum(1))  # [variant]: the summed cross-entropy
                g = lp.exp()  # [variant, word, candidate]
                g[:, ar, heads] -= 1.0
                grads.append(g)
        return ctx, losses, grads

    # ------------------------------------------------------------------------------------ training
    def train(self, split: SplitFeatures, *, epochs: int = 1, batch_size: int = 1, threads: int | None = None,
              max_batch_elements: int = MAX_BATCH_ELEMENTS, progress: bool = True) -> dict[str, Any]:
        """Train every model on ``split`` (the reference's epochs, batches and sentence orders, one Adam step per
        batch); returns timing and ``loss_per_word`` ``[epoch, seed, column]``."""
        check_at_least("epochs", epochs, 1)
        check_at_least("batch size", batch_size, 1)
        if split.n == 0:
            raise BertlookError(f"{split.data.path}: no sentences to train on")
        self._check_split(split)
        gens = [torch.Generator().manual_seed(s) for s in self.seeds]  # the reference's generator of each seed
        lengths = split.lengths.tolist()
        # [epoch][seed][step]: the sentence positions of each batch
        orders = [[epoch_batches(lengths, int(batch_size), g) for g in gens] for _ in range(int(epochs))]
        if len({len(o) for e in orders for o in e}) != 1:
            raise BertlookError("the seeds' epochs have different numbers of batches (a bug)")
        t0 = time.perf_counter()
        threads = torch.get_num_threads() if threads is None else int(threads)
        if self.measure and threads > 1 and len(self.cohorts) > 1:
            self.costs = self._measure(split, orders[0], max_batch_elements)
        parts = self._run(threads, self._train_group, split, orders, max_batch_elements, progress)
        losses = np.zeros((int(epochs), len(self.seeds), len(self.columns)))  # [epoch, seed, column]
        for cols, part in parts:
            losses[:, :, cols] = part
        seconds = time.perf_counter() - t0
        steps = int(epochs) * len(orders[0][0])
        return {"seconds": seconds, "steps": steps, "loss_per_word": losses, "threads": len(parts),
                "parallel": self.parallel, "steps_per_s": steps / seconds if seconds > 0 else float("inf")}

    def _step_rows(self, split: SplitFeatures, order: list, step: int, budget: int):
        """The :class:`Rows` of one step: every seed's sentences of ``order[seed][step]``, cut into chunks of at
        most ``budget`` feature values (:func:`_chunks`)."""
        S = len(self.seeds)
        pairs = [(s, n) for s in range(S) for n in order[s][step]]
        width = 4 * self.K * max(1, len(self.maps)) + HIDDEN
        for chunk in _chunks(pairs, split.lengths, width, budget):
            yield Rows(split, chunk, S)

    def _train_group(self, ks: list[int], split: SplitFeatures, orders, budget: int, progress: bool):
        S = len(self.seeds)
        cohorts = [self.cohorts[k] for k in ks]
        accs = [Grads(c.params()) for c in cohorts]
        params = [p for c in cohorts for p in c.params()]
        opt = FusedAdam(params, self.lr)
        cols = [self.columns.index(t) for c in cohorts for t in c.tasks]
        losses = np.zeros((len(orders), S, len(cols)))  # [epoch, seed, column of the group]
        bar = progress_bar(total=split.n * len(orders), desc=f"probes: {self.n_models} models", unit="sent",
                           enabled=progress and 0 in ks)  # one bar: the thread of the first cohort
        for epoch, order in enumerate(orders):
            acc = torch.zeros(S, len(cols), dtype=torch.float64)  # [seed, column of the group]
            for step in range(len(order[0])):
                for rows in self._step_rows(split, order, step, budget):
                    per_cohort = []
                    for c, a, k in zip(cohorts, accs, ks):
                        ctx, loss, grads = self._scores_grads(k, rows, [])
                        c.backward(rows, ctx, grads, a)
                        per_cohort.append(torch.stack(loss))  # [row, variant]
                    acc.index_add_(0, rows.seed_tensor, torch.cat(per_cohort, dim=1).double())
                for a in accs:
                    a.finish(S)
                opt.step()
                bar.update(len(order[0][step]))
            losses[epoch] = (acc / split.data.n_words).numpy()
        bar.close()
        return cols, losses

    def _check_split(self, split: SplitFeatures) -> None:
        missing = [m for m in self.maps if m != "uniform" and m not in split.words]
        if missing:
            raise BertlookError(f"the probes read the {', '.join(missing)} attention, not read for {split.data.path}")
        if self.maps and split.num_heads_total != self.K:
            raise BertlookError(f"{split.data.path}: {split.num_heads_total} heads per word pair, the probes were "
                                f"built for {self.K}")
        if split.glove_dim != self.glove_dim and any(t.probe not in ("attn", "distances_only") for t in self.columns):
            raise BertlookError(f"GloVe vectors of dimension {split.glove_dim}, the probes have {self.glove_dim}")

    # ---------------------------------------------------------------------------------- evaluation
    def evaluate(self, split: SplitFeatures, *, mst: bool = False, threads: int | None = None) -> dict[str, Any]:
        """UAS counts of every model on ``split`` (punctuation excluded): argmax per word and, with ``mst``,
        :func:`bertlook.analyses.trees.chu_liu_edmonds_batch` over the models of all sentences of one length at
        once; ``correct`` / ``correct_mst`` ``[seed, column]``."""
        t0 = time.perf_counter()
        logps = self.log_probs(split, threads=threads)
        correct = sum(((lp.argmax(-1) == s.heads) & ~s.punct).sum(-1) for lp, s in zip(logps, split.data.sentences))
        t1 = time.perf_counter()
        correct_mst = mst_correct(logps, split.data.sentences) if mst else None
        return {"correct": correct, "correct_mst": correct_mst, "n_words": split.data.n_eval_words,
                "n_sentences": split.n, "seconds": time.perf_counter() - t0,
                "mst_seconds": time.perf_counter() - t1 if mst else 0.0}

    def log_probs(self, split: SplitFeatures, *, threads: int | None = None) -> list[np.ndarray]:
        """Each sentence's log-probabilities ``[seed, column, word, candidate]`` (float32) under every model."""
        self._check_split(split)
        threads = torch.get_num_threads() if threads is None else int(threads)
        S, C = len(self.seeds), len(self.columns)
        logps = [np.empty((S, C, W, W + 1), dtype=np.float32) for W in split.lengths]
        for cols, lps in self._run(threads, self._evaluate_group, split, phase="evaluate"):
            for n, lp in enumerate(lps):  # [seed, group column, word, candidate]
                logps[n][:, cols] = lp
        return logps

    def _evaluate_group(self, ks: list[int], split: SplitFeatures, budget: int = 2**22):
        """Cohorts ``ks``' log-probabilities of each sentence ``[seed, column, word, candidate]``, dev sentences of
        similar length together (up to 8, and ``budget`` values of attention features per source)."""
        S, F = len(self.seeds), 2 * self.K
        logps: list = [None] * split.n
        order = sorted(range(split.n), key=lambda n: split.lengths[n])
        chunks = split_group(order, split.lengths.tolist(), S * F, budget)
        for chunk in (c[k : k + 8] for c in chunks for k in range(0, len(c), 8)):
            rows = Rows(split, [(k, n) for n in chunk for k in range(S)], S)
            outs: list[list] = [[] for _ in ks]
            for k, out in zip(ks, outs):
                self._scores_grads(k, rows, out, want_grads=False)
            for i, n in enumerate(chunk):
                logps[n] = torch.stack([torch.cat([o[i * S + k] for o in outs]) for k in range(S)]).numpy()
        return [self.columns.index(t) for k in ks for t in self.cohorts[k].tasks], logps

    def results(self, ev: dict[str, Any]) -> dict[tuple[ProbeTask, int], dict[str, Any]]:
        """``(task, seed)`` -> ``dict(uas, uas_mst, n_words, n_sentences)`` as
        :func:`~bertlook.analyses.probes.reference.evaluate_probe` returns."""
        out = {}
        for s, seed in enumerate(self.seeds):
            for c, task in enumerate(self.columns):
                cm = None if ev["correct_mst"] is None else int(ev["correct_mst"][s, c])
                out[(task, seed)] = uas_dict(int(ev["correct"][s, c]), cm, ev["n_words"], ev["n_sentences"])
        return out

    def state(self, task: ProbeTask, seed: int, grad: bool = False) -> dict[str, torch.Tensor]:
        """The parameters (``grad``: their last gradients) of one model, named and shaped as the reference module's."""
        s = self.seeds.index(int(seed))
        for c in self.cohorts:
            if task in c.tasks:
                ts = [p.grad for p in c.params()] if grad else None
                return {k: v.clone() for k, v in c.state(c.tasks.index(task), s, ts).items()}
        raise BertlookError(f"no model {task} in this batch")

    def gradients(self, split: SplitFeatures, pairs: Sequence[tuple[int, int]]) -> None:
        """The gradients of one step on the (seed index, sentence) ``pairs`` into the parameters' ``.grad`` (tests)."""
        rows = Rows(split, pairs, len(self.seeds))
        for k, c in enumerate(self.cohorts):
            acc = Grads(c.params())
            ctx, _, grads = self._scores_grads(k, rows, [])
            c.backward(rows, ctx, grads, acc)
            acc.finish(len(self.seeds))


def mst_correct(logps: list[np.ndarray], sentences, max_matrices: int = 4096) -> np.ndarray:
    """``[seed, column]`` words whose MST head (:func:`bertlook.analyses.trees.chu_liu_edmonds_batch`, node 0 = ROOT,
    scores the log-probabilities) is the gold head, punctuation excluded; ``logps[n]`` ``[seed, column, word,
    candidate]``. The matrices of all sentences of one length are decoded together."""
    S, C = logps[0].shape[:2]
    out = np.zeros((S, C), dtype=np.int64)
    by_length: dict[int, list[int]] = {}
    for n, s in enumerate(sentences):
        by_length.setdefault(s.n_words, []).append(n)
    for W, ns in sorted(by_length.items()):
        step = max(1, max_matrices // (S * C))
        for start in range(0, len(ns), step):
            group = ns[start : start + step]
            full = np.full((len(group), S * C, W + 1, W + 1), -np.inf)  # [sentence, model, node, node]: dependent, head
            for g, n in enumerate(group):
                full[g, :, 1:, :] = logps[n].reshape(S * C, W, W + 1)
            heads = chu_liu_edmonds_batch(full.reshape(-1, W + 1, W + 1))[:, 1:]  # [sentence*model, word]
            heads = heads.reshape(len(group), S, C, W)  # [sentence, seed, column, word]
            for g, n in enumerate(group):
                s = sentences[n]
                out += ((heads[g] == s.heads) & ~s.punct).sum(-1)
    return out


def _chunks(pairs: list[tuple[int, int]], lengths: Sequence[int], width: int, budget: int) -> list[list]:
    """One step's (seed, sentence) rows cut as :func:`~bertlook.analyses.probes.features.split_group` cuts a batch."""
    cut = split_group(range(len(pairs)), [int(lengths[n]) for _, n in pairs], width, budget)
    return [[pairs[i] for i in chunk] for chunk in cut]


# ========================================================================================= memory
def tune_malloc(release: bool = False) -> None:
    """glibc only: keep freed memory in the process (a step allocates and frees the same few MB; handing them back
    makes the next step fault them in again, ~25% of a step here); ``release``: hand the free memory back now."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        if release:
            gc.collect()
            libc.malloc_trim(0)
            return
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: blocks up to 32 MiB from the heap
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
        libc.mallopt(-2, 8 << 20)  # M_TOP_PAD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass
