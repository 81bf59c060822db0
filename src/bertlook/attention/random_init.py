"""The random-init baseline model of Table 3: pretrained embeddings, every other weight random.

The paper's "random-init Attn + GloVe" probe reads the attention of a BERT whose word and position
embeddings are the pretrained ones while every other weight is randomly initialised (the authors
did not release this code). :func:`make_random_init_model` builds that model:

1. load the pretrained model (``bertlook.attention.modeling``: ``AutoModel``, fp32, eager attention);
2. re-initialise, with the model's own ``_init_weights`` (``N(0, initializer_range)`` for linear
   layers and embeddings, zero biases, LayerNorm weight 1 / bias 0) under ``torch.manual_seed(seed)``,
   every parameter EXCEPT ``embeddings.word_embeddings`` and ``embeddings.position_embeddings``; that
   is: token-type embeddings, all LayerNorms (the embedding LayerNorm included), attention, FFN and
   the pooler;
3. save it with ``save_pretrained`` plus the tokenizer into a temporary directory beside ``out_dir``,
   write ``bertlook_random_init.json`` (source model provenance, seed, kept and re-initialised
   parameter names, transformers/torch versions) and rename the directory into place.

Steps 1-2 are :func:`load_random_init_model`, which the workflow uses without saving anything:
``bertlook extract-words --random-init-seed SEED`` re-initialises the loaded model in memory (on the
CPU, so the CPU generator draws the weights whatever the extraction device) and records the same
provenance in the store's ``meta.json`` and its summary (``random_init``). The weights, hence the
maps, are bit-identical to those of the saved copy (``tests/test_random_init.py``).

The global torch RNG of the caller is left as it was (``torch.random.fork_rng``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bertlook.errors import BertlookError
from bertlook.io_utils import remove_stale_temporaries, temp_prefix, umask, write_error

# torch, transformers and bertlook.attention.modeling (which imports torch) are imported inside the
# functions: cli/random_init and extract_words import this module when the CLI parser is built.

PROVENANCE_FILE = "bertlook_random_init.json"
KEPT_MODULES = ("embeddings.word_embeddings", "embeddings.position_embeddings")


def _kept(name: str) -> bool:
    """True for parameters of the word / position embeddings (with or without a ``bert.`` prefix)."""
    return any(name == f"{m}.weight" or name.endswith(f".{m}.weight") for m in KEPT_MODULES)


def reinit_except_embeddings(model, seed: int) -> dict[str, list[str]]:
    """Re-initialise ``model`` in place, keeping the word and position embeddings.

    Returns ``{"kept": [...], "reinitialized": [...]}`` (parameter names).
    """
    import torch  # lazy: see the note at the imports

    params = dict(model.named_parameters())
    kept = [n for n in params if _kept(n)]
    if len(kept) != len(KEPT_MODULES):
        raise BertlookError(
            f"model {type(model).__name__}: expected parameters {', '.join(m + '.weight' for m in KEPT_MODULES)}, "
            f"found {kept or 'none'}; only BERT-style models are supported"
        )
    saved = {n: params[n].detach().clone() for n in kept}
    init_fn = getattr(model, "_init_weights", None)
    if not callable(init_fn):
        raise BertlookError(f"model {type(model).__name__} has no _init_weights method")
    # transformers >= 5 skips tensors flagged as already initialised (set on loading); clear the flags.
    for t in list(model.parameters()) + list(model.buffers()):
        if getattr(t, "_is_hf_initialized", False):
            t._is_hf_initialized = False
    for m in model.modules():
        if getattr(m, "_is_hf_initialized", False):
            m._is_hf_initialized = False
    for n in kept:
        params[n]._is_hf_initialized = True  # untouched by _init_weights
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        with torch.no_grad():
            for module in model.modules():
                init_fn(module)
            for n, value in saved.items():  # belt and braces: the kept tensors are bit-identical
                params[n].copy_(value)
    for t in model.parameters():
        t._is_hf_initialized = True
    return {"kept": kept, "reinitialized": [n for n in params if n not in saved]}


def random_init_provenance(model, source: dict[str, Any], seed: int, names: dict[str, list[str]]) -> dict[str, Any]:
    """What ``bertlook_random_init.json`` records (and ``extract-words --random-init-seed`` puts in
    the store's ``meta.json`` and summary as ``random_init``)."""
    import torch  # lazy: see the note at the imports
    import transformers

    return {
        "kind": "random-init (pretrained word and position embeddings, every other weight re-initialised)",
        "source_model": source,
        "seed": int(seed),
        "init": f"{type(model).__name__}._init_weights under torch.manual_seed({int(seed)})",
        "initializer_range": getattr(model.config, "initializer_range", None),
        "kept_parameters": names["kept"],
        "reinitialized_parameters": names["reinitialized"],
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
    }


def load_random_init_model(resolved, seed: int, device: Any = "cpu"):
    """``(model, provenance)``: the model of ``resolved`` (a ``bertlook.attention.modeling.ResolvedModel``),
    loaded on the CPU, re-initialised by :func:`reinit_except_embeddings` with ``seed``, then moved
    to ``device``. The one code path of ``bertlook random-init`` and
    ``extract-words --random-init-seed``: same loader, same generator (the CPU's), same weights."""
    from bertlook.attention.modeling import load_model  # lazy: see the note at the imports

    model = load_model(resolved, "cpu")
    source = resolved.provenance(model.config)
    names = reinit_except_embeddings(model, seed)
    prov = random_init_provenance(model, source, seed, names)
    if str(device) != "cpu":
        import torch  # lazy: see the note at the imports

        model = model.to(device if isinstance(device, torch.device) else torch.device(device))
    return model, prov


def make_random_init_model(model_spec: str, out_dir: str | os.PathLike, *, seed: int,
                           revision: str | None = None) -> dict[str, Any]:
    """Write the random-init twin of ``model_spec`` to ``out_dir``; returns the provenance dict."""
    from bertlook.attention.modeling import load_tokenizer, resolve_model  # lazy: see the note at the imports

    resolved = resolve_model(model_spec, revision)
    model, prov = load_random_init_model(resolved, seed)
    tokenizer = load_tokenizer(resolved)
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)  # what a killed earlier run of this step left
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(out, "tmp-"), dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        with open(tmp / PROVENANCE_FILE, "w", encoding="utf-8") as fh:
            json.dump(prov, fh, indent=2)
            fh.write("\n")
        os.chmod(tmp, 0o777 & ~umask())
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(out, err, what="random-init model") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return prov
