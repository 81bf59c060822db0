"""The DAG of the tiny configuration (snakemake -n and the rules as Snakemake parsed them): the
random-init maps come from the extract_words job itself (the run's model re-initialised in memory on the
same sentences, no saved model copy, no job of their own), one probes job trains every probe (Table 3, the random-init probe, the norm twin, the
ablations), extraction.word_shards sets the number of word-level extraction jobs (one: no merge job), and
extraction.keep_maps: false writes no segment store and makes the word stores temp()."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from workflow_helpers import ROOT, job_counts, snakemake, tiny_config

pytestmark = pytest.mark.e2e


def _write_config(workdir: Path, model_dir: Path, **extraction) -> Path:
    config = tiny_config(workdir, model_dir)
    config["extraction"].update(extraction)
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _dry_run(workdir: Path) -> tuple[dict[str, int], str]:
    """(jobs per rule, the printed shell commands) of `snakemake -n -p`."""
    proc = snakemake(workdir, "-n", "-p")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return job_counts(out), out


def _rules(configfile: Path, workdir: Path) -> dict:
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(resource_settings=ResourceSettings(),
                                config_settings=ConfigSettings(configfiles=[configfile]),
                                snakefile=ROOT / "Snakefile", workdir=workdir)._workflow
        return {rule.name: rule for rule in workflow.rules}


def _temp(rule, name: str) -> bool:
    from snakemake.io import is_flagged

    return bool(is_flagged(getattr(rule.output, name), "temp"))


def test_no_random_init_model_randwords_extracted_in_memory_and_word_shards(tmp_path, tiny_bert_dir):
    _write_config(tmp_path, tiny_bert_dir, shards=3, word_shards=2)
    counts, out = _dry_run(tmp_path)
    assert "random_init_model" not in counts and "models/random_init" not in out
    assert counts["extract_segments"] == 3  # extraction.shards
    # extraction.word_shards: 2 jobs per split, each writing the model's and the random-init twin's maps
    assert counts["extract_words"] == 2 * 2 and "extract_words_random" not in counts
    assert counts["merge_words"] == counts["merge_words_random"] == 2
    assert counts["probes"] == 1 and "probes_random" not in counts
    assert counts["heads"] == 2  # {maps}: the attention maps and the norm-based maps
    for split in ("train", "dev"):
        for shard in ("1of2", "2of2"):
            assert f"attention/randwords-{split}-{shard}" in out and f"attention/words-{split}-{shard}" in out
            assert f"logs/extract_words-{split}-{shard}.log" in out
    # each job runs the run's model and its random-init twin (config seed 0) into the two stores
    commands = [line for line in out.splitlines() if " extract-words " in line]
    assert len(commands) == 4
    for line in commands:
        assert f"--model {tiny_bert_dir}" in line and "--random-init-seed 0" in line, line
        assert re.search(r"--out \S*attention/words-", line) and re.search(r"--random-init-out \S*attention/randwords-", line)
    probes = [line for line in out.splitlines() if " -m bertlook probes " in line]
    assert len(probes) == 1  # one job: every probe of the run
    for flag in ("--train-attention", "--random-train-attention", "--norm-train-attention", "--ablations keep,drop",
                 "--out-norm-table", "--out-ablations-table"):
        assert flag in probes[0], flag
    assert "--add-rows" not in probes[0] and "--rows-out" not in probes[0]

    # word_shards: null = extraction.shards
    _write_config(tmp_path, tiny_bert_dir, shards=3, word_shards=None)
    counts, _ = _dry_run(tmp_path)
    assert counts["extract_words"] == 2 * 3 and "extract_words_random" not in counts


def test_without_the_random_init_baseline_no_randwords_jobs(tmp_path, tiny_bert_dir):
    config = tiny_config(tmp_path, tiny_bert_dir)
    config["probes"]["random_init"] = False
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    counts, out = _dry_run(tmp_path)
    assert not {"extract_words_random", "merge_words_random", "probes_random", "random_init_model"} & set(counts)
    table = [line for line in out.splitlines() if " -m bertlook probes " in line]
    assert len(table) == 1 and "--random-train-attention" not in table[0]
    assert not [line for line in out.splitlines() if "--random-init-out" in line]


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("word_shards", [None, 2])
def test_word_stores_are_temp_only_with_keep_maps_false(tmp_path, tiny_bert_dir, keep, word_shards):
    rules = _rules(_write_config(tmp_path, tiny_bert_dir, keep_maps=keep, word_shards=word_shards), tmp_path)
    assert "random_init_model" not in rules
    assert "extract_words_random" not in rules
    assert word_shards or "merge_words" not in rules  # one word shard: the extraction writes the split's store
    if word_shards:
        for name in ("merge_words", "merge_words_random"):
            assert _temp(rules[name], "store") is (not keep), name
            assert not _temp(rules[name], "summary"), name  # the manifest and the golden check read them
        for out in ("store", "random"):  # shard stores: merged by hard links, always temp
            assert _temp(rules["extract_words"], out), out
    else:
        for out in ("store", "random"):
            assert _temp(rules["extract_words"], out) is (not keep), out
    for out in ("summary", "random_summary"):
        assert not _temp(rules["extract_words"], out), out
    # the segment maps: a store only with keep_maps (the statistics come from the maps in memory)
    assert ("store" in rules["extract_segments"].output.keys()) is keep
    if keep:
        assert not _temp(rules["extract_segments"], "store")
    for name in ("heads", "probes", "tree_heads", "rollout_words"):
        assert rules[name].priority == 10, name


def test_gradient_shards_are_their_own_count(tmp_path, tiny_bert_dir):
    """gradients.shards sets the number of gradients_shard jobs (null: extraction.shards), and the
    gather rule reads exactly those partials."""
    path = _write_config(tmp_path, tiny_bert_dir, shards=3)
    config = yaml.safe_load(path.read_text())
    config["gradients"]["shards"] = 2
    path.write_text(yaml.safe_dump(config))
    counts, out = _dry_run(tmp_path)
    assert counts["extract_segments"] == 3 and counts["gradients_shard"] == 2
    assert "partials/gradients-1of2.npz" in out and "partials/gradients-2of2.npz" in out
    assert "partials/gradients-1of3.npz" not in out
    config["gradients"]["shards"] = None
    path.write_text(yaml.safe_dump(config))
    counts, out = _dry_run(tmp_path)
    assert counts["gradients_shard"] == 3 and "partials/gradients-3of3.npz" in out


def test_building_the_dag_imports_neither_torch_nor_transformers(tmp_path, tiny_bert_dir):
    """The Snakefile sizes every job from the model's config.json while the DAG is built
    (bertlook.pipeline.sizing.model_dims, through bertlook.pipeline.model_spec); importing torch +
    transformers there cost ~4 s of every snakemake call, dry runs and SLURM job starts included."""
    import subprocess
    import sys

    configfile = _write_config(tmp_path, tiny_bert_dir, shards=2)
    script = f"""
import sys
from snakemake.cli import main
from bertlook.pipeline import sizing
sys.argv = ["snakemake", "--snakefile", {str(ROOT / "Snakefile")!r}, "--directory", {str(tmp_path)!r},
            "--configfile", {str(configfile)!r}, "--cores", "2", "-n", "--quiet"]
try:
    main()
except SystemExit as done:
    assert not done.code, done.code
dims = sizing.model_dims({str(tiny_bert_dir)!r})
assert dims.layers == 2 and dims.heads == 2, dims
print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout[-2000:]


# ---- beyond the paper: norms, rollout, head report (each a switch)
BEYOND_RULES = {"norms": set(),  # the norm twins are jobs of the same rules ({maps} = _norm): counted below
                "rollout": {"rollout", "rollout_words"},
                "head_report": {"head_report", "explorer"},  # the explorer needs the report card
                "tree_heads": {"tree_heads"},
                "contributions": {"contributions", "contributions_figure", "faithfulness", "faithfulness_figure"}}


def test_beyond_the_paper_rules_and_their_switches(tmp_path, tiny_bert_dir):
    config = tiny_config(tmp_path, tiny_bert_dir)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    counts, out = _dry_run(tmp_path)
    assert set().union(*BEYOND_RULES.values()) <= set(counts)
    # {maps}: the attention maps and the norm-based maps, one job each; the surface statistics also of ALTI per
    # layer (read in the extraction stream, contributions.enabled)
    assert counts["cluster_heads"] == counts["heads"] == 2 and counts["surface_stats"] == 3, counts
    assert "tables/attention_stats_alti.csv" in out
    assert "tables/attention_stats_norm.csv" in out and "tables/table1_norm.csv" in out
    extract = [line for line in out.splitlines() if " -m bertlook extract-segments " in line]
    assert extract and all("--norm-stats-partial" in line and "--norm-js-partial" in line and "--rollout-partial"
                           in line and "--alti-stats-partial" in line for line in extract)
    assert not any("--norms-out" in line or "--out " in line for line in extract)  # keep_maps: false
    words = [line for line in out.splitlines() if " -m bertlook extract-words " in line]
    assert sum("--norms-out" in line for line in words) == 2  # the model's stores, not the random-init ones
    probes = [line for line in out.splitlines() if " -m bertlook probes " in line]
    assert len(probes) == 1 and "--norm-train-attention" in probes[0]

    off = tmp_path / "off"
    off.mkdir()
    config = tiny_config(off, tiny_bert_dir)
    for section in BEYOND_RULES:
        config[section] = {"enabled": False}
    (off / "config.yaml").write_text(yaml.safe_dump(config))
    counts, out = _dry_run(off)
    assert not set().union(*BEYOND_RULES.values()) & set(counts)
    assert counts["surface_stats"] == counts["cluster_heads"] == counts["heads"] == 1, counts
    assert "--norms-out" not in out and "--norm-stats-partial" not in out and "--rollout-partial" not in out
    assert "--norm-train-attention" not in out


def _makes(pattern: str, path: str) -> bool:
    """An output pattern of a rule (results/{run}/..., other wildcards anywhere) can be ``path`` under a run."""
    tail = re.split(r"\{run[^{}]*\}/", pattern, maxsplit=1)[-1]
    parts = re.split(r"\{[^{}]*\}", tail)
    return re.fullmatch("[^/]*".join(map(re.escape, parts)), path) is not None


def test_every_declared_step_is_made_by_its_rule(tmp_path, tiny_bert_dir):
    """The declared steps (bertlook.cli.declared_steps) against the rules Snakemake parsed (tiny config, every switch on): each
    step's rule exists, makes every declared output and report-page source, and runs in the declared
    conda env; `all` asks for the declared outputs and report_pages makes one page per declaration."""
    from bertlook.cli import declared_steps
    from bertlook.pipeline import steps

    declared = declared_steps()

    configfile = _write_config(tmp_path, tiny_bert_dir)
    rules = _rules(configfile, tmp_path)
    for step in declared:
        rule = rules[step.rule_name]
        made = [str(path) for path in rule.output]
        for path in (*step.outputs, *(page.source for page in step.pages)):
            assert any(_makes(pattern, path) for pattern in made), (step.name, path, made)
        assert str(rule.conda_env).endswith(f"envs/{step.env}.yaml"), (step.name, rule.conda_env)
    wanted = {str(path) for path in rules["all"].input}
    (run_dir,) = {p.removesuffix("manifest.json") for p in wanted if p.endswith("/manifest.json")}
    on = {step.switch: True for step in declared if step.switch}
    assert {run_dir + path for path in steps.run_outputs(declared, on)} <= wanted
    pages = {str(path).rsplit("/", 1)[-1] for path in rules["report_pages"].output}
    assert pages == {page.page for page in steps.run_pages(declared, on)}


def test_probe_ablations_follow_their_key(tmp_path, tiny_bert_dir):
    """probes.layer_ablations: the modes the probes job trains ([] = none, no ablation outputs), with Table 3's
    settings; the norm twin's probes are the CLI's default (bertlook.cli.probes.NORM_PROBES)."""
    config = tiny_config(tmp_path, tiny_bert_dir)
    config["probes"]["layer_ablations"] = ["keep"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    counts, out = _dry_run(tmp_path)
    assert "probe_ablations" not in counts and counts["probes"] == 1
    line = next(li for li in out.splitlines() if " -m bertlook probes " in li)
    assert "--ablations keep " in line and "--seeds 0,1 " in line and "--mst" in line and "words-train" in line
    assert "--norm-probes" not in line
    config["probes"]["layer_ablations"] = []
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    counts, out = _dry_run(tmp_path)
    line = next(li for li in out.splitlines() if " -m bertlook probes " in li)
    assert "--ablations" not in line and "--out-ablations-table" not in line


@pytest.mark.slow  # two real runs of the first DAG steps (a minute): make test-all, CI
def test_a_local_parquet_corpus_gives_the_dump_s_segments_and_silver_trees(tmp_path, tiny_bert_dir):
    """wikipedia.hf_dataset (issue 13): the real Snakemake on a parquet built from the tiny config's dump
    articles writes byte-identical segments and silver trees, with no download job and no dump input."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bertlook.data.documents import iter_dump_articles
    from bertlook.pipeline.config import resolve_data_path

    targets = ["results/tiny-rand/corpus/segments.jsonl", "results/tiny-rand/treebank/train.conllu",
               "results/tiny-rand/treebank/dev.conllu"]
    dump_dir = tmp_path / "dump"
    dump_dir.mkdir()
    config = tiny_config(dump_dir, tiny_bert_dir)
    (dump_dir / "config.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(dump_dir, *[str(dump_dir / t) for t in targets])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]

    articles = list(iter_dump_articles(resolve_data_path(config["wikipedia"]["path"])))
    parquet = tmp_path / "articles.parquet"
    pq.write_table(pa.table({"title": [t for t, _ in articles], "text": ["\n".join(p) for _, p in articles]}), parquet)
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    config = tiny_config(hf_dir, tiny_bert_dir)
    config["wikipedia"].update(path=None, url=None, hf_dataset={"path": "parquet", "data_files": str(parquet)})
    (hf_dir / "config.yaml").write_text(yaml.safe_dump(config))
    counts, out = _dry_run(hf_dir)
    assert "download_wikipedia" not in counts and "--hf-dataset" in out
    proc = snakemake(hf_dir, *[str(hf_dir / t) for t in targets])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    for target in targets:
        assert (hf_dir / target).read_bytes() == (dump_dir / target).read_bytes(), target
