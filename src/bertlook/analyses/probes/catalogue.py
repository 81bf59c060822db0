"""The probes of paper Table 3 (Section 4.2): the catalogue.

The probe ids, labels and groups (:data:`PROBES`: Attn, Attn+GloVe, also with the released code's off-by-one,
Distances+GloVe, random-init, right-branching, the controls of the random-init probe and the positional / MLP
variants of issue 16), Table 3's columns and notes, the sizes both engines share (:data:`N_DIST`, :data:`HIDDEN`,
:data:`MAX_BATCH_ELEMENTS`), the checks of probe names and seeds and :class:`ProbeTask` (one probe to train with
every seed). The word-level data they read: :mod:`bertlook.analyses.probes.data`.

No torch here: reporting (tables, compare) reads the labels in the analysis env (envs/analysis.yaml).

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import pandas as pd

from bertlook.errors import BertlookError

# Table 3 rows, in the paper's order, then bertlook's control probes (no paper number; issue 14), then
# the probe controls of issue 16 (no paper number).
PROBES = ("right_branching", "distances_glove", "random_init_attn_glove", "attn", "attn_glove",
          "attn_glove_released", "glove_only", "attn_glove_uniform", "distances_only", "attn_glove_mlp")
#: controls of the random-init probe: GloVe only (no attention features), Attn+GloVe on exactly uniform maps
CONTROL_PROBES = ("glove_only", "attn_glove_uniform")
#: issue 16: the positional features of Distances+GloVe alone, and Attn+GloVe with an MLP for its weights
VARIANT_PROBES = ("distances_only", "attn_glove_mlp")
#: the rows without a paper number
OWN_PROBES = CONTROL_PROBES + VARIANT_PROBES
TRAINED_PROBES = tuple(p for p in PROBES if p != "right_branching")
GLOVE_PROBES = ("distances_glove", "random_init_attn_glove", "attn_glove", "attn_glove_released", "glove_only",
                "attn_glove_uniform", "attn_glove_mlp")
#: per-layer ablations of Attn+GloVe (`bertlook probe-ablations`): only layer l's attention features kept,
#: or layer l's removed
ABLATION_MODES = ("keep", "drop")
PROBE_LABELS = {
    "right_branching": "Right-branching",
    "distances_glove": "Distances + GloVe",
    "random_init_attn_glove": "Random-init Attn + GloVe",
    "attn": "Attn",
    "attn_glove": "Attn + GloVe",
    "attn_glove_released": "Attn + GloVe (released off-by-one)",
    "glove_only": "GloVe only (control)",
    "attn_glove_uniform": "Attn + GloVe, uniform maps (control)",
    "distances_only": "Distances only (control)",
    "attn_glove_mlp": "Attn + GloVe, MLP weights",
}
#: ``train_probe(feature_scale=...)``: ``none`` (the paper's features), ``n`` (attention features times the
#: sentence's map size ``W+2``: a uniform map gives 1)
FEATURE_SCALES = ("none", "n")
#: the run's Table 3 columns; tables/table3.csv adds ``paper_uas`` (reporting.paper_join.join_table3)
TABLE_COLUMNS = ["probe", "uas_mean", "uas_sd", "n_seeds", "uas_mst_mean", "uas_mst_sd", "note"]
STRUCTURAL_PROBE_NOTE = (
    "Hewitt & Manning's structural probe (80 UUAS, quoted in the paper's text) is not comparable: "
    "UUAS scores undirected edges of a minimum spanning tree, not heads."
)

PTB_PUNCT_XPOS = frozenset({"``", "''", ",", ".", ":", "-LRB-", "-RRB-", "#", "$"})
# Labels that exist in Stanford Dependencies (or ClearNLP) but not in UD: their presence means "SD".
SD_ONLY_RELS = frozenset({
    "pobj", "prep", "nn", "dobj", "possessive", "num", "auxpass", "nsubjpass", "csubjpass", "rcmod",
    "partmod", "infmod", "tmod", "npadvmod", "pcomp", "predet", "preconj", "quantmod", "number",
    "abbrev", "purpcl", "attr", "complm", "rel", "prt",
})
N_DIST = 8  # the positional features of a (dependent, candidate) pair (features.distance_features)
BUCKET_POOL_BATCHES = 50  # training batches are cut from length-sorted pools of 50 batches
MAX_BATCH_ELEMENTS = 2**24  # largest padded [B, K, Wm, Wm+1] (or [B, Wm, Wm+1, 256]) tensor run at once
HIDDEN = 256  # the tanh hidden layer of Distances+GloVe, GloVe only, Distances only and the MLP weights
DEFAULT_SEEDS = (0, 1, 2)


# ===================================================================================== the checks
def check_probes(probes: Sequence[str]) -> None:
    """Every name is one of :data:`PROBES` (else a :class:`BertlookError` listing them)."""
    unknown = [p for p in probes if p not in PROBES]
    if unknown:
        raise BertlookError(f"unknown probe(s) {', '.join(map(repr, unknown))}; choose from {', '.join(PROBES)}")


def check_seeds(seeds: Sequence[int]) -> list[int]:
    """The seeds as a non-empty list of distinct integers."""
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise BertlookError("at least one seed is needed")
    if len(set(seeds)) != len(seeds):
        raise BertlookError(f"seeds must be distinct, got {seeds}")
    return seeds


def base_kind(kind: str) -> tuple[str, bool]:
    """(model family, released_offbyone) of a Table 3 probe name."""
    if kind == "attn":
        return "attn", False
    if kind in ("attn_glove", "random_init_attn_glove"):
        return "attn_glove", False
    if kind == "attn_glove_released":
        return "attn_glove", True
    if kind == "attn_glove_uniform":
        return "attn_glove", False
    if kind == "distances_glove":
        return "distances_glove", False
    if kind == "glove_only":
        return "glove_only", False
    if kind == "distances_only":
        return "distances_only", False
    if kind == "attn_glove_mlp":
        return "attn_glove_mlp", False
    raise BertlookError(f"unknown probe {kind!r} (trainable probes: {', '.join(TRAINED_PROBES)})")


def is_missing(v) -> bool:
    """``v`` is NaN / None / NA (``pd.isna``; False for values it cannot judge, e.g. lists)."""
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


# ========================================================================================== tasks
# The batched engine (bertlook.analyses.probes.batch, torch) trains every probe x seed of Table 3, of Table 3
# on the norm maps and of the per-layer ablations together (driven by bertlook.analyses.probes.tables); the
# task type they share is here, below both (their corpus check: data.corpus_signature).
#: probes of the attention family (one Attn+GloVe cohort per attention source)
ATTN_PROBES = ("attn", "attn_glove", "attn_glove_released", "attn_glove_uniform", "random_init_attn_glove")
#: probes that read no attention (identical on every store of the same sentences)
NO_ATTENTION_PROBES = ("distances_glove", "glove_only", "distances_only")


@dataclasses.dataclass(frozen=True)
class ProbeTask:
    """One probe to train with every seed: ``probe`` (a name of :data:`PROBES`), the attention ``source``
    it reads (``model``, ``norm``, ``random``), ``heads`` (flattened head indices read, ascending; None = all)."""

    probe: str
    source: str = "model"
    heads: tuple[int, ...] | None = None

    @property
    def family(self) -> str:
        """The batched engine's cohort family: ``attn``, ``mlp``, ``hidden`` or ``offset``."""
        if self.probe in ATTN_PROBES:
            return "attn"
        try:
            return {"attn_glove_mlp": "mlp", "distances_glove": "hidden", "glove_only": "hidden",
                    "distances_only": "offset"}[self.probe]
        except KeyError:
            raise BertlookError(f"probe {self.probe!r} is not trained (no batched form)") from None

    @property
    def maps(self) -> str:
        """The attention read: ``uniform`` (exactly uniform maps of the sentences) or ``source``."""
        return "uniform" if self.probe == "attn_glove_uniform" else self.source
