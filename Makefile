# bertlook — common entry points. Everything runs from a local virtualenv (.venv).
#   make test        install into .venv and run the test suite (offline, 2 pytest workers), less the `slow` tests
#   make test-unit   the unit tests: no Snakemake run, no real corpus or subprocess pipeline (no `e2e`, `integration`,
#                    `slow` or `slurm` mark): the quick loop while coding
#   make test-all    the whole suite, `slow` tests included (what CI runs)
#   make test-slurm  set up a one-node SLURM cluster here (root: apt-get, daemons) and run the workflow on it
#   make test-atlas  the whole tiny atlas (eight families + the offline MiniLM, one broken) run locally (~14 min)
#   make demo        offline configuration end to end -> results/offline-minilm/
#   make reproduce   paper configuration (needs network, or local paths in config.yaml)
#   make fetch       download every input of CONFIG (models, dump, UD, GloVe) before a cluster run (login node)
#   make resources   per-rule measured resources of every run of CONFIG (from its benchmark files)
#   make report      HTML report of every run of CONFIG
#   make unlock      remove the lock a killed run left (snakemake --unlock), then rerun the same target
#   make lint        snakemake --lint (on the tiny configuration .test/config.yaml)
#   make check       offline run vs the committed golden numbers (after make demo)
#   make golden      rewrite tests/golden/offline-minilm.json from results/offline-minilm (review the diff!)
#   make bench       benchmark scripts (extraction, one pass vs stores read back, JS divergence, long contexts, head
#                    accuracy, probes, ALTI and value zeroing, hand-written parts): each prints its before/after
#                    ratio and its physical limit
#   make scale-check whole DAG at paper sizes on a random BERT-base: per-rule time/RSS vs FLOP limits (~14 min)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= config.yaml
OFFLINE_CONFIG := config/offline.yaml
TINY_CONFIG := .test/config.yaml
CORES ?= all
SNAKEMAKE := $(BIN)/snakemake --workflow-profile profiles/default --cores $(CORES)
export PATH := $(abspath $(BIN)):$(PATH)
export TOKENIZERS_PARALLELISM := false
# Python's default: cache compiled bytecode (__pycache__, git-ignored). An environment that sets
# PYTHONDONTWRITEBYTECODE makes every step and pytest worker recompile bertlook and re-rewrite the tests
# (measured: make test-unit 122 -> 111 s).
unexport PYTHONDONTWRITEBYTECODE

GOLDEN := tests/golden/offline-minilm.json
TOLERANCES := tests/golden/tolerances.json
OFFLINE_RUN := results/offline-minilm

.PHONY: install test test-unit test-all test-slurm test-atlas demo reproduce fetch resources report lint docs bench scale-check check golden clean unlock

# A run that was killed (Ctrl-C twice, OOM killer, lost node) leaves .snakemake/locks behind and the
# next run refuses to start: say what to do (scripts/check_stale_lock.sh) instead of starting.

install: $(VENV)/.installed

# torch is pinned to 2.13.0 in the same pip call (a CPU wheel of it may lie on local disk);
# constraints.txt pins every other version the golden numbers were produced with.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]" torch==2.13.0
	# compile the numba kernels once into their cache (~15 s), instead of in each of a first run's jobs
	$(BIN)/python -m bertlook.analyses.warm
	touch $@

# pytest-xdist: TEST_WORKERS processes (2 = the CI machine's cores; TEST_WORKERS=0 runs in this process); each
# test file stays on one worker (--dist loadfile), so a module's fixtures (a finished tiny run) are made once;
# files start in tests/conftest.py's order, the longest first (--no-loadscope-reorder: else the most tests first)
TEST_WORKERS ?= 2
# OpenMP threads with nothing to do sleep at once instead of spinning first (libgomp's default, torch's OpenMP): the
# two workers, their torch threads and the tiny runs' jobs share the cores, and spinning threads took CPU time the
# others needed (make test 2026-12-07, alternated on one clone: 169-170 s and 300 s of user CPU spinning, 157-160 s
# and 276-281 s passive). No number changes: the wait policy moves no work between threads. TEST_OMP_WAIT=ACTIVE
# gives the default back.
TEST_OMP_WAIT ?= PASSIVE
TEST_ENV := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_WAIT_POLICY=$(TEST_OMP_WAIT)
PYTEST := $(TEST_ENV) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: install
	$(PYTEST)

test-unit: install
	$(PYTEST) -m "not e2e and not integration and not slow and not slurm"

# the `slow` tests too (K = 1 vs K = 4 shards, a killed run resuming, the shell-injection run, the
# languages DAG, the parquet corpus): -m on the command line replaces the one in pyproject's addopts
test-all: install
	$(PYTEST) -m "not slurm"

# the whole tiny atlas locally (tests/test_workflow_atlas.py with BERTLOOK_TINY_ATLAS=all: eight tiny models of
# distinct families and the offline MiniLM, one broken; 14 minutes on 2 cores): make test-all runs three of
# them, make test-slurm all nine on the SLURM cluster
test-atlas: install
	BERTLOOK_TINY_ATLAS=all $(PYTEST) -m slow tests/test_workflow_atlas.py

# tests/test_slurm.py -m slurm (excluded from `make test`): installs slurm-wlm + munge with apt-get when
# missing, runs the tiny configuration through profiles/slurm-cpu and locally, compares the tables; then the tiny
# atlas (9 models, one broken; one SLURM job per model: profiles/slurm-cpu-per-model) and its rerun, both atlas
# pages in headless Chromium (about 12 minutes on 2 shared cores; the 9-model atlas is not in make test-all).
test-slurm: install
	$(TEST_ENV) $(BIN)/python -m pytest -q -s -m slurm tests/test_slurm.py

demo: install
	@scripts/check_stale_lock.sh . $(OFFLINE_CONFIG)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(SNAKEMAKE) --configfile $(OFFLINE_CONFIG)

reproduce: install
	@scripts/check_stale_lock.sh . $(CONFIG)
	$(BIN)/bertlook preflight $(CONFIG)
	$(SNAKEMAKE) --configfile $(CONFIG)

fetch: install
	$(BIN)/bertlook fetch $(CONFIG)

resources: install
	for run in $$($(BIN)/bertlook runs $(CONFIG)); do \
	  $(BIN)/bertlook resources results/$$run || exit 1; \
	done

report: install
	for run in $$($(BIN)/bertlook runs $(CONFIG)); do \
	  $(BIN)/snakemake --configfile $(CONFIG) --report results/$$run/report.html || exit 1; \
	done

check: install
	$(BIN)/bertlook check-regression $(OFFLINE_RUN) --against $(GOLDEN)
	$(BIN)/bertlook check-regression $(OFFLINE_RUN) --against paper

golden: install
	$(BIN)/bertlook make-golden $(OFFLINE_RUN) --tolerances $(TOLERANCES) --out $(GOLDEN)

unlock: install
	$(SNAKEMAKE) --configfile $(CONFIG) --unlock

# .test/config.yaml: the tiny configuration (every stage on, offline), so the lint sees every rule;
# `snakemake --configfile .test/config.yaml --cores 2` runs the whole DAG in a few minutes.
lint: install
	$(BIN)/snakemake --lint --configfile $(TINY_CONFIG)
	$(BIN)/snakefmt --check Snakefile workflow/

# the documentation site (mkdocs.yml) -> site/; --strict: a broken link, a missing page or a page outside the nav
# fails. The CLI reference, the configuration reference, the changelog and the home page (README.md) are
# generated at build time (scripts/mkdocs_hooks.py).
docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

$(VENV)/.docs-installed: $(VENV)/.installed pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[docs]"
	touch $@

bench: install
	$(BIN)/python scripts/bench_extract.py
	$(BIN)/python scripts/bench_one_pass.py
	$(BIN)/python scripts/bench_js.py --threads 2
	$(BIN)/python scripts/bench_long_context.py
	$(BIN)/python scripts/bench_heads.py
	$(BIN)/python scripts/bench_probes.py
	$(BIN)/python scripts/bench_probe_kernels.py
	$(BIN)/python scripts/bench_tree_heads.py
	$(BIN)/python scripts/bench_contributions.py
	$(BIN)/python -m pip install --quiet -c constraints.txt conllu networkx   # the [bench] extra
	$(BIN)/python scripts/bench_handwritten.py

# Paper-scale check (README "### Paper-scale check"): results/scale/scale_check.{md,json}.
# SCALE_ARGS (default: the measured paper-scale settings, one job per step as the offline config: 13 min 47 s against
# 14 min 45 s with 8 segment and 2 gradient shards, docs/development/benchmarks.md): e.g. --dry (plan only), --keep,
# --segments 100 --sentences 200, --shards 8 --gradient-shards 2.
SCALE_ARGS ?= --shards 1 --word-shards 1 --gradient-shards 1
scale-check: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python scripts/scale_check.py --cores 2 $(SCALE_ARGS)

clean:
	rm -rf $(VENV) .snakemake
