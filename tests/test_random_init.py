"""Random-init model: embeddings kept, everything else re-initialised, seeded, loadable."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from bertlook.errors import BertlookError
from bertlook.attention.random_init import PROVENANCE_FILE, make_random_init_model
from bertlook.cli.random_init import register_cli


@pytest.fixture(scope="module")
def source_dir(tiny_bert_dir, tmp_path_factory):
    """The tiny BERT with every tensor perturbed (so zero biases / unit LayerNorms are not a given)."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_bert_dir)
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    out = tmp_path_factory.mktemp("perturbed_bert")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(out)
    return out


def _state(path):
    from transformers import AutoModel

    return {k: v.clone() for k, v in AutoModel.from_pretrained(path).state_dict().items()}


def test_embeddings_kept_everything_else_reinitialised(source_dir, tmp_path):
    prov = make_random_init_model(str(source_dir), tmp_path / "rand", seed=0)
    before, after = _state(source_dir), _state(tmp_path / "rand")
    kept = {"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight"}
    assert set(prov["kept_parameters"]) == kept
    for name in before:
        if name in kept:
            assert torch.equal(before[name], after[name]), name
        elif name.endswith(("position_ids", "token_type_ids")):
            continue  # buffers
        else:
            assert not torch.equal(before[name], after[name]), name
    # the model's own initialiser: LayerNorm 1 / 0, zero biases, N(0, 0.02) weights
    assert torch.equal(after["embeddings.LayerNorm.weight"], torch.ones_like(after["embeddings.LayerNorm.weight"]))
    assert torch.count_nonzero(after["encoder.layer.0.attention.self.query.bias"]) == 0
    assert after["encoder.layer.0.attention.self.query.weight"].std().item() == pytest.approx(0.02, rel=0.3)
    assert "embeddings.token_type_embeddings.weight" in prov["reinitialized_parameters"]
    assert "pooler.dense.weight" in prov["reinitialized_parameters"]
    saved = json.loads((tmp_path / "rand" / PROVENANCE_FILE).read_text())
    assert saved["seed"] == 0 and saved["source_model"]["path_or_id"] == str(source_dir.resolve())
    assert saved["keep"] == "embeddings" and saved["kind"].startswith("random-init (pretrained word and position")


def test_deterministic_for_a_seed_and_loadable(source_dir, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(999)
    expected_next = torch.rand(1)
    torch.manual_seed(999)
    make_random_init_model(str(source_dir), tmp_path / "a", seed=7)
    assert torch.equal(torch.rand(1), expected_next)  # caller's RNG untouched
    make_random_init_model(str(source_dir), tmp_path / "b", seed=7)
    make_random_init_model(str(source_dir), tmp_path / "c", seed=8)
    a, b, c = _state(tmp_path / "a"), _state(tmp_path / "b"), _state(tmp_path / "c")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["encoder.layer.0.attention.self.query.weight"],
                           c["encoder.layer.0.attention.self.query.weight"])
    model = AutoModel.from_pretrained(tmp_path / "a", attn_implementation="eager")
    tok = AutoTokenizer.from_pretrained(tmp_path / "a")
    enc = tok("the cat sat", return_tensors="pt")
    out = model(**enc, output_attentions=True)
    assert len(out.attentions) == 2 and out.attentions[0].shape[1] == 2


def test_cli_and_bad_model(source_dir, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    args = parser.parse_args(["random-init", "--model", str(source_dir), "--out", str(tmp_path / "m"),
                              "--seed", "3"])
    assert args.func(args) == 0
    assert (tmp_path / "m" / "config.json").is_file() and (tmp_path / "m" / PROVENANCE_FILE).is_file()
    assert "re-initialised" in capsys.readouterr().out
    with pytest.raises(BertlookError):
        make_random_init_model(str(tmp_path / "missing"), tmp_path / "x", seed=0)
    assert not (tmp_path / "x").exists()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_random_init_copy_keeps_the_tokenizer_and_loads_through_bertlook(source_dir, tmp_path):
    """The copy must hold tokenizer files (a model-only directory is refused by load_tokenizer)."""
    from bertlook.attention.modeling import load_model, load_tokenizer, resolve_model, tokenizer_files_problem

    make_random_init_model(str(source_dir), tmp_path / "r", seed=1)
    names = {p.name for p in (tmp_path / "r").iterdir()}
    assert {"model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not any(n.endswith(".bin") for n in names)
    resolved = resolve_model(str(tmp_path / "r"))
    assert tokenizer_files_problem(resolved) is None
    tok = load_tokenizer(resolved)
    assert tok.tokenize("the cat sat") == ["the", "cat", "sat"]
    assert load_model(resolved, "cpu").config.num_hidden_layers == 2


def test_stale_temporary_of_a_killed_run_is_removed_and_permissions_follow_umask(source_dir, tmp_path):
    import os
    import stat

    stale = tmp_path / ".rand.tmp-999999999-abcdefgh"  # a writer PID that does not exist
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    old = os.umask(0o022)
    try:
        make_random_init_model(str(source_dir), tmp_path / "rand", seed=0)
    finally:
        os.umask(old)
    assert not stale.exists()
    assert stat.S_IMODE((tmp_path / "rand").stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rand"]


def test_extract_words_random_init_seed_gives_the_saved_copys_maps_bit_for_bit(source_dir, fixtures_dir, tmp_path):
    """`extract-words --random-init-seed S` (in memory, the workflow's way) and `extract-words` on the
    copy `random-init --seed S` saved: the same maps, bit for bit, and the same provenance."""
    import numpy as np

    from bertlook.attention.extract_words import WordExtractionOptions, extract_word_attention
    from bertlook.attention.store import open_store
    from bertlook.cli import main

    conllu = fixtures_dir / "tiny.conllu"
    saved_prov = make_random_init_model(str(source_dir), tmp_path / "copy", seed=3)
    saved = tmp_path / "saved"
    opts = WordExtractionOptions(batch_size=2, device="cpu", progress_every=0)
    extract_word_attention(conllu, str(tmp_path / "copy"), saved, opts)
    memory = tmp_path / "memory"
    summary_path = tmp_path / "memory.summary.json"
    assert main(["extract-words", "--treebank", str(conllu), "--model", str(source_dir), "--out", str(memory),
                 "--batch-size", "2", "--device", "cpu", "--random-init-seed", "3",
                 "--summary", str(summary_path)]) == 0
    a, b = open_store(saved, level="word"), open_store(memory, level="word")
    assert len(a) == len(b) > 0
    for (rec_a, map_a), (rec_b, map_b) in zip(a, b):
        assert rec_a == rec_b
        assert map_a.dtype == map_b.dtype and np.array_equal(map_a, map_b), rec_a["id"]
    # the pretrained model gives other maps (the re-initialisation did happen)
    pretrained = tmp_path / "pretrained"
    extract_word_attention(conllu, str(source_dir), pretrained, opts)
    c = open_store(pretrained, level="word")
    assert not all(np.array_equal(m1, m2) for (_, m1), (_, m2) in zip(b, c))
    # provenance: what bertlook_random_init.json records, in meta.json and in the summary
    summary = json.loads(summary_path.read_text())
    for prov in (b.meta["random_init"], summary["random_init"]):
        assert prov == json.loads(json.dumps(saved_prov))
        assert prov["seed"] == 3 and len(prov["kept_parameters"]) == 2 and prov["keep"] == "embeddings"
        assert prov["source_model"]["path_or_id"] == str(source_dir.resolve())
    assert "random_init" not in c.meta


def test_extract_words_random_init_out_is_both_runs_in_one_job(source_dir, fixtures_dir, tmp_path, capsys):
    """`extract-words --random-init-seed S --random-init-out R` (the workflow's extract_words job): --out holds
    the model's maps (as a run without the seed) and R the random-init model's (as a run with the seed and no
    --random-init-out), bit for bit, each with its own summary; the two flags go together."""
    import numpy as np

    from bertlook.attention.store import open_store
    from bertlook.cli import main

    conllu = fixtures_dir / "tiny.conllu"
    base = ["extract-words", "--treebank", str(conllu), "--model", str(source_dir), "--batch-size", "2",
            "--device", "cpu"]
    assert main([*base, "--out", str(tmp_path / "both"), "--summary", str(tmp_path / "both.json"),
                 "--random-init-seed", "3", "--random-init-out", str(tmp_path / "rboth"),
                 "--random-init-summary", str(tmp_path / "rboth.json")]) == 0
    assert main([*base, "--out", str(tmp_path / "model"), "--summary", str(tmp_path / "model.json")]) == 0
    assert main([*base, "--out", str(tmp_path / "rand"), "--summary", str(tmp_path / "rand.json"),
                 "--random-init-seed", "3"]) == 0
    for one_job, alone in (("both", "model"), ("rboth", "rand")):
        a, b = open_store(tmp_path / one_job, level="word"), open_store(tmp_path / alone, level="word")
        assert len(a) == len(b) > 0 and a.meta.get("random_init") == b.meta.get("random_init")
        for (rec_a, map_a), (rec_b, map_b) in zip(a, b):
            assert rec_a == rec_b and np.array_equal(map_a, map_b), (one_job, rec_a["id"])
        sa, sb = (json.loads((tmp_path / f"{x}.json").read_text()) for x in (one_job, alone))
        for key in ("n_examples", "random_init", "unk_tokens", "split_word_fraction"):
            assert sa.get(key) == sb.get(key), (one_job, key)
    assert "random_init" not in json.loads((tmp_path / "both.json").read_text())
    capsys.readouterr()
    assert main([*base, "--out", str(tmp_path / "x"), "--random-init-seed", "3", "--random-init-out",
                 str(tmp_path / "y")]) == 2
    assert "error: give both --random-init-out and --random-init-summary" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


# ---- the two readings: probes.random_init_keep / --random-init-keep / random-init --keep -------------

def _tiny_counts(tiny_dir):
    """(tensors, values, embedding values) of the tiny BertModel with pooler, by hand from its config:
    embeddings (word, position, token type, LayerNorm weight and bias), per layer 16 tensors
    (query/key/value/attention output weight+bias, 2 LayerNorms, intermediate and output weight+bias),
    the pooler (weight+bias)."""
    cfg = json.loads((tiny_dir / "config.json").read_text())
    v, h, p, i, n = (cfg["vocab_size"], cfg["hidden_size"], cfg["max_position_embeddings"],
                     cfg["intermediate_size"], cfg["num_hidden_layers"])
    embeddings = v * h + p * h + 2 * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    pooler = h * h + h
    return 5 + 16 * n + 2, embeddings + n * layer + pooler, v * h + p * h


def test_keep_none_reinitialises_the_embeddings_too(source_dir, tmp_path):
    prov = make_random_init_model(str(source_dir), tmp_path / "none", seed=0, keep="none")
    before, after = _state(source_dir), _state(tmp_path / "none")
    n_tensors, n_values, n_embedding_values = _tiny_counts(source_dir)
    assert prov["keep"] == "none" and prov["kept_parameters"] == []
    assert prov["kind"] == "random-init (every weight re-initialised, word and position embeddings included)"
    assert len(prov["reinitialized_parameters"]) == n_tensors
    assert prov["n_kept_elements"] == 0 and prov["n_reinitialized_elements"] == n_values
    for name in before:
        if name.endswith(("position_ids", "token_type_ids")):
            continue  # buffers
        assert not torch.equal(before[name], after[name]), name
    word = after["embeddings.word_embeddings.weight"]  # [vocab, hidden]
    pos = after["embeddings.position_embeddings.weight"]  # [position, hidden]
    # _init_weights: N(0, 0.02), the padding row ([PAD], id 0) zeroed
    assert torch.count_nonzero(word[0]) == 0 and torch.count_nonzero(word[1:]) == word[1:].numel()
    assert word[1:].std().item() == pytest.approx(0.02, rel=0.1)
    assert pos.std().item() == pytest.approx(0.02, rel=0.1)
    assert before["embeddings.word_embeddings.weight"].std().item() > 0.1  # the perturbed source is not N(0, 0.02)
    assert json.loads((tmp_path / "none" / PROVENANCE_FILE).read_text())["keep"] == "none"
    # the default reading on the same source: the embeddings bit-identical, the counts by hand
    default = make_random_init_model(str(source_dir), tmp_path / "emb", seed=0)
    kept = _state(tmp_path / "emb")
    for name in ("embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight"):
        assert torch.equal(kept[name], before[name]), name
    assert default["keep"] == "embeddings"
    assert default["n_kept_elements"] == n_embedding_values
    assert default["n_reinitialized_elements"] == n_values - n_embedding_values
    assert len(default["reinitialized_parameters"]) == n_tensors - 2
    # kept tensors draw nothing: with the same seed the readings differ beyond the embeddings too
    assert not torch.equal(kept["encoder.layer.0.attention.self.query.weight"],
                           after["encoder.layer.0.attention.self.query.weight"])
    assert torch.equal(kept["embeddings.LayerNorm.weight"], after["embeddings.LayerNorm.weight"])  # both ones


def test_keep_none_is_deterministic_for_a_seed(source_dir, tmp_path):
    make_random_init_model(str(source_dir), tmp_path / "a", seed=5, keep="none")
    make_random_init_model(str(source_dir), tmp_path / "b", seed=5, keep="none")
    make_random_init_model(str(source_dir), tmp_path / "c", seed=6, keep="none")
    a, b, c = _state(tmp_path / "a"), _state(tmp_path / "b"), _state(tmp_path / "c")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["embeddings.word_embeddings.weight"], c["embeddings.word_embeddings.weight"])


def test_bad_keep_is_refused_before_anything_is_written(source_dir, tmp_path):
    with pytest.raises(BertlookError, match="keep 'all'"):
        make_random_init_model(str(source_dir), tmp_path / "x", seed=0, keep="all")
    assert list(tmp_path.iterdir()) == []


def test_random_init_cli_keep(source_dir, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    args = parser.parse_args(["random-init", "--model", str(source_dir), "--out", str(tmp_path / "m"),
                              "--keep", "none"])
    assert args.func(args) == 0
    assert json.loads((tmp_path / "m" / PROVENANCE_FILE).read_text())["keep"] == "none"
    assert "keep none: kept nothing" in capsys.readouterr().out
    assert parser.parse_args(["random-init", "--model", "m", "--out", "o"]).keep == "embeddings"
    with pytest.raises(SystemExit):
        parser.parse_args(["random-init", "--model", "m", "--out", "o", "--keep", "all"])


def test_extract_words_random_init_keep_none(source_dir, fixtures_dir, tmp_path, capsys):
    """--random-init-keep none: the maps of the saved `random-init --keep none` copy, bit for bit, other
    maps than the default reading's, and meta.json / the summary say which reading."""
    import numpy as np

    from bertlook.attention.extract_words import WordExtractionOptions, extract_word_attention
    from bertlook.attention.store import open_store
    from bertlook.cli import main

    conllu = fixtures_dir / "tiny.conllu"
    make_random_init_model(str(source_dir), tmp_path / "copy", seed=3, keep="none")
    saved = tmp_path / "saved"
    extract_word_attention(conllu, str(tmp_path / "copy"), saved,
                           WordExtractionOptions(batch_size=2, device="cpu", progress_every=0))
    common = ["extract-words", "--treebank", str(conllu), "--model", str(source_dir), "--batch-size", "2",
              "--device", "cpu", "--random-init-seed", "3"]
    assert main([*common, "--random-init-keep", "none", "--out", str(tmp_path / "none"),
                 "--summary", str(tmp_path / "none.json")]) == 0
    assert "keep none" in capsys.readouterr().out
    assert main([*common, "--out", str(tmp_path / "default"), "--summary", str(tmp_path / "default.json")]) == 0
    a, b, c = (open_store(tmp_path / d, level="word") for d in ("saved", "none", "default"))
    assert len(a) == len(b) == len(c) > 0
    for (rec_a, map_a), (rec_b, map_b) in zip(a, b):
        assert rec_a == rec_b and np.array_equal(map_a, map_b), rec_a["id"]
    assert not all(np.array_equal(m1, m2) for (_, m1), (_, m2) in zip(b, c))
    summary = json.loads((tmp_path / "none.json").read_text())
    for prov in (b.meta["random_init"], summary["random_init"]):
        assert prov["keep"] == "none" and prov["kept_parameters"] == [] and prov["n_kept_elements"] == 0
    for prov in (c.meta["random_init"], json.loads((tmp_path / "default.json").read_text())["random_init"]):
        assert prov["keep"] == "embeddings" and len(prov["kept_parameters"]) == 2
    # --random-init-keep alone (no seed) and an unknown value: refused, nothing written
    assert main([*common[:-2], "--random-init-keep", "none", "--out", str(tmp_path / "alone")]) == 2
    assert "--random-init-keep needs --random-init-seed" in capsys.readouterr().err
    assert not (tmp_path / "alone").exists()
    with pytest.raises(BertlookError, match="random-init-keep 'all'"):
        extract_word_attention(conllu, str(source_dir), tmp_path / "bad",
                               WordExtractionOptions(device="cpu", random_init_seed=0, random_init_keep="all"))
    assert not (tmp_path / "bad").exists()
