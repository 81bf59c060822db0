"""Every probe table in one loop (issue 24): Table 3, Table 3 on the norm maps and the per-layer ablations
of Attn+GloVe, every probe x seed trained together by the batched engine (:mod:`bertlook.analyses.probe_batch`,
torch, imported when the probes train); the rows are assembled by the same functions as
:func:`bertlook.analyses.probe_reference.run_probes` / :func:`~bertlook.analyses.probe_reference.run_layer_ablations`
(:mod:`bertlook.analyses.probe_frames`: ``table3_frame``, ``ablation_frame``), so the tables have the same format.

This module sits above both: ``probe_tables`` -> ``probe_batch`` / ``probe_frames`` -> ``probes``; it imports no
torch itself (``probe_batch`` and ``probe_split`` are imported when the probes train).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

from bertlook.analyses.probe_frames import (
    ablation_frame,
    ablation_plan,
    open_ablation_stores,
    open_probe_stores,
    table3_frame,
    table3_trainable,
)
from bertlook.analyses.probes import (
    DEFAULT_SEEDS,
    NO_ATTENTION_PROBES,
    PROBES,
    ProbeData,
    ProbeTask,
    base_kind,
    check_probes,
    check_seeds,
    corpus_signature,
)

if TYPE_CHECKING:
    from bertlook.data.glove import GloveVectors


def run_probe_tables(train_store=None, dev_store=None, *, random_train_store=None, random_dev_store=None,
                     norm_train_store=None, norm_dev_store=None, glove: "GloveVectors | None" = None,
                     seeds: Sequence[int] = DEFAULT_SEEDS, epochs: int = 1, batch_size: int = 32, lr: float = 0.002,
                     mst: bool = False, probes: Sequence[str] = PROBES, norm_probes: Sequence[str] = (),
                     ablation_modes: Sequence[str] = (), max_train_sentences: int | None = None,
                     threads: int | None = None, log=None) -> dict[str, Any]:
    """Table 3 (``probes``; the random-init probe on its own stores), Table 3 on the norm maps (``norm_probes``)
    and the per-layer ablations of Attn+GloVe (``ablation_modes``), every model trained in one loop per corpus.

    Returns ``{"table3", "table3_norm", "ablations"}`` (the frames of
    :func:`bertlook.analyses.probe_reference.run_probes` /
    :func:`~bertlook.analyses.probe_reference.run_layer_ablations`, None when not asked for) and ``"engine"`` (timing,
    models, which norm rows reuse Table 3's models). A probe that reads no attention is trained once when the
    norm stores hold the same sentences as the model's (its rows are then the same in both tables); the
    ablations' reference row is Table 3's Attn+GloVe."""
    say = log or (lambda msg: None)
    check_probes(probes)
    check_probes(norm_probes)
    seeds = check_seeds(seeds)
    from bertlook.analyses.probe_batch import tune_malloc  # torch: imported when the probes train

    t_start = time.perf_counter()
    tune_malloc()
    kw = dict(glove=glove, max_train_sentences=max_train_sentences)
    t3 = open_probe_stores(train_store, dev_store, random_train_store=random_train_store,
                           random_dev_store=random_dev_store, probes=probes, **kw) if probes else None
    nm = open_probe_stores(norm_train_store, norm_dev_store, probes=norm_probes, **kw) if norm_probes else None
    abl = None
    if ablation_modes:
        tr, dv = open_ablation_stores(t3.train if t3 and t3.train is not None else train_store,
                                      t3.dev if t3 and t3.dev is not None else dev_store, **kw)
        abl = (tr, dv, ablation_plan(tr, dv, ablation_modes))
    train, dev = _sources(t3, nm, abl)
    plan = _plan(t3, nm, abl, train, dev, glove)
    trained: dict[str, dict] = {"results": {}, "info": {}}
    groups = []
    for names in _corpora(train, dev):
        tasks = [t for t in dict.fromkeys(plan["tasks"]) if t.source in names]
        if not tasks:
            continue
        if any(t.probe not in ("attn", "distances_only") for t in tasks):
            for name in names:
                train[name].attach_glove(glove)
                dev[name].attach_glove(glove)
        part = train_and_evaluate(tasks, {n: train[n] for n in names}, {n: dev[n] for n in names}, seeds=seeds,
                                  epochs=epochs, batch_size=batch_size, lr=lr, mst=mst, threads=threads, log=say)
        trained["results"].update(part["results"])
        trained["info"].update(part["info"])
        groups.append({"sources": list(names), "probes": [t.probe for t in tasks], **part["timing"]})
    t0 = time.perf_counter()
    out = _frames(t3, nm, abl, plan, trained, seeds=seeds, mst=mst, glove=glove, say=say)
    out["engine"] = {"seconds": time.perf_counter() - t_start, "tables_s": time.perf_counter() - t0,
                     "models": sum(g["models"] for g in groups), "corpora": groups,
                     "norm_rows_reused_from_table3": plan["reused"]}
    return out


def _sources(t3, nm, abl) -> tuple[dict[str, ProbeData], dict[str, ProbeData]]:
    """The training and dev stores of each source that a probe is trained on."""
    train, dev = {}, {}
    if t3 is not None and t3.train is not None:
        train["model"], dev["model"] = t3.train, t3.dev
    elif abl is not None:
        train["model"], dev["model"] = abl[0], abl[1]
    if t3 is not None and t3.rtrain is not None:
        train["random"], dev["random"] = t3.rtrain, t3.rdev
    if nm is not None and nm.train is not None:
        train["norm"], dev["norm"] = nm.train, nm.dev
    return train, dev


def _plan(t3, nm, abl, train, dev, glove) -> dict[str, Any]:
    """The task of each row: ``t3`` / ``norm``: probe -> task, ``ablations``: heads -> task, ``tasks``, ``reused``."""
    t3_tasks = {p: ProbeTask(p, "random" if p == "random_init_attn_glove" else "model")
                for p in (table3_trainable(t3, glove) if t3 is not None else [])}
    same = ("model" in train and "norm" in train and corpus_signature(train["model"]) == corpus_signature(train["norm"])
            and corpus_signature(dev["model"]) == corpus_signature(dev["norm"]))
    norm_tasks = {p: ProbeTask(p, "model" if same and p in NO_ATTENTION_PROBES else "norm")
                  for p in (table3_trainable(nm, glove) if nm is not None else [])}
    abl_tasks = {}
    for _, _, h in abl[2] if abl is not None else ():
        key = None if h is None else tuple(h)
        abl_tasks[key] = ProbeTask("attn_glove", "model", key)
    return {"t3": t3_tasks, "norm": norm_tasks, "ablations": abl_tasks,
            "tasks": [*t3_tasks.values(), *norm_tasks.values(), *abl_tasks.values()],
            "reused": [p for p, t in norm_tasks.items() if t.source == "model"]}


def _corpora(train: dict[str, ProbeData], dev: dict[str, ProbeData]) -> list[list[str]]:
    """The sources grouped by corpus (same training and dev sentences): each group trains in one loop."""
    groups: list[tuple[tuple, list[str]]] = []
    for name in train:
        sig = (corpus_signature(train[name]), corpus_signature(dev[name]))
        for key, names in groups:
            if key == sig:
                names.append(name)
                break
        else:
            groups.append((sig, [name]))
    return [names for _, names in groups]


def _frames(t3, nm, abl, plan, trained: dict, *, seeds, mst, glove, say) -> dict[str, Any]:
    def fit_for(tasks: dict):
        def fit(probe, seed, tr, dv):
            task = tasks[probe]
            info = dict(trained["info"][(task, seed)])
            if info["train_store"] != tr.path:  # a norm row that reuses Table 3's model (no attention read)
                info["trained_on"], info["train_store"] = info["train_store"], tr.path
            return info, trained["results"][(task, seed)]
        return fit

    out: dict[str, Any] = {"table3": None, "table3_norm": None, "ablations": None}
    if t3 is not None:
        out["table3"] = table3_frame(t3, glove=glove, seeds=seeds, mst=mst, fit=fit_for(plan["t3"]), log=say)
    if nm is not None:
        out["table3_norm"] = table3_frame(nm, glove=glove, seeds=seeds, mst=mst, fit=fit_for(plan["norm"]), log=say)
    if abl is not None:
        def fit_ablation(heads, seed):
            task = plan["ablations"][None if heads is None else tuple(heads)]
            return dict(trained["info"][(task, seed)]), trained["results"][(task, seed)]

        out["ablations"] = ablation_frame(abl[2], abl[0], abl[1], seeds=seeds, mst=mst, fit=fit_ablation, log=say)
    return out


def train_and_evaluate(tasks: Sequence[ProbeTask], train: dict[str, ProbeData], dev: dict[str, ProbeData], *,
                       seeds: Sequence[int], epochs: int, batch_size: int, lr: float, mst: bool,
                       threads: int | None = None, log=None) -> dict[str, Any]:
    """Train ``tasks`` x ``seeds`` on ``train`` (source name -> store, one corpus) in one loop and evaluate them on
    ``dev`` with the batched engine (:mod:`bertlook.analyses.probe_batch`): ``results`` and ``info`` ((task, seed) ->
    the dict of :func:`~bertlook.analyses.probe_reference.evaluate_probe` /
    :func:`~bertlook.analyses.probe_reference.train_probe`) and ``timing`` (seconds per phase, steps/s, models)."""
    from bertlook.analyses.probe_batch import BatchedProbes, tune_malloc  # torch: as above
    from bertlook.analyses.probe_split import SplitFeatures

    say = log or (lambda msg: None)
    timing: dict[str, Any] = {}
    t0 = time.perf_counter()
    maps = sorted({t.maps for t in tasks if t.family in ("attn", "mlp")})
    split = SplitFeatures(train, attention=maps)
    timing["load_train_s"] = time.perf_counter() - t0
    say(f"probes: {len(tasks)} probes x {len(seeds)} seeds on {split.n} sentences ({', '.join(train)} stores; "
        f"{split.nbytes() / 2**20:.0f} MiB of attention in memory)")
    engine = BatchedProbes(tasks, seeds, num_heads_total=split.num_heads_total, glove_dim=split.glove_dim, lr=lr)
    fit = engine.train(split, epochs=epochs, batch_size=batch_size, threads=threads)
    timing.update(train_s=fit["seconds"], steps=fit["steps"], steps_per_s=fit["steps_per_s"])
    corpus = {"n_sentences": split.n, "n_words": split.data.n_words, "oov": split.data.n_oov}
    del split
    tune_malloc(release=True)
    t0 = time.perf_counter()
    dsplit = SplitFeatures(dev, attention=maps)
    timing["load_dev_s"] = time.perf_counter() - t0
    ev = engine.evaluate(dsplit, mst=mst, threads=threads)
    timing.update(evaluate_s=ev["seconds"], mst_s=ev["mst_seconds"])
    del dsplit
    tune_malloc(release=True)
    info = {}
    for s, seed in enumerate(engine.seeds):
        for c, task in enumerate(engine.columns):
            info[(task, seed)] = _run_info(engine, task, seed, fit, s, c, train_store=train[task.source].path,
                                           epochs=epochs, batch_size=batch_size, **corpus)
    timing.update(models=engine.n_models, parameters=engine.n_parameters, threads=fit["threads"])
    return {"results": engine.results(ev), "info": info, "timing": timing}


def _run_info(engine, task: ProbeTask, seed: int, fit: dict, s: int, c: int, *, train_store, n_sentences,
              n_words, oov, epochs, batch_size) -> dict[str, Any]:
    """The per-model dict of :func:`~bertlook.analyses.probe_reference.train_probe` (the same keys), plus
    ``engine``."""
    family, released = base_kind(task.probe)
    info = {"probe": task.probe, "seed": int(seed), "epochs": int(epochs), "batch_size": int(batch_size),
            "lr": engine.lr, "released_offbyone": bool(released) if family == "attn_glove" else False,
            "train_store": train_store, "n_sentences": n_sentences, "n_words": n_words, "steps": fit["steps"],
            "seconds": fit["seconds"], "loss_per_word_by_epoch": fit["loss_per_word"][:, s, c].tolist(),
            "sentences_per_s": n_sentences * int(epochs) / fit["seconds"] if fit["seconds"] > 0 else float("inf")}
    state = engine.state(task, seed)
    if "root_ab" in state:
        info["root_a"], info["root_b"] = (float(v) for v in state["root_ab"])
    if task.heads is not None:
        info["heads"] = list(task.heads)
    if task.probe not in ("attn", "distances_only"):
        info["glove_oov_rate"] = oov / n_words if n_words else 0.0
    info["engine"] = "batched"
    return info


__all__ = ["run_probe_tables", "train_and_evaluate"]
