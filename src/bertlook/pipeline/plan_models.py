"""What ``bertlook plan`` knows of a model before anything is downloaded: its ``config.json`` (from a folder of
config files, a local or package model, the Hugging Face cache, or a download of that one file), whether bertlook
can analyse it (else the reason it is refused), its parameter count and the bytes of its weights.

Only ``config.json`` is read; no weights are loaded. The parameter count is the checkpoint's: every weight matrix,
bias and norm of the model's family as transformers builds it (tied input/output embeddings counted once, an untied
output head counted), not :attr:`bertlook.pipeline.sizing.ModelDims.params` (which sizes memory requests and counts a
decoder's head as untied: an upper bound). Families without a formula here fall back to that one (said in
``params_source``).

What a config can tell about whether bertlook can analyse the model is checked here (:func:`refusal`: remote code,
no attention, encoder-decoder, an ALBERT with several layers per layer group, a ``model_type`` the installed
transformers has no class for; :func:`layout_refusal`: a layer layout the norm-based maps or the contributions
step cannot read while they are switched on); that the class then
loads with the eager attention path, the one that returns the weights, is checked when a step loads it
(:func:`bertlook.attention.modeling.load_model`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from bertlook.errors import BertlookError
from bertlook.pipeline.model_spec import (cached_file, family_problem, local_config, read_config_file,
                                          resolve_model)
from bertlook.pipeline.sizing import ModelDims

#: bytes per weight of the ``torch_dtype`` / ``dtype`` a config.json names (float32 when it names none)
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
#: the hub's page of a model (where a gated model's licence is accepted)
HUB_PAGE = "https://huggingface.co/{repo}"


@dataclasses.dataclass
class ModelConfig:
    """One model's ``config.json`` and where it came from (``source``: a path, or ``hub download``)."""

    cfg: dict[str, Any] | None
    source: str
    refused: str | None = None  # why the config could not be had (a gated model without a token, no network)
    hub: bool = True  # a hub id (its revision matters), not a local or package model
    weights_bytes: int | None = None  # the weights files' size, where they are already here (local, HF cache)


def configs_dir_path(configs_dir: str | os.PathLike, name_or_path: str) -> Path:
    """``DIR/<org>--<name>/config.json`` of a hub id (``DIR/<name>/config.json`` without an org)."""
    return Path(configs_dir) / name_or_path.strip().replace("/", "--") / "config.json"


def local_weights_bytes(root: Path) -> int | None:
    """Bytes of a model directory's weights: its safetensors files, else its PyTorch ``.bin`` files."""
    for pattern in ("*.safetensors", "pytorch_model*.bin"):
        files = [p for p in root.glob(pattern) if p.is_file()]
        if files:
            return sum(p.stat().st_size for p in files)
    return None


def _first_line(err: BaseException, limit: int = 200) -> str:
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def hub_download(repo: str, revision: str | None) -> str:
    """The local path of ``config.json`` of a hub model, downloaded (only that file) into the HF cache."""
    import huggingface_hub  # lazy: only a plan without its configs downloads

    return huggingface_hub.hf_hub_download(repo, "config.json", revision=revision)


def find_config(model: Mapping[str, Any], configs_dir: str | os.PathLike | None = None, *,
                download: Callable[[str, str | None], str] = hub_download) -> ModelConfig:
    """The ``config.json`` of one ``models[]`` entry: ``configs_dir`` first, then a local / package model, the HF
    cache, else ``download`` (a gated model without ``HF_TOKEN`` is not tried: refused with its licence page).
    A malformed file is a BertlookError naming it; a config that cannot be had is a refusal."""
    spec, revision = str(model["name_or_path"]), model.get("revision")
    if configs_dir is not None:
        path = configs_dir_path(configs_dir, spec)
        if path.is_file():
            return ModelConfig(read_config_file(path), str(path))
    try:
        resolved = resolve_model(spec, revision)
    except BertlookError as err:
        return ModelConfig(None, spec, refused=str(err), hub=False)
    if not resolved.is_hub:
        root = Path(resolved.path_or_id)
        return ModelConfig(local_config(resolved), str(root / "config.json"), hub=False,
                           weights_bytes=local_weights_bytes(root))
    hit = cached_file(resolved.path_or_id, "config.json", revision)
    if hit:
        weights = cached_file(resolved.path_or_id, "model.safetensors", revision)
        return ModelConfig(read_config_file(Path(hit)), hit,
                           weights_bytes=Path(weights).stat().st_size if weights else None)
    if model.get("gated", False) and not os.environ.get("HF_TOKEN"):
        return ModelConfig(None, "hub", refused=(
            f"gated model, config.json not cached and HF_TOKEN is not set: accept the licence at "
            f"{HUB_PAGE.format(repo=spec)} and set HF_TOKEN (or pass --configs DIR)"))
    try:
        path = Path(download(resolved.path_or_id, revision))
    except Exception as err:  # network, auth, missing repo or revision: the plan goes on with the others
        return ModelConfig(None, "hub download", refused=f"config.json could not be downloaded ({_first_line(err)})")
    return ModelConfig(read_config_file(path), f"hub download ({path})")


def transformers_types() -> frozenset[str] | None:
    """The ``model_type`` values the installed transformers has classes for (None when it cannot be imported)."""
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # lazy: heavy import
    except ImportError:
        return None
    return frozenset(CONFIG_MAPPING_NAMES)


def refusal(cfg: Mapping[str, Any], spec: str, known_types: frozenset[str] | None) -> str | None:
    """Why bertlook cannot analyse the model of ``cfg`` (:func:`bertlook.pipeline.model_spec.family_problem`, or a
    ``model_type`` the installed transformers has no class for, so no eager attention path), else None."""
    problem = family_problem(dict(cfg), spec)
    if problem:
        return problem
    model_type = cfg.get("model_type")
    inner = int(cfg.get("inner_group_num") or 1)
    if model_type == "albert" and inner > 1:  # shared layer groups (num_hidden_groups < layers) are read by call order
        return (f"model {spec!r}: ALBERT with {inner} layers per layer group (inner_group_num): each of its "
                "num_hidden_layers runs several attention modules, which bertlook does not map to layers "
                "(supported: inner_group_num 1, as every released ALBERT)")
    if known_types is not None and model_type not in known_types:
        return (f"model {spec!r}: transformers has no class for model_type {model_type!r} (an unknown "
                "architecture: no eager attention path to read the weights from)")
    return None


#: the ``model_type`` values whose layers the readers that look inside a layer know (the norm-based maps, ALTI, value
#: zeroing, head ablation: docs/definitions.md#supported-layouts); each is checked on a tiny random model of its
#: class (tests/test_deberta_modernbert.py), so that a model the plan accepts is one those readers read
INSIDE_TYPES = frozenset({
    "bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "albert", "deberta-v2", "modernbert",
    "gpt2", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
    "gemma3_text", "olmo", "olmo2", "stablelm", "starcoder2", "smollm3", "granite",
})
#: the switches (:func:`bertlook.pipeline.steps.switches`) whose steps read inside a layer
INSIDE_SWITCHES = ("norms", "contributions")


def layout_refusal(cfg: Mapping[str, Any], spec: str, on: Mapping[str, bool]) -> str | None:
    """Why the steps switched on in ``on`` cannot read the model of ``cfg``: a ``model_type`` outside
    :data:`INSIDE_TYPES` while a step that reads inside a layer (:data:`INSIDE_SWITCHES`) is on; else None."""
    wanted = [name for name in INSIDE_SWITCHES if on.get(name)]
    model_type = cfg.get("model_type")
    if not wanted or model_type in INSIDE_TYPES:
        return None
    keys = " and ".join(f"{name}.enabled" for name in wanted)
    return (f"model {spec!r}: {keys} read inside each layer (the value and output projections of its attention: "
            f"norm-based maps{', ALTI, value zeroing, head ablation' if 'contributions' in wanted else ''}), and the "
            f"layer layout of model_type {model_type!r} is not one bertlook reads (docs/definitions.md#supported-"
            f"layouts); switch {' and '.join(wanted)} off to run its attention analyses, or leave the model out")


def weights_dtype(cfg: Mapping[str, Any]) -> str:
    """The dtype the checkpoint's weights are stored in (config.json's ``torch_dtype`` / ``dtype``; float32 when
    it names none, as older configs do)."""
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    return str(dtype) if str(dtype) in DTYPE_BYTES else "float32"


def _tied(cfg: Mapping[str, Any], default: bool) -> bool:
    value = cfg.get("tie_word_embeddings")
    return default if value is None else bool(value)


def _bert_like(cfg: Mapping[str, Any], d: ModelDims) -> int:
    """BERT, RoBERTa, XLM-R, ELECTRA, ALBERT, DeBERTa-v2/v3, DistilBERT: embeddings (a factorised ALBERT / ELECTRA
    embedding with its projection), the layers (ALBERT: one group shared by all), the pooler where the base model
    has one."""
    h, i, mt = d.hidden, d.intermediate, cfg.get("model_type")
    e = int(cfg.get("embedding_size") or h)
    positions = 0 if mt == "deberta-v2" and not cfg.get("position_biased_input", True) else d.max_positions
    types = 0 if mt == "distilbert" else int(cfg.get("type_vocab_size", 2) or 0)
    emb = (d.vocab + positions + types) * e + 2 * e + (e * h + h if e != h else 0)
    if mt == "deberta-v2" and cfg.get("relative_attention"):
        buckets = int(cfg.get("position_buckets") or 0) or d.max_positions
        emb += 2 * buckets * h + 2 * h  # relative position embeddings and their norm
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    groups = int(cfg.get("num_hidden_groups") or 1) if mt == "albert" else d.layers
    pooler = h * h + h if mt in ("bert", "roberta", "xlm-roberta", "albert", "camembert") else 0
    return emb + groups * layer + pooler


def _modernbert(cfg: Mapping[str, Any], d: ModelDims) -> int:
    """ModernBERT: token embeddings and norms without biases, fused qkv, a gated MLP (Wi: h -> 2i), no positions."""
    h, i = d.hidden, d.intermediate
    layer = 3 * h * h + h * h + 2 * h * i + i * h + 2 * h  # Wqkv, Wo, Wi, Wo, two norms
    return d.vocab * h + h + d.layers * layer - h + h  # embeddings and their norm, the layers (the first one's
    #                                                   attention norm is an identity), the final norm


def _gpt2(cfg: Mapping[str, Any], d: ModelDims) -> int:
    h, i = d.hidden, d.intermediate
    layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h)
    return d.vocab * h + d.max_positions * h + d.layers * layer + 2 * h


def _gpt_neox(cfg: Mapping[str, Any], d: ModelDims) -> int:
    h, i = d.hidden, d.intermediate
    layer = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h)
    head = 0 if _tied(cfg, False) else d.vocab * h
    return d.vocab * h + head + d.layers * layer + 2 * h


def _llama_like(cfg: Mapping[str, Any], d: ModelDims) -> int:
    """Llama, Mistral, Qwen2 (biases on q, k, v), OLMo (norms without weights), SmolLM2: grouped-query attention,
    a gated MLP, RMS norms."""
    h, i, mt = d.hidden, d.intermediate, cfg.get("model_type")
    head_dim = int(cfg.get("head_dim") or h // d.heads)
    q, kv = d.heads * head_dim, (d.kv_heads or d.heads) * head_dim
    attention = h * q + 2 * h * kv + q * h
    if mt == "qwen2" or cfg.get("attention_bias"):
        attention += q + 2 * kv + (h if cfg.get("attention_bias") else 0)
    norms = 0 if mt == "olmo" else 2 * h
    layer = attention + 3 * h * i + norms
    head = 0 if _tied(cfg, True) else d.vocab * h
    return d.vocab * h + head + d.layers * layer + (0 if mt == "olmo" else h)


#: parameter formulas by ``model_type``
PARAM_FORMULAS: dict[str, Callable[[Mapping[str, Any], ModelDims], int]] = {
    **dict.fromkeys(("bert", "roberta", "xlm-roberta", "electra", "albert", "deberta-v2", "distilbert", "camembert"),
                    _bert_like),
    "modernbert": _modernbert,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    **dict.fromkeys(("llama", "mistral", "qwen2", "olmo", "qwen3", "granite"), _llama_like),
}


def param_count(cfg: Mapping[str, Any], dims: ModelDims) -> tuple[int, str]:
    """(parameters of the checkpoint, how they were counted)."""
    formula = PARAM_FORMULAS.get(str(cfg.get("model_type")))
    if formula is None:
        return dims.params, "sizing.ModelDims.params (no formula for this family: untied upper bound)"
    return int(formula(cfg, dims)), f"config.json ({cfg.get('model_type')} formula)"
