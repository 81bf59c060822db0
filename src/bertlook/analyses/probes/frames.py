"""Table 3 and the per-layer ablations as frames (no torch), from per-seed fits of either engine.

:func:`open_probe_stores` / :func:`open_ablation_stores` open and check the stores a run reads;
:func:`table3_frame` and :func:`ablation_frame` assemble the rows from a ``fit`` callback that returns each
(probe or ablation, seed)'s training info and dev result: the reference's
(:func:`bertlook.analyses.probes.reference.run_probes`,
:func:`~bertlook.analyses.probes.reference.run_layer_ablations`) trains one model per call, the batched engine's
(:func:`bertlook.analyses.probes.tables.run_probe_tables`) looks the models up, so both give tables of the
same format. Also the ablations' head sets (:func:`ablation_heads`, :func:`ablation_plan`) and the note on the
random-init row (:func:`random_init_note`).

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from bertlook.analyses.probes.catalogue import (
    ABLATION_MODES,
    GLOVE_PROBES,
    PROBES,
    TABLE_COLUMNS,
    TRAINED_PROBES,
    check_probes,
)
from bertlook.analyses.probes.data import ProbeData, as_probe_data
from bertlook.analyses.probes.rows import table_frame
from bertlook.analyses.probes.uas import right_branching_uas
from bertlook.analyses.uniformity import row_entropy_by_layer
from bertlook.attention.store import open_store
from bertlook.data.glove import GloveVectors
from bertlook.errors import BertlookError


# ======================================================================================== Table 3
def _mean_sd(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation of the values that are not None / NaN (NaN: too few)."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return float("nan"), float("nan")
    mean = float(np.mean(vals))
    sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan")
    return mean, sd


def _row(probe: str, **kw) -> dict[str, Any]:
    """A Table 3 row of ``probe``: every column None, the note empty, then ``kw``."""
    row = {c: None for c in TABLE_COLUMNS}
    row.update(probe=probe, note="")
    row.update(kw)
    return row


@dataclasses.dataclass
class ProbeStores:
    """The stores of one Table 3 run, opened and checked (:func:`open_probe_stores`)."""

    probes: list[str]
    train: "ProbeData | None"
    dev: "ProbeData | None"
    rtrain: "ProbeData | None" = None
    rdev: "ProbeData | None" = None
    random_missing: str | None = None

    def data_summary(self) -> dict[str, Any]:
        """The summary of each store opened (``train``, ``dev``, ``random_train``, ``random_dev``)."""
        return {k: v.summary() for k, v in (("train", self.train), ("dev", self.dev), ("random_train", self.rtrain),
                                            ("random_dev", self.rdev)) if v is not None}


def open_probe_stores(train_store, dev_store, *, random_train_store=None, random_dev_store=None,
                      glove: "GloveVectors | None" = None, probes: Sequence[str] = PROBES,
                      max_train_sentences: int | None = None) -> ProbeStores:
    """Open the stores that the Table 3 rows of ``probes`` read (the checks of
    :func:`~bertlook.analyses.probes.reference.run_probes`)."""
    check_probes(probes)
    gl = glove if any(p in GLOVE_PROBES for p in probes) else None
    # the model's stores only for the probes that read them (random_init_attn_glove reads the random-init ones)
    own = [p for p in probes if p != "random_init_attn_glove"]
    out = ProbeStores(list(probes), None, None)
    if any(p in TRAINED_PROBES for p in own):
        if train_store is None:
            raise BertlookError(f"probe(s) {', '.join(p for p in own if p in TRAINED_PROBES)} need the training "
                                "attention store (--train-attention)")
        out.train = as_probe_data(train_store, glove=gl, max_sentences=max_train_sentences,
                                  what="training attention store")
    if own:
        if dev_store is None:
            raise BertlookError(f"probe(s) {', '.join(own)} need the dev attention store (--dev-attention)")
        out.dev = as_probe_data(dev_store, glove=gl, what="dev attention store")
    if out.train is not None and out.train.num_heads_total != out.dev.num_heads_total:
        raise BertlookError(
            f"{out.train.path} has {out.train.num_heads_total} heads but {out.dev.path} has {out.dev.num_heads_total}"
        )
    if "random_init_attn_glove" in probes:
        if random_train_store is None or random_dev_store is None:
            out.random_missing = ("no random-init attention stores given (--random-train-attention and "
                                  "--random-dev-attention: `bertlook extract-words --random-init-seed SEED`)")
        else:
            out.rtrain = as_probe_data(random_train_store, glove=gl, max_sentences=max_train_sentences,
                                  what="random-init training attention store")
            out.rdev = as_probe_data(random_dev_store, glove=gl, what="random-init dev attention store")
            if out.rtrain.num_heads_total != out.rdev.num_heads_total:
                raise BertlookError(f"{out.rtrain.path} and {out.rdev.path} have different numbers of heads")
    return out


def table3_trainable(stores: ProbeStores, glove: "GloveVectors | None") -> list[str]:
    """The probes of ``stores`` that :func:`table3_frame` trains (the others get a note or are baselines)."""
    return [p for p in stores.probes if p in TRAINED_PROBES and not (p in GLOVE_PROBES and glove is None)
            and not (p == "random_init_attn_glove" and stores.random_missing)]


def table3_frame(stores: ProbeStores, *, glove: "GloveVectors | None", seeds: Sequence[int], mst: bool, fit,
                 log=None) -> "pd.DataFrame":
    """Table 3's frame: one row per probe of ``stores``, the trained ones from ``fit(probe, seed, train, dev)``
    -> ``(info, dev result)`` (the reference: :func:`~bertlook.analyses.probes.reference.train_probe` then
    :func:`~bertlook.analyses.probes.reference.evaluate_probe`)."""
    say = log or (lambda msg: None)
    rows, runs = [], []
    for probe in stores.probes:
        if probe == "right_branching":
            res = right_branching_uas(stores.dev, mst=mst)
            rows.append(_row(probe, uas_mean=res["uas"], n_seeds=0,
                             uas_mst_mean=res["uas_mst"] if mst else None))
            runs.append({"probe": probe, "seed": None, **res})
            say(f"{probe}: UAS {100 * res['uas']:.1f}")
            continue
        if probe in GLOVE_PROBES and glove is None:
            rows.append(_row(probe, note="no GloVe vectors given (--glove)"))
            say(f"{probe}: skipped, no GloVe vectors")
            continue
        if probe == "random_init_attn_glove" and stores.random_missing:
            rows.append(_row(probe, note=stores.random_missing))
            say(f"{probe}: skipped, {stores.random_missing}")
            continue
        tr, dv = (stores.rtrain, stores.rdev) if probe == "random_init_attn_glove" else (stores.train, stores.dev)
        uas, uas_mst = [], []
        for seed in seeds:
            info, res = fit(probe, seed, tr, dv)
            uas.append(res["uas"])
            if mst:
                uas_mst.append(res["uas_mst"])
            runs.append({**info, **{f"dev_{k}": v for k, v in res.items()}})
            say(f"{probe} seed {seed}: UAS {100 * res['uas']:.1f}"
                + (f", MST {100 * res['uas_mst']:.1f}" if mst else "") + f" ({info['seconds']:.1f} s)")
        m, sd = _mean_sd(uas)
        row = _row(probe, uas_mean=m, uas_sd=sd, n_seeds=len(seeds))
        if mst:
            row["uas_mst_mean"], row["uas_mst_sd"] = _mean_sd(uas_mst)
        if probe == "random_init_attn_glove":
            row["note"] = random_init_note(dv.path)
        rows.append(row)
    return table_frame(rows, runs, stores.data_summary())


# ============================================================================ per-layer ablations
#: tables/probe_ablations.csv
ABLATION_COLUMNS = ["ablation", "layer", "n_heads", "uas_mean", "uas_sd", "n_seeds", "uas_mst_mean", "uas_mst_sd",
                    "delta_uas", "delta_uas_mst"]


def ablation_heads(mode: str, layer: int, num_layers: int, num_heads: int) -> list[int]:
    """The flattened head indices an ablation keeps: ``keep`` = the heads of ``layer`` (1-based) only,
    ``drop`` = every head but those of ``layer``."""
    if mode not in ABLATION_MODES:
        raise BertlookError(f"unknown ablation {mode!r}; choose from {', '.join(ABLATION_MODES)}")
    if not 1 <= int(layer) <= int(num_layers):
        raise BertlookError(f"layer {layer} out of range 1..{num_layers}")
    own = set(range((int(layer) - 1) * num_heads, int(layer) * num_heads))
    return sorted(own) if mode == "keep" else [k for k in range(num_layers * num_heads) if k not in own]


def ablation_plan(train: ProbeData, dev: ProbeData,
                  modes: Sequence[str]) -> list[tuple[str, int | None, list[int] | None]]:
    """``(ablation, layer, heads)`` of every row of the ablations
    (:func:`~bertlook.analyses.probes.reference.run_layer_ablations`): first ``("all", None, None)``."""
    modes = list(dict.fromkeys(modes))
    bad = [m for m in modes if m not in ABLATION_MODES]
    if bad:
        raise BertlookError(f"unknown ablation(s) {', '.join(map(repr, bad))}; choose from {', '.join(ABLATION_MODES)}")
    if train.num_heads_total != dev.num_heads_total:
        raise BertlookError(f"{train.path} has {train.num_heads_total} heads but {dev.path} has {dev.num_heads_total}")
    L, H = train.store.num_layers, train.store.num_heads
    plan: list[tuple[str, int | None, list[int] | None]] = [("all", None, None)]
    return plan + [(m, layer, ablation_heads(m, layer, L, H)) for m in modes for layer in range(1, L + 1)]


def ablation_frame(plan, train: ProbeData, dev: ProbeData, *, seeds: Sequence[int], mst: bool, fit,
                   log=None) -> "pd.DataFrame":
    """The ablations' frame (:data:`ABLATION_COLUMNS`) of ``plan`` (:func:`ablation_plan`), each row's seeds
    from ``fit(heads, seed)`` -> ``(info, dev result)``."""
    say = log or (lambda msg: None)
    L, H = train.store.num_layers, train.store.num_heads
    rows, runs = [], []
    for ablation, layer, heads in plan:
        uas, uas_mst = [], []
        for seed in seeds:
            info, res = fit(heads, seed)
            uas.append(res["uas"])
            if mst:
                uas_mst.append(res["uas_mst"])
            runs.append({"ablation": ablation, "layer": layer, **info, **{f"dev_{k}": v for k, v in res.items()}})
            say(f"probe-ablations: {ablation}" + ("" if layer is None else f" layer {layer}") + f" seed {seed}: "
                f"UAS {100 * res['uas']:.1f}" + (f", MST {100 * res['uas_mst']:.1f}" if mst else "")
                + f" ({info['seconds']:.1f} s)")
        m, sd = _mean_sd(uas)
        mm, msd = _mean_sd(uas_mst) if mst else (float("nan"), float("nan"))
        rows.append({"ablation": ablation, "layer": "all" if layer is None else str(layer),
                     "n_heads": H * L if heads is None else len(heads), "uas_mean": m, "uas_sd": sd,
                     "n_seeds": len(seeds), "uas_mst_mean": mm, "uas_mst_sd": msd})
    ref, ref_mst = rows[0]["uas_mean"], rows[0]["uas_mst_mean"]
    for r in rows:
        r["delta_uas"] = r["uas_mean"] - ref
        r["delta_uas_mst"] = r["uas_mst_mean"] - ref_mst
    df = pd.DataFrame(rows, columns=ABLATION_COLUMNS)
    df.attrs["runs"] = runs
    df.attrs["data"] = {"train": train.summary(), "dev": dev.summary()}
    df.attrs["num_layers"], df.attrs["num_heads"] = L, H
    return df


def open_ablation_stores(train_store, dev_store, *, glove: "GloveVectors", max_train_sentences: int | None = None
                         ) -> tuple[ProbeData, ProbeData]:
    """The training and dev stores of the per-layer ablations, GloVe attached (the checks of
    :func:`~bertlook.analyses.probes.reference.run_layer_ablations`)."""
    if glove is None:
        raise BertlookError("the per-layer ablations of Attn+GloVe need GloVe vectors (--glove)")
    train = as_probe_data(train_store, glove=glove, max_sentences=max_train_sentences, what="training attention store")
    dev = as_probe_data(dev_store, glove=glove, what="dev attention store")
    return train, dev


# ================================================================================ the random-init note
#: sentences of the random-init dev store whose rows measure how uniform its maps are (Table 3 note)
UNIFORMITY_SENTENCES = 500


def random_init_note(random_dev_store) -> str:
    """Table 3's note on the random-init row (issue 14): which reading of the re-initialisation made the
    maps (the store meta's ``random_init.keep``) and how uniform they are (mean row entropy / ln n, the
    range over layers, first :data:`UNIFORMITY_SENTENCES` sentences)."""
    st = open_store(random_dev_store, level="word", what="random-init dev attention store")
    keep = (st.meta.get("random_init") or {}).get("keep", "embeddings")
    reading = ("every weight re-initialised except the word and position embeddings (the paper's reading, "
               "probes.random_init_keep: embeddings; `none` re-initialises them too)" if keep == "embeddings" else
               "every weight re-initialised, embeddings included (probes.random_init_keep: none; the paper's "
               "reading keeps the word and position embeddings)")
    ratios = [r["ratio"] for r in row_entropy_by_layer(st, max_sentences=UNIFORMITY_SENTENCES)]
    lo, hi = f"{100 * min(ratios):.1f}", f"{100 * max(ratios):.1f}"
    span = f"{lo}% of ln n in every layer" if lo == hi else f"{lo}-{hi}% of ln n by layer"
    return f"{reading}; its maps: mean row entropy {span} (100% = uniform; docs/guide/paper.md)"
