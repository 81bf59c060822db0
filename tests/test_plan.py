"""``bertlook plan`` (issue 43): the cost of config/atlas.yaml from config.json files alone
(tests/fixtures/atlas_configs), refusals with their reasons, the JSON, errors, and the one download of a
config.json (``huggingface_hub.hf_hub_download``, replaced here by a function writing the file: no network)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bertlook.cli import main

ROOT = Path(__file__).resolve().parents[1]
ATLAS = ROOT / "config" / "atlas.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "atlas_configs"

#: published parameter counts (model cards / papers) of the atlas's models
PUBLISHED = {
    "bert-base-uncased": 110e6, "bert-large-uncased": 340e6, "roberta-base": 125e6, "roberta-large": 355e6,
    "distilbert-base-uncased": 66e6, "xlm-roberta-base": 278e6, "deberta-v3-base": 184e6, "modernbert-base": 149e6,
    "mbert": 178e6, "gpt2": 124e6, "gpt2-medium": 355e6, "gpt2-large": 774e6, "gpt2-xl": 1.558e9,
    "pythia-70m": 70.4e6, "pythia-410m": 405e6, "pythia-1.4b": 1.41e9, "pythia-6.9b": 6.86e9, "qwen2.5-0.5b": 0.49e9,
    "qwen2.5-1.5b": 1.54e9, "qwen2.5-3b": 3.09e9, "qwen2.5-7b": 7.61e9, "smollm2-360m": 362e6, "olmo-1b": 1.18e9,
    "llama-3.2-1b": 1.24e9, "mistral-7b": 7.24e9,
}


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(ROOT)


def _plan(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(["plan", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _atlas_plan(tmp_path, capsys, *extra: str) -> tuple[str, dict]:
    out = tmp_path / "plan.json"
    rc, text, err = _plan(capsys, str(ATLAS), "--configs", str(FIXTURES), "--json", str(out), *extra)
    assert rc == 0, err
    return text, json.loads(out.read_text())


def _config_with(tmp_path: Path, models: list[dict]) -> Path:
    cfg = yaml.safe_load(ATLAS.read_text())
    cfg["models"] = models
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _write(root: Path, name: str, cfg: dict | str) -> None:
    d = root / name.replace("/", "--")
    d.mkdir(parents=True)
    (d / "config.json").write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))


def test_the_atlas_plan_has_a_row_for_every_model_and_fits_120_columns(tmp_path, capsys):
    text, plan = _atlas_plan(tmp_path, capsys)
    models = yaml.safe_load(ATLAS.read_text())["models"]
    assert len(models) >= 25
    lines = text.splitlines()
    for m in models:
        assert any(line.startswith(m["label"] + " ") for line in lines), m["label"]
    assert max(len(line) for line in lines) <= 120
    assert plan["totals"]["planned"] == len(models) and plan["totals"]["refused"] == 0
    assert [r["label"] for r in plan["models"]] == [m["label"] for m in models]
    assert "GPU-hours:" in text and "downloads:" in text and "8 GPUs" in text
    # every model of the atlas is pinned to a 40-hex commit, so the plan lists none as unpinned
    # (a model without a commit is listed: test_without_a_fixture_the_config_json_is_downloaded_with_hf_hub_download)
    assert all(re.fullmatch(r"[0-9a-f]{40}", str(m.get("revision"))) for m in models), models
    assert plan["totals"]["unpinned"] == [] and "unpinned" not in text
    gated = {m["label"] for m in models if m.get("gated")}
    assert gated == {"llama-3.2-1b", "mistral-7b"}
    assert "gated (accept the licence on the hub page, then HF_TOKEN=... make fetch): llama-3.2-1b, mistral-7b" in text
    assert all(m.get("family") for m in models)


def test_every_atlas_model_has_its_fixture_and_no_fixture_is_left_over():
    names = {m["name_or_path"].replace("/", "--") for m in yaml.safe_load(ATLAS.read_text())["models"]}
    fixtures = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert names == fixtures
    for name in fixtures:
        cfg = json.loads((FIXTURES / name / "config.json").read_text())
        assert cfg["model_type"] and cfg["vocab_size"] > 1000


def test_parameter_counts_are_within_two_percent_of_the_published_sizes(tmp_path, capsys):
    _, plan = _atlas_plan(tmp_path, capsys)
    params = {r["label"]: r["params"] for r in plan["models"]}
    off = {k: round(params[k] / v, 3) for k, v in PUBLISHED.items() if abs(params[k] / v - 1) > 0.02}
    assert not off, off
    # albert-base-v2: published only rounded, 11M (model card) and 12M (the ALBERT paper); its count is AlbertModel's
    assert params["albert-base-v2"] == 11_683_584
    row = {r["label"]: r for r in plan["models"]}
    assert (row["qwen2.5-7b"]["layers"], row["qwen2.5-7b"]["heads"], row["qwen2.5-7b"]["kv_heads"]) == (28, 28, 4)
    assert row["pythia-6.9b"]["download_bytes"] == 2 * row["pythia-6.9b"]["params"]  # float16 checkpoint
    assert row["bert-base-uncased"]["download_bytes"] == 4 * row["bert-base-uncased"]["params"]  # no dtype: fp32


def test_jobs_partitions_and_gpu_numbers(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("BERTLOOK_SLURM_GPU_PARTITION", "a100")
    text, plan = _atlas_plan(tmp_path, capsys)
    gpu_rules, local = set(plan["partitions"]["gpu_rules"]), set(plan["partitions"]["local_rules"])
    assert "treebank_ud" in local  # the UD download runs on the login node (localrule)
    assert {"extract_segments", "extract_words", "gradients_shard", "head_detectors"} <= gpu_rules
    big, small = ({r["label"]: r for r in plan["models"]}[k] for k in ("mistral-7b", "pythia-70m"))
    for row in (big, small):
        for job in row["jobs"]:
            where = "login node" if job["rule"] in local else "a100" if job["rule"] in gpu_rules else "(default)"
            assert job["partition"] == where
            assert ("gpu_s" in job) == (job["rule"] in gpu_rules)
    assert "-> a100" in text
    # bfloat16 weights of a 7B model on the GPU (model_dtype: auto), plus maps: more than the weights, < 80 GB
    assert 2 * big["params"] / 2**20 < big["gpu_mem_mb"] < 80e3
    assert big["gpu_s"] > 10 * small["gpu_s"] > 0
    _, faster = _atlas_plan(tmp_path, capsys, "--gpu-tflops", "200")
    assert faster["totals"]["gpu_hours"] < plan["totals"]["gpu_hours"]
    assert plan["totals"]["wall_hours_8_gpus"] < plan["totals"]["wall_hours_1_gpu"]


def test_the_default_profile_runs_everything_locally(tmp_path, capsys):
    _, plan = _atlas_plan(tmp_path, capsys, "--profile", "default")
    assert {j["partition"] for r in plan["models"] for j in r["jobs"]} == {"local", "local (GPU)"}


def test_models_bertlook_cannot_analyse_are_refused_with_their_reasons(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.hf_hub_download",
                        lambda *a, **k: pytest.fail("a gated model without a token must not be downloaded"))
    configs = tmp_path / "configs"
    _write(configs, "t/mamba", {"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24,
                                "vocab_size": 50280, "architectures": ["MambaForCausalLM"]})
    _write(configs, "t/remote", {"model_type": "bert", "auto_map": {"AutoModel": "modeling.X"},
                                 "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2})
    _write(configs, "t/t5", {"model_type": "t5", "is_encoder_decoder": True, "d_model": 512, "num_layers": 6,
                             "num_heads": 8, "vocab_size": 32128})
    _write(configs, "t/unknown", {"model_type": "frobnicator", "hidden_size": 64, "num_hidden_layers": 2,
                                  "num_attention_heads": 2})
    _write(configs, "t/nodims", {"model_type": "bert", "vocab_size": 30522})
    (configs / "openai-community--gpt2").mkdir()
    (configs / "openai-community--gpt2" / "config.json").write_text((FIXTURES / "openai-community--gpt2" /
                                                                     "config.json").read_text())
    models = [{"label": n.split("/")[1], "name_or_path": n} for n in
              ("t/mamba", "t/remote", "t/t5", "t/unknown", "t/nodims")]
    models += [{"label": "gated", "name_or_path": "t/gated-model", "gated": True},
               {"label": "gpt2", "name_or_path": "openai-community/gpt2"}]
    out = tmp_path / "p.json"
    rc, text, err = _plan(capsys, str(_config_with(tmp_path, models)), "--configs", str(configs), "--json", str(out))
    assert rc == 0, err
    rows = {r["label"]: r for r in json.loads(out.read_text())["models"]}
    assert rows["gpt2"]["refused"] is None and rows["gpt2"]["params"] > 1e8
    expect = {"mamba": "no attention weights", "remote": "remote-code", "t5": "encoder-decoder",
              "unknown": "frobnicator", "nodims": "unknown architecture", "gated": "HF_TOKEN"}
    for label, words in expect.items():
        assert words in rows[label]["refused"], (label, rows[label]["refused"])
        assert any(line.startswith(f"{label} ") and "refused:" in line for line in text.splitlines()), label
    assert "https://huggingface.co/t/gated-model" in rows["gated"]["refused"]
    assert max(len(line) for line in text.splitlines()) <= 120


def test_every_model_refused_is_exit_2(tmp_path, capsys):
    configs = tmp_path / "configs"
    _write(configs, "t/mamba", {"model_type": "mamba", "hidden_size": 8, "num_hidden_layers": 2})
    rc, text, err = _plan(capsys, str(_config_with(tmp_path, [{"label": "m", "name_or_path": "t/mamba"}])),
                          "--configs", str(configs))
    assert rc == 2 and "refused:" in text and err.startswith("error:") and "every model is refused" in err


def test_a_malformed_config_json_is_one_error_naming_the_file(tmp_path, capsys):
    configs = tmp_path / "configs"
    _write(configs, "t/broken", '{"model_type": "bert", "hidden_size": ')
    out = tmp_path / "p.json"
    rc, text, err = _plan(capsys, str(_config_with(tmp_path, [{"label": "b", "name_or_path": "t/broken"}])),
                          "--configs", str(configs), "--json", str(out))
    assert rc == 2 and err.startswith("error:") and str(configs / "t--broken" / "config.json") in err
    assert len(err.strip().splitlines()) == 1 and not out.exists() and text == ""


def test_a_bad_config_is_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run_name: x\nmodels: []\n")
    rc, _, err = _plan(capsys, str(bad))
    assert rc == 2 and err.startswith("error:")
    rc, _, err = _plan(capsys, str(ATLAS), "--configs", str(tmp_path / "nowhere"))
    assert rc == 2 and "--configs" in err


def test_without_a_fixture_the_config_json_is_downloaded_with_hf_hub_download(tmp_path, capsys, monkeypatch):
    calls = []

    def fake_download(repo_id, filename, *, revision=None, **kwargs):
        calls.append((repo_id, filename, revision))
        path = tmp_path / "dl" / repo_id.replace("/", "--") / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((FIXTURES / "EleutherAI--pythia-70m" / "config.json").read_text())
        return str(path)

    monkeypatch.setattr("huggingface_hub.hf_hub_download", fake_download)
    rev = "a" * 40
    models = [{"label": "p", "name_or_path": "testorg/not-in-fixtures", "revision": rev},
              {"label": "gpt2", "name_or_path": "openai-community/gpt2"}]
    out = tmp_path / "p.json"
    rc, text, err = _plan(capsys, str(_config_with(tmp_path, models)), "--configs", str(FIXTURES), "--json", str(out))
    assert rc == 0, err
    assert calls == [("testorg/not-in-fixtures", "config.json", rev)]  # only config.json; the fixture model not
    rows = {r["label"]: r for r in json.loads(out.read_text())["models"]}
    assert rows["p"]["config_source"].startswith("hub download") and abs(rows["p"]["params"] / 70.4e6 - 1) < 0.02
    assert rows["gpt2"]["config_source"].endswith("openai-community--gpt2/config.json")
    assert json.loads(out.read_text())["totals"]["unpinned"] == ["gpt2"]
    assert "unpinned" in text and text.split("unpinned", 1)[1].split("\n", 1)[0].endswith(": gpt2")


def test_a_failed_download_refuses_that_model_only(tmp_path, capsys, monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("no route to host\nsecond line")

    monkeypatch.setattr("huggingface_hub.hf_hub_download", offline)
    models = [{"label": "p", "name_or_path": "testorg/elsewhere"}, {"label": "gpt2", "name_or_path": "openai-community/gpt2"}]
    rc, text, err = _plan(capsys, str(_config_with(tmp_path, models)), "--configs", str(FIXTURES))
    assert rc == 0, err
    assert "refused: config.json could not be downloaded (no route to host)" in text


def test_a_local_model_needs_no_pin_and_its_weights_files_give_the_download(tmp_path, capsys):
    out = tmp_path / "p.json"
    rc, text, err = _plan(capsys, str(ROOT / "config" / "offline.yaml"), "--json", str(out))
    assert rc == 0, err
    plan = json.loads(out.read_text())
    (row,) = plan["models"]
    assert row["refused"] is None and row["pinned"] and plan["totals"]["unpinned"] == [] and "unpinned" not in text
    assert row["download_source"] == "the weights files here" and row["download_bytes"] != 4 * row["params"]
    assert abs(row["download_bytes"] / (4 * row["params"]) - 1) < 0.05  # float32 safetensors of the same weights


def test_sizing_reads_distilbert_dimension_names_and_the_plan_notes_discriminators(tmp_path, capsys):
    from bertlook.pipeline.sizing import dims_from_config

    cfg = json.loads((FIXTURES / "distilbert--distilbert-base-uncased" / "config.json").read_text())
    d = dims_from_config(cfg)
    assert (d.layers, d.heads, d.hidden, d.intermediate) == (6, 12, 768, 3072)
    text, plan = _atlas_plan(tmp_path, capsys)
    noted = {r["label"] for r in plan["models"] if r["notes"]}
    assert noted == {"electra-base", "deberta-v3-base"}
    assert "note: electra-base: a replaced-token-detection discriminator" in text


def _dry_run_jobs(text: str, run: str) -> list[tuple]:
    """(rule, wildcards but run, mem_mb, runtime, disk_mb) of every job of ``run`` in a ``snakemake -n`` listing."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", text):
        head = re.match(r"(?:local)?rule (\w+):\n", block)
        wc = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        res = re.search(r"^\s+resources: (.*)$", block, re.M)
        if not (head and wc and res):
            continue
        wildcards = dict(kv.split("=", 1) for kv in wc.group(1).split(", "))
        if wildcards.pop("run", None) != run:
            continue
        r = dict(kv.split("=", 1) for kv in res.group(1).split(", "))
        jobs.append((head.group(1), tuple(sorted(wildcards.items())), int(r["mem_mb"]), int(r["runtime"]),
                     int(r["disk_mb"])))
    return sorted(jobs)


def test_the_plans_jobs_and_requests_are_the_workflows(tmp_path, capsys, monkeypatch):
    """The tiny configuration's model run, planned and dry-run by Snakemake: the same jobs (rules, shards, splits, map
    kinds) with the same mem_mb, runtime and disk_mb requests."""
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    cfg["coref"]["conll"] = [str(ROOT / p) for p in cfg["coref"]["conll"]]
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg))
    snakemake = Path(sys.executable).parent / "snakemake"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([str(snakemake), "-n", "--configfile", str(config), "--cores", "1", "-d", str(tmp_path / "wd"),
                           "-s", str(ROOT / "Snakefile")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    run = f"{cfg['run_name']}-{cfg['models'][0]['label']}"
    dry = _dry_run_jobs(proc.stdout, run)
    assert len(dry) > 20
    out = tmp_path / "p.json"
    rc, _, err = _plan(capsys, str(config), "--json", str(out))
    assert rc == 0, err
    (row,) = json.loads(out.read_text())["models"]
    planned = sorted((j["rule"], tuple(sorted(j["wildcards"].items())),
                      j["mem_mb"], j["runtime"], j["disk_mb"]) for j in row["jobs"])
    assert planned == dry


def test_gpu_tflops_makes_the_model_jobs_ask_for_their_gpu_time(tmp_path, capsys):
    """extraction.gpu_tflops (config/atlas.yaml: 20): a model job's runtime request is its GPU time x2, the number
    the plan prints, not the CPU-time model's (which asked a GPU partition for 13 days for Mistral-7B's
    extract_words); without it the CPU model as before; jobs that do not run the model are unchanged."""
    from bertlook.pipeline.sizing import RUNTIME_FLOOR_MIN, SAFETY_TIME

    _, with_gpu = _atlas_plan(tmp_path, capsys)
    cfg = yaml.safe_load(ATLAS.read_text())
    assert cfg["extraction"]["gpu_tflops"] == 20
    cfg["extraction"]["gpu_tflops"] = None
    cpu_path = tmp_path / "cpu.yaml"
    cpu_path.write_text(yaml.safe_dump(cfg))
    rc, text, err = _plan(capsys, str(cpu_path), "--configs", str(FIXTURES), "--json", str(tmp_path / "cpu.json"))
    assert rc == 0, err
    cpu = json.loads((tmp_path / "cpu.json").read_text())
    assert with_gpu["assumptions"]["runtime_model"] == "gpu" and cpu["assumptions"]["runtime_model"] == "cpu"
    jobs = {(r["label"], j["rule"], json.dumps(j["wildcards"])): j for r in with_gpu["models"] for j in r["jobs"]}
    jobs_cpu = {(r["label"], j["rule"], json.dumps(j["wildcards"])): j for r in cpu["models"] for j in r["jobs"]}
    assert jobs.keys() == jobs_cpu.keys()
    for key, job in jobs.items():
        if "gpu_s" in job:
            # the request reads float32-sized weights (sizing's bound), the plan the loaded dtype's: a little more
            want = SAFETY_TIME * job["gpu_s"] / 60
            assert want - 1 <= job["runtime"] <= 1.2 * want + RUNTIME_FLOOR_MIN, key
        else:
            assert job["runtime"] == jobs_cpu[key]["runtime"], key
    words = jobs[("mistral-7b", "extract_words", json.dumps({"split": "train"}))]
    assert words["runtime"] < 120 < 10_000 < jobs_cpu[("mistral-7b", "extract_words", json.dumps({"split": "train"}))]["runtime"]


def test_albert_with_shared_layers_is_planned_and_several_layers_per_group_refused(tmp_path, capsys):
    """A real ALBERT checkpoint shares one layer group across its layers (num_hidden_groups 1): its one attention
    module's calls are read as the layers (attention/layer_calls.py), so it is planned; an ALBERT with several layers
    per group (inner_group_num 2: each layer runs two attention modules) is refused with that reason, the others run."""
    cfg = json.loads((FIXTURES / "albert--albert-base-v2" / "config.json").read_text())
    assert (cfg["num_hidden_groups"], cfg["inner_group_num"], cfg["num_hidden_layers"]) == (1, 1, 12)
    configs = tmp_path / "configs"
    _write(configs, "albert/albert-base-v2", cfg)
    _write(configs, "some/albert-inner", {**cfg, "inner_group_num": 2})
    _write(configs, "openai-community/gpt2",
           json.loads((FIXTURES / "openai-community--gpt2" / "config.json").read_text()))
    path = _config_with(tmp_path, [
        {"label": "albert-base-v2", "name_or_path": "albert/albert-base-v2", "revision": None},
        {"label": "albert-inner", "name_or_path": "some/albert-inner", "revision": None},
        {"label": "gpt2", "name_or_path": "openai-community/gpt2", "revision": None},
    ])
    out = tmp_path / "plan.json"
    rc, text, err = _plan(capsys, str(path), "--configs", str(configs), "--json", str(out))
    assert rc == 0, err
    rows = {r["label"]: r for r in json.loads(out.read_text())["models"]}
    assert not rows["albert-base-v2"].get("refused") and rows["albert-base-v2"]["layers"] == 12
    assert "2 layers per layer group (inner_group_num)" in rows["albert-inner"]["refused"]
    assert not rows["gpt2"].get("refused")


def test_a_layout_the_inside_readers_cannot_read_is_refused_while_they_are_on(tmp_path, capsys):
    """DeBERTa-v3 and ModernBERT are planned with norms on (their layouts are read); an OPT (its attention's out_proj
    is no layout bertlook reads) is refused naming norms.enabled, and with contributions on also ALTI; with both
    off it is planned (its attention maps are read like any eager model's)."""
    configs = tmp_path / "configs"
    for name in ("microsoft/deberta-v3-base", "answerdotai/ModernBERT-base", "openai-community/gpt2"):
        _write(configs, name, json.loads((FIXTURES / name.replace("/", "--") / "config.json").read_text()))
    _write(configs, "facebook/opt-125m", {"model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 768,
                                          "num_hidden_layers": 12, "num_attention_heads": 12, "ffn_dim": 3072,
                                          "vocab_size": 50272, "max_position_embeddings": 2048})
    names = ("microsoft/deberta-v3-base", "answerdotai/ModernBERT-base", "openai-community/gpt2", "facebook/opt-125m")
    models = [{"label": n.split("/")[1].lower(), "name_or_path": n, "revision": None} for n in names]
    base = yaml.safe_load(_config_with(tmp_path, models).read_text())
    for norms_on, contributions_on in ((True, False), (True, True), (False, False)):
        base["norms"]["enabled"], base["contributions"]["enabled"] = norms_on, contributions_on
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(base))
        out = tmp_path / "plan.json"
        rc, text, err = _plan(capsys, str(path), "--configs", str(configs), "--json", str(out))
        assert rc == 0, err
        rows = {r["label"]: r for r in json.loads(out.read_text())["models"]}
        for label in ("deberta-v3-base", "modernbert-base", "gpt2"):
            assert not rows[label].get("refused"), rows[label]["refused"]
        reason = rows["opt-125m"].get("refused")
        if not norms_on:
            assert not reason
            continue
        assert "norms.enabled" in reason and "model_type 'opt'" in reason and "supported-layouts" in reason, reason
        assert ("ALTI" in reason and "contributions.enabled" in reason) == contributions_on, reason
        assert any(line.startswith("opt-125m ") and "refused:" in line for line in text.splitlines())
