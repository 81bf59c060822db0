"""DeBERTa-v2/v3's and ModernBERT's own checks, and every layout of config/atlas.yaml and of the plan.

The checks every encoder layout shares (DeBERTa-v2/v3 and ModernBERT among them: hand computations of the values,
norm maps and ALTI, the layer-by-layer capture, value zeroing, head ablation and the MLM heads, the CLI steps on
tiny directories) are one parametrized set in tests/test_encoder_layouts.py (the layouts: tests/layout_models.py).
Here: both layouts are found (DeBERTa's classes declare no attention modules to transformers, so the capture asks
each layer's ``attention.self`` for its weights; ModernBERT is pre-LN, its q|k|v fused), DeBERTa's non-legacy
masked-LM head, ModernBERT's sliding-window layers (keys beyond the window get nothing) and bidirectional rows; a
tiny random instance of the class of every model of config/atlas.yaml (its fixture config.json) and of every type
the plan accepts with norms on passes the readers' lookups and one captured forward pass."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from layout_models import LAYOUTS, hand_alti, run, tiny

ROOT = Path(__file__).resolve().parents[1]
IDS = LAYOUTS["deberta_v2"].ids


def test_the_layouts_are_found():
    from bertlook.attention import contributions, norms
    from bertlook.attention.layer_capture import attention_modules

    d, m = tiny("deberta_v2"), tiny("modernbert")
    assert norms.encoder_layout(d)[0] == "deberta" and norms.encoder_layout(m)[0] == "modernbert"
    assert norms.decoder_layers(m) is None
    dm, mm = norms.find_attention_modules(d, 2), norms.find_attention_modules(m, 2)
    assert [v for v, _ in dm] == [layer.attention.self.value_proj for layer in d.encoder.layer]
    assert [v.module for v, _ in mm] == [layer.attn.Wqkv for layer in m.layers]
    assert [o for _, o in mm] == [layer.attn.Wo for layer in m.layers]
    assert [name for name, _, _ in attention_modules(d)] == [f"encoder.layer.{i}.attention.self" for i in range(3)]
    assert [name for name, _, _ in attention_modules(m)] == [f"layers.{i}.attn" for i in range(3)]
    assert contributions.post_layer_norm(m, 1) is None  # pre-LN
    post = contributions.post_layer_norm(d, 1)
    assert post.weight is not None and post.eps == d.encoder.layer[1].attention.output.LayerNorm.eps
    assert m.config.layer_types[:2] == ["full_attention", "sliding_attention"]  # both kinds of layer are tested
    from bertlook.errors import BertlookError

    for model in (d, m):  # 16 features do not fit 3 heads
        with pytest.raises(BertlookError, match="do(es)? not fit 3 heads"):
            norms.find_attention_modules(model, 3)


def test_the_non_legacy_deberta_head_gives_the_models_logits():
    """DeBERTa-v2/v3 with legacy: false has lm_predictions.lm_head(hidden, word_embeddings): found, wrapped as a
    per-position module whose logits are the model's."""
    import torch
    import transformers

    from bertlook.attention.mlm import mlm_head_module
    from bertlook.testing.tiny_models import tiny_encoder_config

    cfg = tiny_encoder_config("deberta_v2", vocab_size=30, hidden=16, intermediate_size=32,
                              max_position_embeddings=32, legacy=False, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.DebertaV2ForMaskedLM(cfg).eval()
    assert not hasattr(model, "cls")
    head = mlm_head_module(model)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(IDS)).logits
        last = model.base_model(input_ids=torch.tensor(IDS)).last_hidden_state
        np.testing.assert_allclose(head(last[0]).numpy(), logits[0].numpy(), atol=1e-5)


def test_modernbert_sliding_layers_give_the_keys_beyond_the_window_nothing():
    """ModernBERT's layer 2 (local_attention 4) is a sliding-window layer: the keys beyond the window get weight 0,
    so do their norm maps and their ALTI contributions (by hand; not causal: 0 < 1 < 2); its rows are bidirectional
    (value zeroing of a later token moves an earlier row)."""
    import torch

    from bertlook.attention import norms
    from bertlook.attention.value_zeroing import value_zeroing

    model, ids = tiny("modernbert"), LAYOUTS["modernbert"].ids
    assert model.config.layer_types == ["full_attention", "sliding_attention", "full_attention"]
    mods = norms.find_attention_modules(model, 2)
    with norms.capture_values(mods) as values:
        out = run(model, ids)
    sliding = norms.norm_maps(out.attentions[1], norms.value_norms(values[1], mods[1][1].weight.detach(), 2))
    assert float(sliding[0, :, 0, -1].abs().max()) == 0.0 and float(sliding[0, :, 0, 1].min()) > 0
    assert np.abs(hand_alti("modernbert", model, out, 1).map[0, 3:]).max() == 0.0
    raw = value_zeroing(model, {"input_ids": torch.tensor(ids)}, normalise=False, chunk=4)
    assert float(raw[0, 0, len(ids[0]) - 1]) > 0  # bidirectional: no causal zeros


# ------------------------------------------------------------------------------------------------
# every layout of the atlas

#: config keys shrunk to build a tiny instance of an atlas model's class (where its config.json has them, under the
#: class's own name: GPT-2's n_embd for hidden_size, DistilBERT's dim)
SHRINK = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
          "embedding_size": 16, "hidden_dim": 64, "n_inner": 64, "head_dim": 16, "num_hidden_groups": 1,
          "vocab_size": 64}


def _atlas_models() -> list[tuple[str, dict]]:
    """(label, fixture config.json) of every atlas model with a fixture, one per (model_type, architecture)."""
    from bertlook.pipeline.plan_models import configs_dir_path

    atlas = yaml.safe_load((ROOT / "config" / "atlas.yaml").read_text())
    seen, out = set(), []
    for model in atlas["models"]:
        path = configs_dir_path(ROOT / "tests" / "fixtures" / "atlas_configs", model["name_or_path"])
        if not path.is_file():
            continue
        cfg = json.loads(path.read_text())
        key = (cfg["model_type"], tuple(cfg.get("architectures") or ()))
        if key not in seen:
            seen.add(key)
            out.append((model["label"], cfg))
    return out


def _tiny_from(cfg: dict):
    """A tiny random instance of the class of ``cfg`` (its model_type's AutoModel), its other settings kept."""
    import torch
    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_cls = CONFIG_MAPPING[cfg["model_type"]]
    names = getattr(config_cls, "attribute_map", {})
    keep = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype", "dtype",
                                                       "layer_types")}
    for key, value in SHRINK.items():
        if names.get(key, key) in cfg:
            keep[names.get(key, key)] = value
    if cfg.get("num_key_value_heads"):  # grouped-query attention stays grouped
        keep["num_key_value_heads"] = 1 if cfg["num_key_value_heads"] < cfg["num_attention_heads"] else 2
    config = config_cls(**keep)
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"):
        if isinstance(getattr(config, key, None), int):  # the class's defaults too: within the tiny vocabulary
            setattr(config, key, 1)
    torch.manual_seed(0)
    return AutoModel.from_config(config, attn_implementation="eager").eval()


#: more config keys shrunk for a tiny instance of a class's default config (mixture-of-experts sizes)
SHRINK_DEFAULTS = {**SHRINK, "num_key_value_heads": 1, "moe_intermediate_size": 32, "num_experts": 4,
                   "num_local_experts": 4, "num_experts_per_tok": 2, "shared_expert_intermediate_size": 32}


def _tiny_default(model_type: str):
    """A tiny random instance of the class of ``model_type``, from its config class's defaults."""
    import torch
    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config_cls = CONFIG_MAPPING[model_type]
    names, defaults = getattr(config_cls, "attribute_map", {}), config_cls()
    config = config_cls(**{names.get(k, k): v for k, v in SHRINK_DEFAULTS.items()
                           if hasattr(defaults, names.get(k, k))})
    for key in ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id"):
        if isinstance(getattr(config, key, None), int):
            setattr(config, key, 1)
    torch.manual_seed(0)
    return AutoModel.from_config(config, attn_implementation="eager").eval()


def _readers_pass(model, label: str) -> None:
    """find_attention_modules and attention_modules give one entry per layer; one forward pass captures every
    layer's maps and value vectors; the post-LN (ALTI) of every layer is found or the model is pre-LN."""
    import torch

    from bertlook.attention import contributions, norms
    from bertlook.attention.layer_capture import attention_modules, capture_layers

    L = model.config.num_hidden_layers
    mods = norms.find_attention_modules(model)
    assert len(mods) == L and len(attention_modules(model)) == L, label
    got: dict = {}
    with norms.capture_values(mods) as values, capture_layers(model, lambda l, w: got.__setitem__(l, w)), \
            torch.no_grad():
        model(input_ids=torch.tensor([[1, 5, 9, 7, 3, 2]]))
    assert sorted(got) == list(range(L)) and all(v is not None for v in values), label
    assert all(got[l].shape == (1, model.config.num_attention_heads, 6, 6) for l in range(L)), label
    for l in range(L):
        contributions.post_layer_norm(model, l)  # raises where a post-LN encoder lacks its LayerNorm


def test_every_model_type_the_plan_accepts_with_norms_on_passes_the_readers():
    """plan_models.INSIDE_TYPES (the types `bertlook plan` accepts while norms or contributions are on): a tiny
    random model of each class passes the readers (and a type outside, OPT, does not)."""
    from bertlook.pipeline.plan_models import INSIDE_TYPES

    for model_type in sorted(INSIDE_TYPES):
        _readers_pass(_tiny_default(model_type), model_type)
    from bertlook.errors import BertlookError

    with pytest.raises(BertlookError, match="OPTModel"):
        _readers_pass(_tiny_default("opt"), "opt")


def test_every_atlas_layout_passes_the_readers():
    """A tiny random instance of the class of every model of config/atlas.yaml (from its fixture config.json; one per
    model_type and architecture): the readers pass (:func:`_readers_pass`), and its model_type is one the plan
    accepts with norms on."""
    from bertlook.pipeline.plan_models import INSIDE_TYPES

    models = _atlas_models()
    types = {cfg["model_type"] for _, cfg in models}
    assert {"bert", "distilbert", "albert", "deberta-v2", "modernbert", "gpt2", "gpt_neox", "llama"} <= types, types
    assert types <= INSIDE_TYPES
    for label, cfg in models:
        _readers_pass(_tiny_from(cfg), label)
