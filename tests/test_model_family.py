"""Model families: encoder vs decoder from the config, refusal of models whose attention bertlook cannot read,
the family recorded in the provenance, and the tiny decoders of every family loading with causal maps."""

from __future__ import annotations

import json
import shutil

import pytest

from bertlook.errors import BertlookError
from bertlook.pipeline.model_spec import family_problem, model_family, resolve_model

TEXTS = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big."] * 3


@pytest.mark.parametrize("config, family", [
    ({"model_type": "bert", "architectures": ["BertModel"]}, "encoder"),
    ({"model_type": "roberta"}, "encoder"),
    ({"model_type": "gpt2"}, "decoder"),
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "decoder"),
    ({"model_type": "newthing", "architectures": ["NewThingForCausalLM"]}, "decoder"),
    ({"model_type": "bert", "is_decoder": True, "architectures": ["BertLMHeadModel"]}, "decoder"),
    ({"model_type": "t5", "is_encoder_decoder": True}, "encoder"),
])
def test_family_from_config(config, family):
    assert model_family(config) == family


@pytest.mark.parametrize("config, reason", [
    ({"model_type": "gpt2", "auto_map": {"AutoModel": "modeling_x.X"}}, "remote-code model"),
    ({"model_type": "mamba"}, "no attention weights"),
    ({"model_type": "t5", "is_encoder_decoder": True}, "encoder-decoder"),
    ({"architectures": ["X"]}, "no model_type"),
])
def test_models_bertlook_cannot_read_are_refused(config, reason):
    assert reason in family_problem(config, "m")
    assert family_problem({"model_type": "qwen2"}, "m") is None


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    from bertlook.testing.tiny_models import make_tiny_decoder

    return make_tiny_decoder(tmp_path_factory.mktemp("gpt2"), "gpt2", TEXTS)


def test_remote_code_model_refused_before_weights_are_read(tiny_gpt2, tmp_path):
    from bertlook.attention.modeling import check_reachable_model, load_model

    remote = tmp_path / "remote"
    shutil.copytree(tiny_gpt2, remote)
    config = json.loads((remote / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_custom.CustomModel"}
    (remote / "config.json").write_text(json.dumps(config))
    (remote / "model.safetensors").write_bytes(b"not read")  # would be "corrupt" if anything read it first
    with pytest.raises(BertlookError, match="remote-code model"):
        load_model(resolve_model(str(remote)))
    assert "remote-code model" in check_reachable_model(str(remote))


@pytest.mark.parametrize("arch, model_class, first_token", [
    ("gpt2", "GPT2Model", "The"), ("gpt_neox", "GPTNeoXModel", "The"), ("llama", "LlamaModel", "<s>"),
    ("qwen2", "Qwen2Model", "The"),
])
def test_tiny_decoders_load_with_eager_causal_maps(tmp_path, arch, model_class, first_token):
    import torch

    from bertlook.attention.modeling import load_model, load_tokenizer
    from bertlook.testing.tiny_models import make_tiny_decoder

    resolved = resolve_model(str(make_tiny_decoder(tmp_path / arch, arch, TEXTS)))
    model, tok = load_model(resolved), load_tokenizer(resolved)
    assert type(model).__name__ == model_class and model.config._attn_implementation == "eager"
    enc = tok("The cat sat on the mat", return_tensors="pt")
    assert tok.convert_ids_to_tokens(enc["input_ids"][0].tolist())[0] == first_token
    with torch.no_grad():
        attns = model(**enc, output_attentions=True).attentions
    assert len(attns) == 2 and attns[0].shape[1] == 2
    for a in attns:  # causal: nothing above the diagonal, rows sum to 1
        assert float(a.triu(1).abs().max()) == 0.0
        assert torch.allclose(a.sum(-1), torch.ones_like(a.sum(-1)), atol=1e-5)
    prov = resolved.provenance(model.config)
    assert prov["family"] == "decoder" and prov["model_type"] == arch


def test_encoder_provenance_family(tiny_bert_dir):
    from bertlook.attention.modeling import load_config

    resolved = resolve_model(str(tiny_bert_dir))
    assert resolved.provenance(load_config(resolved))["family"] == "encoder"


@pytest.mark.e2e  # runs `snakemake -n`
def test_workflow_refuses_a_remote_code_model_before_any_job(tiny_gpt2, tiny_bert_dir, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    from bertlook.pipeline.model_spec import workflow_model_problems

    remote = tmp_path / "remote"
    shutil.copytree(tiny_gpt2, remote)
    config = json.loads((remote / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_custom.CustomModel"}
    (remote / "config.json").write_text(json.dumps(config))
    models = [{"label": "enc", "name_or_path": str(tiny_bert_dir)}, {"label": "dec", "name_or_path": str(tiny_gpt2)},
              {"label": "remote", "name_or_path": str(remote)}, {"label": "hub", "name_or_path": "some-org/not-cached"}]
    problems = workflow_model_problems({"models": models})
    assert len(problems) == 1 and problems[0].startswith("models[label=remote]: ") and "remote-code" in problems[0]

    root = Path(__file__).resolve().parents[1]
    cfg = yaml.safe_load((root / ".test" / "config.yaml").read_text())
    cfg["models"] = [{"label": "remote", "name_or_path": str(remote)}]
    path = tmp_path / "remote.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "-n", "--configfile", str(path)],
                          cwd=root, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "error: models[label=remote]: model" in proc.stderr and "remote-code" in proc.stderr


def test_model_dtype_auto_only_on_a_gpu(tiny_gpt2):
    import torch

    from bertlook.attention.modeling import load_model, weights_dtype

    assert weights_dtype("float32", "cuda") is torch.float32
    assert weights_dtype("auto", "cuda:0") == "auto" and weights_dtype("auto", torch.device("cuda")) == "auto"
    assert weights_dtype("auto", "cpu") is torch.float32  # half precision on a CPU: slow and rounder
    with pytest.raises(BertlookError, match="unknown model dtype"):
        weights_dtype("bfloat16", "cpu")
    model = load_model(resolve_model(str(tiny_gpt2)), "cpu", model_dtype="auto")
    assert next(model.parameters()).dtype is torch.float32


def test_a_model_without_the_eager_path_is_refused(tiny_gpt2, monkeypatch):
    """A model that did not load with eager attention (e.g. a class with only sdpa or flash kernels) returns no
    weights: refused after loading, with the reason."""
    from bertlook.attention import modeling

    real = modeling.load_pretrained

    def sdpa_only(resolved, loader, what, **kwargs):
        model = real(resolved, loader, what, **kwargs)
        model.config._attn_implementation = "sdpa"
        return model

    monkeypatch.setattr(modeling, "load_pretrained", sdpa_only)
    with pytest.raises(BertlookError, match="attention implementation 'sdpa', not 'eager'"):
        modeling.load_model(resolve_model(str(tiny_gpt2)))
