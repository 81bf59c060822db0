"""SLURM: the profiles (fast checks, part of `make test`) and a real run on a single-node SLURM
cluster set up on this machine (`make test-slurm`, marker `slurm`; excluded from plain `pytest`).

The real run: slurm-wlm + munge from Debian (apt-get install when missing: needs root; without
root or apt the test FAILS, saying why), own slurm.conf in a temporary directory, no slurmdbd. The
tiny configuration runs through profiles/slurm-cpu with the real snakemake and the SLURM executor
plugin, and the same configuration runs locally; every non-local job must have been a SLURM job
(submission lines, `scontrol show job` records, plugin logs) and every table byte-identical to the local
run's; then extraction runs again through profiles/slurm onto the (device-less) GPU partition.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from workflow_helpers import ENV, ROOT, RUN, SNAKEMAKE, fewer_analyses, tiny_config

PROFILES = ROOT / "profiles"
SLURM_PROFILES = ["slurm", "slurm-cpu"]
# Rules that run the model (extraction, gradients, head detectors), made from the workflow's _model_step
# template: a GPU each in profiles/slurm.
MODEL_RULE_MARK = "use rule _model_step as"


def load_profile(name: str, monkeypatch, **env: str) -> dict:
    """The profile as Snakemake reads it (YTE-rendered) under the given BERTLOOK_SLURM_* variables."""
    import yte

    for var in ("BERTLOOK_SLURM_PARTITION", "BERTLOOK_SLURM_GPU_PARTITION", "BERTLOOK_SLURM_ACCOUNT"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with open(PROFILES / name / "config.yaml") as f:
        return yte.process_yaml(f, require_use_yte=True)


def rules_in_smk() -> dict[str, str]:
    """rule name -> its text from its `rule NAME:` or `use rule BASE as NAME` line on, for every rule in
    workflow/rules/*.smk."""
    rules = {}
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        text = smk.read_text()
        starts = list(re.finditer(r"^[ \t]*(?:rule (\w+):|use rule \w+ as (\w+)\b)", text, flags=re.M))
        for i, m in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
            rules[m.group(1) or m.group(2)] = text[m.start():end]
    return rules


# ---- the profiles --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SLURM_PROFILES)
def test_slurm_profiles_never_retry_cap_threads_and_poll_squeue(name, monkeypatch):
    profile = load_profile(name, monkeypatch)
    assert profile["executor"] == "slurm"
    assert profile["retries"] == 0  # a rejected submission is rejected again: no second sbatch
    assert profile["slurm-status-command"] == "squeue"  # sacct needs slurmdbd
    assert 1 <= profile["max-threads"] <= 4  # fits a small node; --max-threads N overrides this one key
    assert "set-threads" not in profile  # threads come from the rules, capped by max-threads only
    # without the variables: no partition (the cluster's default) and no account
    assert "slurm_partition" not in profile["default-resources"]
    assert "slurm_account" not in profile["default-resources"]
    for resources in profile.get("set-resources", {}).values():  # memory and time: the rules' own sizing
        assert not {"mem_mb", "mem", "runtime"} & set(resources)


def test_cpu_profile_asks_for_no_gpu(monkeypatch):
    profile = load_profile("slurm-cpu", monkeypatch, BERTLOOK_SLURM_PARTITION="short")
    text = json.dumps(profile).lower()
    assert "gpu" not in text and "gres" not in text


def test_gpu_profile_puts_the_model_rules_on_the_gpu_partition(monkeypatch):
    model_rules = {name for name, body in rules_in_smk().items() if MODEL_RULE_MARK in body}
    assert {"extract_segments", "extract_words", "coref_extract", "gradients_shard"} <= model_rules
    profile = load_profile("slurm", monkeypatch)
    on_gpu = {rule for rule, res in profile["set-resources"].items() if res.get("gpu")}
    assert on_gpu == model_rules
    for rule in on_gpu:
        assert profile["set-resources"][rule]["slurm_partition"] == "'gpu'"
        assert profile["set-resources"][rule]["gpu"] == 1


@pytest.mark.parametrize("name", SLURM_PROFILES)
def test_profiles_name_only_existing_rules(name, monkeypatch):
    rules = rules_in_smk()
    profile = load_profile(name, monkeypatch)
    assert set(profile.get("set-resources", {})) <= set(rules)


@pytest.mark.parametrize("name", SLURM_PROFILES)
def test_partition_and_account_come_from_the_environment(name, monkeypatch):
    # "all" is a Python builtin: the profile must hand it to Snakemake quoted, as a string
    profile = load_profile(name, monkeypatch, BERTLOOK_SLURM_PARTITION="all", BERTLOOK_SLURM_ACCOUNT="proj42",
                           BERTLOOK_SLURM_GPU_PARTITION="a100")
    assert profile["default-resources"]["slurm_partition"] == "'all'"
    assert profile["default-resources"]["slurm_account"] == "'proj42'"
    for res in profile.get("set-resources", {}).values():
        if res.get("gpu"):
            assert res["slurm_partition"] == "'a100'"


# rules that join several models (or none): never in the per-model group, which would make one job of all models
ACROSS_MODELS_RULES = {"atlas", "models_summary", "resources_summary", "report_pages_summary", "explorer_models",
                       "languages", "download_wikipedia", "download_glove", "treebank_ud"}


def test_the_per_model_add_on_groups_every_step_of_a_model_and_nothing_else(monkeypatch):
    """profiles/slurm-cpu-per-model: groups and the CPUs of a group only (the rest from profiles/slurm-cpu), every
    rule of a model's run in the one group `model` (a rule left out would split a model's group around it), no
    cross-model or local rule, and a group asks for no more CPUs than profiles/slurm-cpu lets one job have."""
    add_on = yaml.safe_load((PROFILES / "slurm-cpu-per-model" / "config.yaml").read_text())
    assert set(add_on) == {"groups", "cores"}
    groups = dict(entry.split("=") for entry in add_on["groups"])
    assert set(groups.values()) == {"model"}
    assert set(groups) == set(rules_in_smk()) - ACROSS_MODELS_RULES
    assert add_on["cores"] <= load_profile("slurm-cpu", monkeypatch)["max-threads"]


@pytest.mark.e2e  # snakemake -n with the profiles
def test_dry_run_with_the_per_model_add_on_makes_one_group_job_per_model(tmp_path):
    from bertlook.testing.tiny_atlas import make_tiny_atlas

    configfile = make_tiny_atlas(tmp_path, tiny_config(tmp_path, tmp_path / "unused"), labels=["bert", "gpt2"],
                                 broken=None, minilm=False)
    env = dict(ENV, BERTLOOK_SLURM_PARTITION="batch")
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile",
         str(configfile), "--workflow-profile", str(PROFILES / "slurm-cpu"), "--profile",
         str(PROFILES / "slurm-cpu-per-model"), "-n"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("Group job model (jobs in lexicogr. order):") == 2
    # outside the groups: only the cross-model jobs (and `all`, which runs where snakemake runs)
    alone = set(re.findall(r"^(?:local)?rule (\w+):$", proc.stdout, flags=re.M))
    assert alone and alone <= ACROSS_MODELS_RULES | {"all"}, alone


@pytest.mark.e2e  # snakemake -n with the profile
def test_dry_run_resources_with_the_gpu_profile(tmp_path, tiny_bert_dir):
    """What Snakemake itself makes of profiles/slurm: partition strings and GPUs per job, and memory that this
    machine has (on the test cluster's node, this machine, a larger request would pend forever): every rule of the
    tiny configuration, those the per-step SLURM run below leaves out included."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(tiny_config(tmp_path, tiny_bert_dir)))
    env = dict(ENV, BERTLOOK_SLURM_PARTITION="all", BERTLOOK_SLURM_GPU_PARTITION="a100",
               BERTLOOK_SLURM_ACCOUNT="proj42")
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
         "--configfile", str(tmp_path / "config.yaml"), "--workflow-profile", str(PROFILES / "slurm"), "-n"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = re.findall(r"^rule (\w+):\n(?:    .*\n)*?    resources: (.*)$", proc.stdout, flags=re.M)
    assert jobs
    model_rules = {name for name, body in rules_in_smk().items() if MODEL_RULE_MARK in body}
    machine_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e6
    assert {"contributions", "faithfulness", "rollout", "tree_heads", "head_detectors"} <= {r for r, _ in jobs}
    for rule, resources in jobs:
        if rule == "all":
            continue
        assert 0 < int(re.search(r"\bmem_mb=(\d+)", resources).group(1)) < machine_mb, (rule, resources)
        assert "slurm_account=proj42" in resources, (rule, resources)
        if rule in model_rules:
            assert "slurm_partition=a100" in resources and "gpu=1" in resources, (rule, resources)
        else:
            assert "slurm_partition=all" in resources and "gpu=" not in resources, (rule, resources)


def _local_rules(configfile: Path, workdir: Path) -> set[str]:
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(resource_settings=ResourceSettings(),
                                config_settings=ConfigSettings(configfiles=[configfile]),
                                snakefile=ROOT / "Snakefile", workdir=workdir)._workflow
        return {rule.name for rule in workflow.rules if rule.name in workflow._localrules}


def test_network_steps_are_local_rules(tmp_path):
    """Downloads run where snakemake runs (the login node), never as compute jobs."""
    paper = _local_rules(ROOT / "config.yaml", tmp_path)  # wikipedia and GloVe urls, UD treebank
    # the UD treebank downloads: treebank_ud (the runs whose treebank is a UD release) is a local rule,
    # treebank (silver parses, local files) a compute job
    assert {"download_wikipedia", "download_glove", "treebank_ud"} <= paper and "treebank" not in paper
    offline = _local_rules(ROOT / "config" / "offline.yaml", tmp_path)  # silver trees: compute
    assert "treebank" not in offline and "treebank_ud" not in offline


# ---- a real cluster ------------------------------------------------------------------------------

# squeue reasons of a job that can never start (more CPUs, memory or GPUs than any node has)
NEVER_STARTS = {"PartitionConfig", "BadConstraints", "PartitionNodeLimit", "ReqNodeNotAvail", "Resources_Unavailable"}


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    from slurm.single_node import SingleNodeSlurm

    c = SingleNodeSlurm(keep_logs_in=tmp_path_factory.mktemp("slurm-daemons"))
    request.addfinalizer(c.stop)  # before start(): a half-started cluster is stopped too
    c.start()
    return c


class SnakemakeRun:
    """The real snakemake on workdir/config.yaml, started in the background; :meth:`wait` fails the
    test early (and says why) when it runs too long or, with ``cluster``, when a SLURM job pends for
    a reason that never clears (more CPUs, memory or GPUs than the node has)."""

    def __init__(self, workdir: Path, args: list[str], env: dict):
        self.cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
                    "--configfile", str(workdir / "config.yaml"), *args]
        self.out, self.err = workdir / "snakemake.out", workdir / "snakemake.err"
        self.start = time.monotonic()
        with open(self.out, "w") as fo, open(self.err, "w") as fe:
            self.proc = subprocess.Popen(self.cmd, stdout=fo, stderr=fe, env=env, start_new_session=True)
        self.end = None
        self._waiter = threading.Thread(target=self._note_end, daemon=True)
        self._waiter.start()

    def _note_end(self):
        self.proc.wait()
        self.end = time.monotonic()

    @property
    def wall(self) -> float:
        """Seconds from start to exit."""
        return (self.end or time.monotonic()) - self.start

    def kill(self) -> None:
        """Stop snakemake (and its children: same session) if it still runs."""
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        except ProcessLookupError:  # exited meanwhile
            pass

    def wait(self, timeout: int, cluster=None) -> subprocess.CompletedProcess:
        stuck = None
        try:
            while self.proc.poll() is None:
                if time.monotonic() - self.start > timeout:
                    stuck = f"snakemake still running after {timeout} s"
                elif cluster is not None:
                    pending = cluster.run("squeue", "-h", "-t", "PD", "-o", "%i|%r|%k").stdout.split()
                    never = [line for line in pending if line.split("|")[1] in NEVER_STARTS]
                    stuck = f"SLURM job(s) can never start (id|reason|comment): {never}" if never else None
                if stuck:
                    break
                time.sleep(1)
        finally:
            self.kill()
        self._waiter.join(timeout=10)
        result = subprocess.CompletedProcess(self.cmd, self.proc.returncode, self.out.read_text(), self.err.read_text())
        assert stuck is None, f"{stuck}\n{result.stderr[-4000:]}"
        return result


def _job_headers(log: str) -> list[tuple[bool, str, str]]:
    """(local?, rule, snakemake jobid) of every job snakemake started."""
    return [(bool(local), rule, jobid) for local, rule, jobid in
            re.findall(r"^(local)?rule (\w+):\n(?:    .*\n)*?    jobid: (\d+)$", log, flags=re.M)]


def _tables(workdir: Path) -> dict[str, bytes]:
    tables = workdir / "results" / RUN / "tables"
    return {p.name: p.read_bytes() for p in sorted(tables.iterdir()) if p.suffix in (".csv", ".md")}


def slurm_test_config(workdir: Path, model_dir: Path) -> dict:
    """tiny_config without the random-init probe baseline (a forward pass fewer in each extract_words job, a
    probe fewer per seed) and with one probe seed."""
    config = tiny_config(workdir, model_dir)
    config["probes"].update(random_init=False, seeds=[0])
    return config


def slurm_tiny_run_config(workdir: Path, model_dir: Path) -> dict:
    """The tiny configuration of the per-step SLURM run: :func:`slurm_test_config` with the analyses beyond the
    paper off but the head report and the explorer (the steps of the paper's tables and figures): this run tests the
    profile, the executor and the scheduling, which every rule shares; every rule's resources are checked against
    this machine in the dry run above (test_dry_run_resources_with_the_gpu_profile), and every step runs in the
    local tiny runs of `make test-all`."""
    return fewer_analyses(slurm_test_config(workdir, model_dir), keep=("head_report", "explorer"))


SLURM_POLL_FAST = ["--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "1",
                   "--latency-wait", "5"]
#: seconds a snakemake run of this file may take (the atlas runs: twice that). Generous on purpose: CI runs this
#: file beside `make test-all` on the same two cores (.ci/run), which can double the walls measured alone (the
#: tiny configuration on SLURM 412-532 s, the atlas 306-476 s, 2026-12-06); a job that can never start is caught
#: at once by SnakemakeRun.wait's squeue check, not by this timeout
RUN_TIMEOUT = 1800


#: BERTLOOK_SLURM_TEST_SEQUENTIAL=1: every snakemake run of this file alone (undisturbed wall times); by default the
#: tiny configuration's two runs and the tiny atlas's first SLURM run go at once, so that the node's CPUs work
#: while one run waits for squeue or for a job's start
SEQUENTIAL = os.environ.get("BERTLOOK_SLURM_TEST_SEQUENTIAL") == "1"


@pytest.fixture(scope="module")
def runs(cluster, tiny_bert_dir, tmp_path_factory, atlas_first_run) -> dict:
    """The tiny configuration through profiles/slurm-cpu on the cluster, and locally (beside the tiny atlas's
    first run, ``atlas_first_run``, already started)."""
    local, on_slurm = tmp_path_factory.mktemp("local"), tmp_path_factory.mktemp("on-slurm")
    for workdir in (local, on_slurm):
        (workdir / "config.yaml").write_text(yaml.safe_dump(slurm_tiny_run_config(workdir, tiny_bert_dir)))
    # Threads: 1 per job in both runs (two 1-CPU jobs share a 2-CPU node), so that the numbers come
    # from the same thread counts. The plugin's status checks start after 1 s instead of 40 s and come 1 s after a
    # check that saw a job end; after one that saw none it waits 10 s longer each time (snakemake-executor-plugin-
    # slurm 2.8's back-off, up to 180 s, not an option): about 12 s per level of the per-step DAG.
    threads = ["--max-threads", "1"]
    env = cluster.env(ENV)
    env["BERTLOOK_SLURM_PARTITION"] = "batch"  # not the default partition: the variable must reach sbatch
    slurm_args = ["--workflow-profile", str(PROFILES / "slurm-cpu"), *threads, "--slurm-keep-successful-logs",
                  *SLURM_POLL_FAST]
    # The local run goes alongside (it fills the CPUs while the SLURM run waits for squeue), unless
    # BERTLOOK_SLURM_TEST_SEQUENTIAL=1 asks for undisturbed wall times of both.
    local_run = SnakemakeRun(local, ["--cores", "2", *threads], ENV)
    slurm_run = None
    try:
        if SEQUENTIAL:
            local_result = local_run.wait(timeout=RUN_TIMEOUT)
        slurm_run = SnakemakeRun(on_slurm, slurm_args, env)
        slurm_result = slurm_run.wait(timeout=RUN_TIMEOUT, cluster=cluster)
        if not SEQUENTIAL:
            local_result = local_run.wait(timeout=RUN_TIMEOUT)
    finally:
        for run in (local_run, slurm_run):
            if run is not None:
                run.kill()
    assert local_result.returncode == 0, local_result.stderr[-4000:]
    log = slurm_result.stdout + slurm_result.stderr
    assert slurm_result.returncode == 0, log[-6000:] + "\n" + cluster.logs_tail()
    n_jobs = log.count("has been submitted with SLURM jobid")
    print(f"\nSLURM test: {n_jobs} SLURM jobs; snakemake wall time {slurm_run.wall:.0f} s on SLURM, "
          f"{local_run.wall:.0f} s locally ({'one after the other' if SEQUENTIAL else 'both at once, the atlas beside'}, "
          f"--max-threads 1, {cluster.cpus} CPUs)")
    return {"local": local, "slurm": on_slurm, "slurm_log": log, "local_log": local_result.stdout + local_result.stderr}


@pytest.mark.slurm
def test_every_job_ran_as_a_slurm_job(runs, cluster):
    log = runs["slurm_log"]
    # every job but `all` was a SLURM job (no rule of this config is a localrule)
    headers = _job_headers(log)
    assert [rule for is_local, rule, _ in headers if is_local] == ["all"]
    remote = {jobid: rule for is_local, rule, jobid in headers if not is_local}
    assert len(headers) == len(_job_headers(runs["local_log"]))  # the same DAG
    submitted = re.findall(r"^Job (\d+) has been submitted with SLURM jobid (\d+) \(log: (.+)\)\.$", log, flags=re.M)
    assert sorted(jobid for jobid, _, _ in submitted) == sorted(remote)
    records = cluster.jobs()
    for jobid, slurm_id, slurm_log in submitted:
        rule = remote[jobid]
        record = records[slurm_id]
        assert record["JobState"] == "COMPLETED", (rule, record)
        assert record["Partition"] == "batch", (rule, record)
        assert record["NumCPUs"] == "1", (rule, record)
        assert "gpu" not in record.get("TresPerJob", "") + record.get("TresPerNode", ""), (rule, record)
        assert record["Comment"].startswith(f"rule_{rule}"), (rule, record)
        # the plugin's log of the job (kept: --slurm-keep-successful-logs), written by SLURM
        assert f"slurm_logs/rule_{rule}/" in slurm_log and Path(slurm_log).stat().st_size > 0, slurm_log


@pytest.mark.slurm
def test_tables_equal_the_local_run_byte_for_byte(runs):
    local_tables, slurm_tables = _tables(runs["local"]), _tables(runs["slurm"])
    assert local_tables and sorted(slurm_tables) == sorted(local_tables)
    differ = [name for name in local_tables if local_tables[name] != slurm_tables[name]]
    assert not differ, f"tables differ between the SLURM and the local run: {differ}"


@pytest.mark.slurm
def test_gpu_profile_runs_extraction_on_the_gpu_partition(runs, cluster):
    """profiles/slurm on a cluster with a GPU (device-less: SLURM schedules it, CUDA does not see it):
    extraction, run again, goes to the `gpu` partition with one GPU and finishes."""
    workdir = runs["slurm"]
    env = cluster.env(ENV)
    env["BERTLOOK_SLURM_PARTITION"] = "batch"  # the GPU partition keeps the profile's default, `gpu`
    run = SnakemakeRun(workdir, ["--workflow-profile", str(PROFILES / "slurm"), "--forcerun", "extract_segments",
                                 "--until", "extract_segments", "--max-threads", "1", *SLURM_POLL_FAST], env)
    try:
        result = run.wait(timeout=RUN_TIMEOUT, cluster=cluster)
    finally:
        run.kill()
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:] + "\n" + cluster.logs_tail()
    remote = {jobid: rule for is_local, rule, jobid in _job_headers(log) if not is_local}
    submitted = re.findall(r"^Job (\d+) has been submitted with SLURM jobid (\d+) ", log, flags=re.M)
    assert set(remote.values()) == {"extract_segments"} and len(submitted) == len(remote) >= 1
    records = cluster.jobs()
    for _, slurm_id in submitted:
        record = records[slurm_id]
        assert record["JobState"] == "COMPLETED", record
        assert record["Partition"] == "gpu", record
        assert "gres:gpu:1" in record.get("TresPerJob", ""), record


# ---- the tiny atlas on the cluster: one failure is one model -------------------------------------------------
# The whole tiny atlas (bertlook.testing.tiny_atlas: eight tiny models of distinct families and the offline MiniLM,
# the GPT-NeoX one with truncated weights) through profiles/slurm-cpu with the add-on profile
# profiles/slurm-cpu-per-model: every model's steps one Snakemake job group, so one SLURM job per model (9 + the
# atlas, instead of 154 jobs that each pay a submission and two snakemake start-ups). Up to the target `atlas`
# (not the report pages and cross-model summaries beside it). --cores 1: a group job asks for one CPU (its steps
# run one after the other in it), so two models run at once on the test's 2-CPU node.
PER_MODEL = PROFILES / "slurm-cpu-per-model"
GROUP = "model"  # the group name of profiles/slurm-cpu-per-model


def group_failures(log: str) -> list[tuple[str, list[str]]]:
    """(SLURM log, [log file of each of its steps]) of every group job snakemake reports as failed, once each."""
    out = []
    for m in re.finditer(rf"^    message: Error in group {GROUP}\n    log: (\S+).*\n    jobs:\n((?:        .*\n)+)", log,
                         flags=re.M):
        entry = (m.group(1), re.findall(r"^            log: (\S+)", m.group(2), flags=re.M))
        if entry not in out:
            out.append(entry)
    return out


def group_jobs(log: str) -> list[tuple[str, str]]:
    """(rule, run wildcard or "") of every job snakemake started, the steps of its group jobs included (their
    `rule NAME:` blocks, indented by 4 in a group job's listing); not the steps listed again under a failed group
    job (indented by 8), nor the jobs of the SLURM logs that show-failed-logs prints (a job's own snakemake,
    between lines of `=`)."""
    log = re.sub(r"^={20,}\n.*?^={20,}\n", "", log, flags=re.M | re.S)
    out = []
    for m in re.finditer(r"^((?:    )?)(?:local)?rule (\w+):\n((?:\1    .*\n)*)", log, flags=re.M):
        run = re.search(r"^ *wildcards: .*?\brun=([\w.-]+)", m.group(3), flags=re.M)
        out.append((m.group(2), run.group(1) if run else ""))
    return out


@pytest.fixture(scope="module")
def atlas_first_run(cluster, tmp_path_factory):
    """The tiny atlas's first run through profiles/slurm-cpu + slurm-cpu-per-model (keep-going), started in the
    background (``runs`` goes on beside it; with BERTLOOK_SLURM_TEST_SEQUENTIAL=1 it has finished on return):
    {"run": SnakemakeRun, "workdir", "args", "env"}."""
    from bertlook.testing.tiny_atlas import make_tiny_atlas
    from test_workflow_atlas import BROKEN

    workdir = tmp_path_factory.mktemp("atlas-on-slurm")
    configfile = make_tiny_atlas(workdir, slurm_test_config(workdir, workdir / "unused"), broken=BROKEN)
    assert configfile == workdir / "config.yaml"  # where SnakemakeRun reads it
    env = cluster.env(ENV)
    env["BERTLOOK_SLURM_PARTITION"] = "batch"
    args = ["--workflow-profile", str(PROFILES / "slurm-cpu"), "--profile", str(PER_MODEL), "--cores", "1",
            "--max-threads", "1", *SLURM_POLL_FAST, "atlas"]
    run = SnakemakeRun(workdir, args, env)
    try:
        if SEQUENTIAL:
            run.wait(timeout=2 * RUN_TIMEOUT, cluster=cluster)
        yield {"run": run, "workdir": workdir, "args": args, "env": env}
    finally:
        run.kill()


@pytest.fixture(scope="module")
def atlas_on_slurm(atlas_first_run, cluster) -> dict:
    """The first run of ``atlas_first_run`` waited for, then, the broken model repaired, the rerun (the same
    arguments: one CPU per group job, --cores 1, so two models at once on the test's 2-CPU node)."""
    from bertlook.testing.tiny_atlas import make_tiny_atlas_model
    from test_workflow_atlas import BROKEN, state

    workdir, args, env = atlas_first_run["workdir"], atlas_first_run["args"], atlas_first_run["env"]
    page, data = workdir / "results" / "tiny-atlas" / "atlas.html", workdir / "results" / "tiny-atlas" / "atlas.json"
    out = {"workdir": workdir}
    for name in ("first", "rerun"):
        run = atlas_first_run["run"] if name == "first" else SnakemakeRun(workdir, args, env)
        try:
            result = run.wait(timeout=2 * RUN_TIMEOUT, cluster=cluster)
        finally:
            run.kill()
        out[name], out[f"{name}_code"], out[f"{name}_wall"] = result.stdout + result.stderr, result.returncode, run.wall
        (workdir / f"snakemake-{name}.log").write_text(out[name])
        out[f"{name}_page"] = page.read_text() if page.is_file() else None
        out[f"{name}_atlas"] = json.loads(data.read_text()) if data.is_file() else {"models": []}
        if name == "first":
            out["failed_logs"] = {path: Path(path).read_text() if Path(path).is_file() else ""
                                  for _, paths in group_failures(out[name]) for path in paths}
            out["after_first"] = state(workdir / "results")
            out["jobs_after_first"] = cluster.jobs()
            make_tiny_atlas_model(workdir / "models", BROKEN)  # the repair
    print(f"\nSLURM atlas test (9 models, one broken; one SLURM job per model): {out['first_wall']:.0f} s "
          f"({'alone' if SEQUENTIAL else 'beside the tiny configuration runs'}), then the rerun {out['rerun_wall']:.0f} s")
    return out


@pytest.mark.slurm
def test_a_failed_model_on_slurm_stops_only_its_own_jobs(atlas_on_slurm, cluster):
    from bertlook.testing.tiny_atlas import MINILM, TINY_ATLAS_MODELS
    from test_workflow_atlas import BROKEN

    log, results = atlas_on_slurm["first"], atlas_on_slurm["workdir"] / "results"
    assert atlas_on_slurm["first_code"] != 0, log[-4000:]
    # the group jobs that failed: the broken model's (twice: see below), each of its steps' logs in that model's run
    failures = group_failures(log)
    assert failures and all(steps and all(f"/tiny-{BROKEN}/" in path for path in steps) for _, steps in failures), \
        failures
    assert any("corrupt or truncated safetensors" in text for text in atlas_on_slurm["failed_logs"].values())
    labels = [*TINY_ATLAS_MODELS, MINILM["label"]]
    after_first = atlas_on_slurm["after_first"]
    assert {label for label in labels if after_first[f"tiny-{label}"]} == set(labels) - {BROKEN}
    assert not after_first["models_summary"]
    # every job a SLURM job: one group job per model (all its steps in it), nothing else (the target `atlas` never
    # starts); the broken model's FAILED, every other one COMPLETED. The broken model's group job is submitted
    # twice: a group job takes the largest `retries:` of its steps (treebank's 1).
    submitted = re.findall(r"^Job ([\w-]+) has been submitted with SLURM jobid (\d+) ", log, flags=re.M)
    assert len({group for group, _ in submitted}) == len(labels), submitted
    ran = group_jobs(log)
    assert {run for _, run in ran} == {f"tiny-{label}" for label in labels}, ran  # no cross-model job started
    assert all(len([rule for rule, run in ran if run == f"tiny-{label}"]) >= 10 for label in labels), ran
    records = atlas_on_slurm["jobs_after_first"]
    states = {}
    for group, slurm_id in submitted:
        record = records[slurm_id]
        assert record["Comment"].startswith(f"rule_{GROUP}_"), record  # the plugin's name of a group job
        assert record["NumCPUs"] == "1" and record["Partition"] == "batch", record
        states.setdefault(record["JobState"], set()).add(group)
    assert sorted(states) == ["COMPLETED", "FAILED"] and len(states["FAILED"]) == 1, states
    assert len(states["COMPLETED"]) == len(labels) - 1 and not states["FAILED"] & states["COMPLETED"], states
    # the onerror handler ran `bertlook atlas` where snakemake runs (the login node), not as a SLURM job
    handler = results / "tiny-all-models" / "logs" / "atlas_onerror.log"
    assert handler.is_file() and " -m bertlook atlas " in handler.read_text().splitlines()[0]
    records = {r["label"]: r for r in atlas_on_slurm["first_atlas"]["models"]}
    assert records[BROKEN]["status"] == "did not run" and "safetensors" in records[BROKEN]["reason"], records[BROKEN]
    assert all(r["status"] == "ran" for label, r in records.items() if label != BROKEN)


@pytest.mark.slurm
def test_the_rerun_on_slurm_runs_only_what_is_missing(atlas_on_slurm):
    from test_workflow_atlas import ACROSS_MODELS, BROKEN, run_complete

    log = atlas_on_slurm["rerun"]
    ran = group_jobs(log)
    assert ran and not [(r, run) for r, run in ran if run != f"tiny-{BROKEN}" and r not in ACROSS_MODELS], ran
    assert {"extract_segments", "manifest", "atlas"} <= {rule for rule, _ in ran}
    assert len(re.findall(r"^Job [\w-]+ has been submitted with SLURM jobid \d+ ", log, flags=re.M)) == 2  # + atlas
    assert atlas_on_slurm["rerun_code"] == 0, log[-4000:]
    atlas = atlas_on_slurm["rerun_atlas"]
    assert {r["status"] for r in atlas["models"]} == {"ran"}, atlas["models"]  # the repaired model ran too
    assert run_complete(atlas_on_slurm["workdir"] / "results" / f"tiny-{BROKEN}")


@pytest.mark.slurm
@pytest.mark.parametrize("which", ["first", "rerun"])
def test_the_atlas_page_of_the_slurm_run_in_a_headless_browser(atlas_on_slurm, which, tmp_path):
    """The page the onerror handler wrote after the failed run (first) and the atlas rule's page after the rerun,
    in headless Chromium: a row per model, the broken one saying why (first) or every model run (rerun), sorting
    and a family filter work, a depth profile per model that ran, no script error."""
    from bertlook.testing.tiny_atlas import MINILM, TINY_ATLAS_MODELS
    from test_explorer import _run_page_in_chromium
    from test_workflow_atlas import ATLAS_DRIVER, BROKEN

    page = atlas_on_slurm[f"{which}_page"]
    assert page is not None, f"no atlas.html after the {which} run"
    family = {r["label"]: r["family"] for r in atlas_on_slurm[f"{which}_atlas"]["models"]}
    out = _run_page_in_chromium(tmp_path, page.replace("</body>", ATLAS_DRIVER.replace(
        "FAMILY", json.dumps(family["gpt2"])[1:-1]) + "</body>"))
    labels = [*TINY_ATLAS_MODELS, MINILM["label"]]
    assert sorted(out["initial"]) == sorted(labels)
    did_not_run = sorted(m for m in labels if out["status"][m].startswith("did not run"))
    assert did_not_run == ([BROKEN] if which == "first" else []), out["status"]
    if which == "first":
        assert "safetensors" in out["status"][BROKEN] and out["by_params"][-1] == BROKEN
    assert family["gpt2"] in out["families"] and len(out["families"]) >= 6
    assert sorted(out["after_filter"]) == sorted(m for m in labels if family[m] != family["gpt2"])
    assert 0 < out["lines"] <= len([m for m in out["after_filter"] if m not in did_not_run])
