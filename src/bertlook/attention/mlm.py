"""Pre-training heads: loading a model with its masked-LM head (an encoder) or its next-token head (a
decoder-only model) with a check of the head weights, and finding the head module (the gradients step
differentiates the pre-training loss; a checkpoint without trained head weights gives "not run")."""

from __future__ import annotations

from typing import Sequence

from bertlook.errors import BertlookError

# torch / transformers are imported inside the functions: importing this module stays light (analyses/gradients
# imports it, also in its reduce step's environment, envs/analysis.yaml: no torch, no huggingface_hub).

#: names of the masked-LM head module (BERT: ``cls``; RoBERTa-style: ``lm_head``; ALBERT: ``predictions``); the head
#: must map ``[..., hidden]`` to ``[..., vocab]`` position by position.
HEAD_NAMES = ("cls", "lm_head", "predictions")
#: masked-LM heads made of several modules of the model itself, applied in this order (their ``ForMaskedLM.forward``):
#: DistilBERT's four, ModernBERT's ``head`` (dense, activation, norm) then ``decoder``
SPLIT_HEADS = (("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector"), ("head", "decoder"))


def mlm_head_module(model):
    """The model's masked-LM head module when it is a known per-position head, else None (DistilBERT, ModernBERT:
    their head's modules as one ``Sequential``, the same weights; DeBERTa-v2/v3: ``cls``, its legacy head, the one
    transformers builds unless the config says ``legacy: false``, else ``lm_predictions.lm_head`` with the input
    embeddings as its output layer)."""
    import torch  # lazy: see the note at the imports

    for name in HEAD_NAMES:
        mod = getattr(model, name, None)
        if isinstance(mod, torch.nn.Module) and name != getattr(model, "base_model_prefix", None):
            return mod
    for names in SPLIT_HEADS:
        parts = [getattr(model, name, None) for name in names]
        if all(isinstance(mod, torch.nn.Module) for mod in parts):  # the head's modules in a row (a module the model
            return torch.nn.Sequential(*parts)  # never calls: the gradients step's hook stays idle)
    lm_head = getattr(getattr(model, "lm_predictions", None), "lm_head", None)
    embeddings = getattr(getattr(getattr(model, "base_model", None), "embeddings", None), "word_embeddings", None)
    if isinstance(lm_head, torch.nn.Module) and isinstance(embeddings, torch.nn.Module):
        return _deberta_head(torch, lm_head, embeddings)  # DeBERTa-v2/v3 with legacy: false
    return None


def _deberta_head(torch, lm_head, embeddings):
    """DeBERTa-v2/v3's non-legacy head as a per-position module: ``lm_head(hidden, word_embeddings)`` (its output
    layer is the input embeddings, as ``DebertaV2ForMaskedLM.forward`` calls it)."""

    class WithEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm_head, self.word_embeddings = lm_head, embeddings

        def forward(self, hidden):
            return self.lm_head(hidden, self.word_embeddings)

    return WithEmbeddings()



def _missing_head_reason(spec: str, head_missing: Sequence[str], decoder: bool = False) -> str:
    parts = [k.split(".") for k in sorted(head_missing)]
    common: list[str] = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    if len(parts) == 1:
        common = common[:-1]
    prefix = ".".join(common) + ".*" if common else ", ".join(sorted(head_missing)[:4])
    if decoder:
        return (f"not run: {spec} has no language-model head (checkpoint lacks {prefix} weights); gradient "
                "importance needs the pre-training next-token head")
    return (
        f"not run: {spec} has no masked-LM head (checkpoint lacks {prefix} weights); "
        "gradient importance needs the pre-training MLM head"
    )


def load_mlm_checked(resolved, device="cpu"):
    """``(model, has_head, reason, loading)``: load ``AutoModelForMaskedLM`` (a decoder-only model:
    ``AutoModelForCausalLM``, its next-token head) and check its head weights.

    The head is missing when transformers reports weights of the MLM model outside the base model
    (``model.base_model_prefix``) as ``missing_keys`` (they would be randomly initialised); the model
    is then returned anyway (for its config, on the CPU) with ``has_head=False``. Missing weights of
    the base model itself are an error (a broken or foreign checkpoint). ``loading``:
    ``{"missing_keys": [...], "unexpected_keys": [...]}`` from transformers' loading report, whose
    own log output is silenced (it would call a BertModel checkpoint "corrupted"; the summary JSON
    carries the keys instead).
    """
    import torch  # lazy: see the note at the imports
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM  # lazy: see the note at the imports
    from transformers.utils import logging as hf_logging  # lazy: see the note at the imports

    # lazy: modeling imports torch, model_spec huggingface_hub (see the note at the imports)
    from bertlook.attention.modeling import DECODER, check_finite, check_model_family, load_config, load_pretrained
    from bertlook.pipeline.model_spec import model_family

    family = check_model_family(resolved) or model_family(load_config(resolved))
    loader = AutoModelForCausalLM if family == DECODER else AutoModelForMaskedLM
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model, info = load_pretrained(resolved, loader, "weights", attn_implementation="eager",
                                       dtype=torch.float32, output_loading_info=True)
    finally:
        hf_logging.set_verbosity(level)
    check_finite(model, resolved)
    info = info or {}
    missing = sorted(set(info.get("missing_keys") or ()))
    loading = {"missing_keys": missing, "unexpected_keys": sorted(set(info.get("unexpected_keys") or ()))}
    prefix = str(getattr(model, "base_model_prefix", "") or "")
    base_missing = [k for k in missing if prefix and k.startswith(prefix + ".")]
    head_missing = [k for k in missing if k not in base_missing]
    if base_missing:
        shown = ", ".join(base_missing[:5]) + (" ..." if len(base_missing) > 5 else "")
        raise BertlookError(
            f"model {resolved.spec!r}: the checkpoint lacks {len(base_missing)} weight(s) of the base model "
            f"({shown}); it does not match its config"
        )
    model.eval()
    if head_missing:
        return model, False, _missing_head_reason(resolved.spec, head_missing, family == DECODER), loading
    model = model.to(device if isinstance(device, torch.device) else torch.device(device))
    return model, True, "", loading


def has_mlm_head(resolved) -> tuple[bool, str]:
    """``(True, "")`` when the checkpoint holds trained masked-LM head weights, else ``(False, reason)``."""
    _, ok, reason, _ = load_mlm_checked(resolved, "cpu")
    return ok, reason
