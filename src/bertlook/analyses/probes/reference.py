"""The one-model-at-a-time reference (torch): train one probe, evaluate it, and the Table 3 / ablation runs.

:func:`train_probe` trains one (probe, seed) model with Adam on batches of the reference schedule
(:func:`~bertlook.analyses.probes.features.epoch_batches`; optional diagnostics: loss curve, dev UAS per epoch,
feature scale), :func:`evaluate_probe` scores it on a dev store (argmax per word and, with ``mst``, MST
decoding), :func:`run_probes` (Table 3) and :func:`run_layer_ablations` (per-layer ablations of Attn+GloVe)
train every probe x seed this way and assemble the frames with :mod:`bertlook.analyses.probes.frames`. The
batched engine (:mod:`bertlook.analyses.probes.batch`) trains the same models in one loop; this module is
its reference (``bertlook probes --engine reference``).

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterable, Sequence

import pandas as pd
import torch

from bertlook.analyses.probes.catalogue import (
    ABLATION_MODES,
    DEFAULT_SEEDS,
    HIDDEN,
    MAX_BATCH_ELEMENTS,
    PROBES,
    base_kind,
    check_probes,
    check_seeds,
)
from bertlook.analyses.probes.data import ProbeData, as_probe_data
from bertlook.analyses.probes.diagnostics import FeatureStats, LossCurve
from bertlook.analyses.probes.features import Batch, epoch_batches, make_batch, split_group
from bertlook.analyses.probes.frames import (
    ablation_frame,
    ablation_plan,
    open_ablation_stores,
    open_probe_stores,
    table3_frame,
)
from bertlook.analyses.probes.models import gold_log_probs, make_model, masked_log_softmax, probe_loss
from bertlook.analyses.probes.uas import mst_heads, right_branching_uas, uas_dict
from bertlook.attention.extraction import progress_bar
from bertlook.data.glove import GloveVectors
from bertlook.errors import BertlookError, check_at_least


# ========================================================================================= batches
def model_batches(data: ProbeData, groups: Iterable[Sequence[int]], model) -> Iterable[Batch]:
    """One :class:`~bertlook.analyses.probes.features.Batch` per group of sentence positions (``data.sentences``
    indices), with the inputs ``model`` reads."""
    for group in groups:
        sents = [data.sentences[i] for i in group]
        yield make_batch(data, sents, attn="attn" in model.needs, glove="glove" in model.needs,
                         dist="dist" in model.needs, released_offbyone=model.released_offbyone,
                         uniform_maps=getattr(model, "uniform_maps", False),
                         feature_scale=getattr(model, "feature_scale", "none"),
                         head_subset=getattr(model, "head_subset", None))


def _width(model) -> int:
    """Values per (dependent, candidate) pair in the model's largest batch tensors."""
    if model.kind == "attn_glove_mlp":  # the features [.., 2K], the hidden layer and the weights [.., 2K]
        return 4 * int(model.num_heads_total) + HIDDEN
    return int(model.num_heads_total) if "attn" in model.needs else HIDDEN


def _eval_batches(data: ProbeData, batch_size: int, width: int, budget: int = MAX_BATCH_ELEMENTS) -> list[list[int]]:
    """Evaluation batches: the sentences by length, ``batch_size`` at a time, each cut to ``budget``."""
    lengths = [s.n_words for s in data.sentences]
    order = sorted(range(len(data.sentences)), key=lambda i: lengths[i])
    out: list[list[int]] = []
    for k in range(0, len(order), batch_size):
        out += split_group(order[k : k + batch_size], lengths, width, budget)
    return out


def _check_compatible(model, data: ProbeData, what: str) -> None:
    """``model`` can read ``data``: its heads and GloVe dimension (``what``: the store, for the message)."""
    subset = getattr(model, "head_subset", None)
    if "attn" in model.needs and subset is not None:
        if subset[-1] >= data.num_heads_total:
            raise BertlookError(f"{data.path}: {data.num_heads_total} heads per word pair, but the probe reads head "
                                f"index {subset[-1]} ({what})")
    elif "attn" in model.needs and model.num_heads_total != data.num_heads_total:
        raise BertlookError(
            f"{data.path}: {data.num_heads_total} heads per word pair, but the probe was built for "
            f"{model.num_heads_total} ({what})"
        )
    if "glove" in model.needs:
        if data.glove is None:
            raise BertlookError(f"probe {model.kind!r} needs GloVe vectors (--glove)")
        if data.glove.dim != model.glove_dim:
            raise BertlookError(
                f"GloVe vectors of dimension {data.glove.dim}, the probe was trained with {model.glove_dim}"
            )


# ======================================================================================== training
@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """The settings of one :func:`train_probe` run, checked, that its helpers share."""

    kind: str  # the probe (a name of TRAINED_PROBES)
    family: str  # its model family (probes.base_kind)
    released: bool  # Attn+GloVe with the released code's off-by-one
    needs_glove: bool
    seed: int
    epochs: int
    batch_size: int
    lr: float
    max_batch_elements: int
    feature_scale: str
    loss_every: int | None
    eval_epochs: tuple[int, ...]  # 1-based, ascending
    feature_stats: bool
    heads: Sequence[int] | None


def train_probe(kind: str, train_store, *, glove: "GloveVectors | None" = None, seed: int, epochs: int = 1,
                batch_size: int = 32, lr: float = 0.002, released_offbyone: bool = False,
                max_sentences: int | None = None, max_batch_elements: int = MAX_BATCH_ELEMENTS,
                feature_scale: str = "none", loss_every: int | None = None, eval_store=None,
                eval_epochs: Sequence[int] = (), feature_stats: bool = False, heads: Sequence[int] | None = None):
    """Train one probe; returns ``(model, info)``.

    ``train_store``: a word-level store (path, ``AttentionStore`` or
    :class:`~bertlook.analyses.probes.data.ProbeData`). ``kind``: ``attn``, ``attn_glove``, ``attn_glove_released``,
    ``distances_glove``, ``glove_only``, ``attn_glove_uniform`` (Attn+GloVe on exactly uniform maps of the store),
    ``distances_only``, ``attn_glove_mlp`` or ``random_init_attn_glove`` (= ``attn_glove``; pass the random-init
    store).
    ``heads``: the flattened indices (``layer * num_heads + head``) of the heads whose attention
    features the probe reads (the per-layer ablations; None = every head). ``max_sentences``:
    use only the first N sentences of the store. A batch whose padded tensors would exceed
    ``max_batch_elements`` values is run as several chunks whose gradients are summed before the one
    Adam step of the batch (the same update, bounded memory).

    Options beyond the paper (the defaults train exactly as without them):

    * ``feature_scale="n"``: attention features times the sentence's map size ``W+2``
      (:func:`~bertlook.analyses.probes.features.make_batch`),
      in training and in every evaluation of the returned model.
    * ``loss_every=N``: ``info["loss_curve"]``, the mean training loss per word over consecutive windows
      of N sentences of each epoch (in training order; ``ceil(n_sentences / N)`` windows per epoch).
    * ``eval_store`` and ``eval_epochs``: ``info["dev_uas_by_epoch"]``, the UAS on ``eval_store`` after
      each listed epoch (1-based, at most ``epochs``); evaluation does not change the training.
    * ``feature_stats``: ``info["feature_stats"]``, the scale of the attention features of the first
      epoch's batches (see :func:`~bertlook.analyses.probes.diagnostics.batch_feature_stats`; probes with
      attention only).
    """
    opts = _training_options(kind, seed=seed, epochs=epochs, batch_size=batch_size, lr=lr,
                             released_offbyone=released_offbyone, max_batch_elements=max_batch_elements,
                             feature_scale=feature_scale, loss_every=loss_every, eval_store=eval_store,
                             eval_epochs=eval_epochs, feature_stats=feature_stats, heads=heads)
    if opts.needs_glove and glove is None and not (
            isinstance(train_store, ProbeData) and train_store.glove is not None):
        raise BertlookError(f"probe {kind!r} needs GloVe vectors (--glove)")
    data = as_probe_data(train_store, glove=glove if opts.needs_glove else None, max_sentences=max_sentences,
                         what="training attention store")
    if not data.sentences:
        raise BertlookError(f"{data.path}: no sentences to train on")
    torch.manual_seed(opts.seed)
    model = make_model(kind, num_heads_total=data.num_heads_total,
                       glove_dim=data.glove.dim if (opts.needs_glove and data.glove is not None) else None,
                       released_offbyone=opts.released, feature_scale=feature_scale, heads=heads)
    if opts.feature_stats and "attn" not in model.needs:
        raise BertlookError(f"feature_stats: probe {kind!r} has no attention features")
    dev = None
    if opts.eval_epochs:
        dev = as_probe_data(eval_store, glove=data.glove if opts.needs_glove else None, what="dev attention store")
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    curve = LossCurve(opts.loss_every) if opts.loss_every is not None else None
    stats = FeatureStats() if opts.feature_stats else None
    run = _train_epochs(model, optimizer, data, opts, dev=dev, curve=curve, stats=stats)
    model.eval()
    return model, _training_info(model, data, opts, run, dev=dev, curve=curve, stats=stats)


def _training_options(kind: str, *, seed, epochs, batch_size, lr, released_offbyone, max_batch_elements,
                      feature_scale, loss_every, eval_store, eval_epochs, feature_stats, heads) -> TrainingOptions:
    """The arguments of :func:`train_probe`, checked (in this order: the messages name the first problem)."""
    check_at_least("epochs", epochs, 1)
    check_at_least("batch size", batch_size, 1)
    if not (lr > 0):
        raise BertlookError(f"learning rate must be > 0, got {lr}")
    if loss_every is not None and int(loss_every) < 1:
        raise BertlookError(f"loss_every must be >= 1 sentence, got {loss_every}")
    eval_epochs = sorted({int(e) for e in eval_epochs})
    if eval_epochs and (eval_epochs[0] < 1 or eval_epochs[-1] > int(epochs)):
        raise BertlookError(f"eval_epochs must lie in 1..{int(epochs)} (the epochs trained), got {eval_epochs}")
    if eval_epochs and eval_store is None:
        raise BertlookError("eval_epochs given without eval_store (the dev store to evaluate on)")
    family, released = base_kind(kind)
    released = released or released_offbyone
    needs_glove = family not in ("attn", "distances_only")
    return TrainingOptions(kind=kind, family=family, released=released, needs_glove=needs_glove, seed=int(seed),
                           epochs=int(epochs), batch_size=int(batch_size), lr=lr,
                           max_batch_elements=max_batch_elements, feature_scale=feature_scale,
                           loss_every=None if loss_every is None else int(loss_every),
                           eval_epochs=tuple(eval_epochs), feature_stats=bool(feature_stats), heads=heads)


def _train_epochs(model, optimizer, data: ProbeData, opts: TrainingOptions, *, dev: ProbeData | None,
                  curve: LossCurve | None, stats: FeatureStats | None) -> dict[str, Any]:
    """Every epoch of :func:`train_probe` (the sentence order drawn with the seed's own generator); returns
    ``steps``, ``seconds``, ``epoch_losses`` (per word) and ``dev_uas`` (the evaluations of ``eval_epochs``)."""
    gen = torch.Generator().manual_seed(opts.seed)
    lengths = [st.n_words for st in data.sentences]
    steps = 0
    epoch_losses = []
    dev_uas: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    bar = progress_bar(total=len(data.sentences) * opts.epochs, desc=f"probe {opts.kind} seed {opts.seed}",
                       unit="sent")
    for epoch in range(1, opts.epochs + 1):
        groups = epoch_batches(lengths, opts.batch_size, gen)
        if curve is not None:
            curve.start_epoch(epoch)
        total = _train_epoch(model, optimizer, data, groups, lengths, opts.max_batch_elements, curve=curve,
                             stats=stats if epoch == 1 else None, bar=bar)
        steps += len(groups)
        if curve is not None:
            curve.end_epoch()
        epoch_losses.append(total / data.n_words)
        if epoch in opts.eval_epochs:
            res = evaluate_probe(model, opts.kind, dev)
            dev_uas.append({"epoch": epoch, "uas": res["uas"], "n_words": res["n_words"]})
            model.train()
    bar.close()
    return {"steps": steps, "seconds": time.perf_counter() - t0, "epoch_losses": epoch_losses, "dev_uas": dev_uas}


def _train_epoch(model, optimizer, data: ProbeData, groups: list[list[int]], lengths: list[int], budget: int, *,
                 curve: LossCurve | None, stats: FeatureStats | None, bar) -> float:
    """One Adam step per batch of ``groups`` (a batch over ``budget`` values runs as chunks whose gradients add
    up); returns the epoch's summed loss."""
    total = 0.0
    for group in groups:
        optimizer.zero_grad(set_to_none=True)
        for batch in model_batches(data, split_group(group, lengths, _width(model), budget), model):
            if stats is not None:
                stats.add(batch)
            loss = _batch_loss(model, batch, curve)
            loss.backward()
            total += float(loss.detach())
        optimizer.step()
        bar.update(len(group))
    return total


def _batch_loss(model, batch: Batch, curve: LossCurve | None) -> "torch.Tensor":
    """The summed cross-entropy of ``batch`` (:func:`~bertlook.analyses.probes.models.probe_loss`); each
    sentence's share goes to ``curve``."""
    if curve is None:
        return probe_loss(model(batch), batch.heads, batch.dep_mask, batch.cand_mask)
    gold = gold_log_probs(model(batch), batch.heads, batch.dep_mask, batch.cand_mask)  # [batch, word]
    loss = -gold.sum()  # = probe_loss
    per_sentence = (-gold.detach().sum(1)).tolist()  # [batch]
    curve.add(per_sentence, batch.lengths.tolist())
    return loss


def _training_info(model, data: ProbeData, opts: TrainingOptions, run: dict[str, Any], *, dev: ProbeData | None,
                   curve: LossCurve | None, stats: FeatureStats | None) -> dict[str, Any]:
    """The ``info`` of :func:`train_probe`: settings, data, timing, losses, then the diagnostics asked for."""
    n, seconds = len(data.sentences), run["seconds"]
    info = {
        "probe": opts.kind,
        "seed": opts.seed,
        "epochs": opts.epochs,
        "batch_size": opts.batch_size,
        "lr": float(opts.lr),
        "released_offbyone": bool(opts.released) if opts.family == "attn_glove" else False,
        "train_store": data.path,
        "n_sentences": n,
        "n_words": data.n_words,
        "steps": run["steps"],
        "seconds": seconds,
        "sentences_per_s": n * opts.epochs / seconds if seconds > 0 else float("inf"),
        "loss_per_word_by_epoch": run["epoch_losses"],
    }
    if hasattr(model, "root_ab"):
        info["root_a"], info["root_b"] = (float(v) for v in model.root_ab.detach())
    if opts.heads is not None:
        info["heads"] = list(model.head_subset)
    if opts.needs_glove:
        info["glove_oov_rate"] = data.n_oov / data.n_words if data.n_words else 0.0
    # diagnostics: only when asked for (the default info is unchanged)
    if opts.feature_scale != "none":
        info["feature_scale"] = opts.feature_scale
    if curve is not None:
        info["loss_every"] = curve.every
        info["loss_curve"] = curve.points
    if opts.eval_epochs:
        info["dev_store"] = dev.path
        info["dev_uas_by_epoch"] = run["dev_uas"]
    if stats is not None:
        info["feature_stats"] = stats.summary()
    return info


# ====================================================================================== evaluation
def evaluate_probe(model, kind: str, dev_store, *, glove: "GloveVectors | None" = None, mst: bool = False,
                   batch_size: int = 64) -> dict[str, Any]:
    """UAS of a trained probe on ``dev_store`` (non-punctuation words, independent argmax per word).

    Returns ``dict(uas, uas_mst, n_words, n_sentences)``; ``uas_mst`` is None unless ``mst``.
    ``kind="right_branching"`` ignores ``model`` (see :func:`right_branching_uas`).
    """
    if kind == "right_branching":
        return right_branching_uas(dev_store, mst=mst)
    base_kind(kind)
    needs_glove = "glove" in model.needs
    data = as_probe_data(dev_store, glove=glove if needs_glove else None, what="dev attention store")
    _check_compatible(model, data, "dev")
    correct = 0
    correct_mst = 0 if mst else None
    model.eval()
    with torch.no_grad():
        for batch in model_batches(data, _eval_batches(data, batch_size, _width(model)), model):
            logp = masked_log_softmax(model(batch), batch.cand_mask)  # [batch, word, candidate]
            pred = logp.argmax(dim=-1)  # [batch, word]
            counted = batch.dep_mask & ~batch.punct  # [batch, word]
            correct += int(((pred == batch.heads) & counted).sum())
            if mst:
                lp = logp.numpy()  # [batch, word, candidate]
                for b, W in enumerate(batch.lengths.tolist()):
                    h = mst_heads(lp[b, :W, : W + 1])  # [word]
                    keep = counted[b, :W].numpy()  # [word]
                    correct_mst += int(((h == batch.heads[b, :W].numpy()) & keep).sum())
    return uas_dict(correct, correct_mst, data.n_eval_words, len(data.sentences))


# ============================================================================ Table 3, the ablations
def run_probes(train_store, dev_store, *, random_train_store=None, random_dev_store=None,
               glove: "GloveVectors | None" = None, seeds: Sequence[int] = DEFAULT_SEEDS, epochs: int = 1,
               batch_size: int = 32, lr: float = 0.002, mst: bool = False,
               probes: Sequence[str] = PROBES, max_train_sentences: int | None = None,
               log=None) -> "pd.DataFrame":
    """Train and evaluate every probe in ``probes`` with every seed, one model at a time (the reference of
    :mod:`bertlook.analyses.probes.batch`); one row per probe (Table 3).

    Columns :data:`~bertlook.analyses.probes.catalogue.TABLE_COLUMNS` (UAS as fractions). Per-seed results are in
    ``df.attrs["runs"]``, per-store summaries in ``df.attrs["data"]``.
    """
    check_probes(probes)
    seeds = check_seeds(seeds)
    stores = open_probe_stores(train_store, dev_store, random_train_store=random_train_store,
                               random_dev_store=random_dev_store, glove=glove, probes=probes,
                               max_train_sentences=max_train_sentences)

    def fit(probe, seed, tr, dv):
        model, info = train_probe(probe, tr, seed=seed, epochs=epochs, batch_size=batch_size, lr=lr)
        return info, evaluate_probe(model, probe, dv, mst=mst)

    return table3_frame(stores, glove=glove, seeds=seeds, mst=mst, fit=fit, log=log)


def run_layer_ablations(train_store, dev_store, *, glove: "GloveVectors", seeds: Sequence[int] = DEFAULT_SEEDS,
                        epochs: int = 1, batch_size: int = 32, lr: float = 0.002, mst: bool = False,
                        modes: Sequence[str] = ABLATION_MODES, max_train_sentences: int | None = None,
                        log=None) -> "pd.DataFrame":
    """Attn+GloVe trained on the attention features of some layers only, every seed (which layers carry
    the probe's accuracy), one model at a time (the reference of :mod:`bertlook.analyses.probes.batch`): first
    the reference (every layer: Table 3's Attn+GloVe, the same seeds and training), then for each mode of
    ``modes`` and each layer l, ``keep`` (only layer l's heads) and ``drop`` (every layer but l). One row per
    ablation, :data:`~bertlook.analyses.probes.frames.ABLATION_COLUMNS` (fractions; ``delta_*``: the row's mean
    minus the reference's). Per-seed results in ``df.attrs["runs"]``.
    """
    modes = list(dict.fromkeys(modes))
    bad = [m for m in modes if m not in ABLATION_MODES]
    if bad:
        raise BertlookError(f"unknown ablation(s) {', '.join(map(repr, bad))}; choose from {', '.join(ABLATION_MODES)}")
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise BertlookError(f"seeds must be distinct and at least one, got {seeds}")
    train, dev = open_ablation_stores(train_store, dev_store, glove=glove, max_train_sentences=max_train_sentences)
    plan = ablation_plan(train, dev, modes)

    def fit(heads, seed):
        model, info = train_probe("attn_glove", train, seed=seed, epochs=epochs, batch_size=batch_size, lr=lr,
                                  heads=heads)
        return info, evaluate_probe(model, "attn_glove", dev, mst=mst)

    return ablation_frame(plan, train, dev, seeds=seeds, mst=mst, fit=fit, log=log)
