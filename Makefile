# bertlook — common entry points. Everything runs from a local virtualenv (.venv).
#   make test        install into .venv and run the test suite (offline)
#   make demo        offline configuration end to end -> results/offline-minilm/
#   make reproduce   paper configuration (needs network, or local paths in config.yaml)
#   make report      HTML report of every run of CONFIG
#   make unlock      remove the lock a killed run left (snakemake --unlock), then rerun the same target
#   make lint        snakemake --lint
#   make check       offline run vs the committed golden numbers (after make demo)
#   make golden      rewrite tests/golden/offline-minilm.json from results/offline-minilm (review the diff!)
#   make bench       benchmark scripts (extraction, JS divergence, head accuracy, probes)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= config.yaml
OFFLINE_CONFIG := config/offline.yaml
CORES ?= all
SNAKEMAKE := $(BIN)/snakemake --workflow-profile profiles/default --cores $(CORES)
export PATH := $(abspath $(BIN)):$(PATH)
export TOKENIZERS_PARALLELISM := false

GOLDEN := tests/golden/offline-minilm.json
OFFLINE_RUN := results/offline-minilm

.PHONY: install test demo reproduce report lint bench check golden clean unlock

# A run that was killed (Ctrl-C twice, OOM killer, lost node) leaves .snakemake/locks behind and the
# next run refuses to start: say what to do (scripts/check_stale_lock.sh) instead of starting.

install: $(VENV)/.installed

# torch is pinned to 2.13.0 in the same pip call (a CPU wheel of it may lie on local disk);
# constraints.txt pins every other version the golden numbers were produced with.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]" torch==2.13.0
	touch $@

test: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest -q

demo: install
	@scripts/check_stale_lock.sh . $(OFFLINE_CONFIG)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(SNAKEMAKE) --configfile $(OFFLINE_CONFIG)
	@echo "results: results/offline-minilm/  (report: make report CONFIG=$(OFFLINE_CONFIG))"

reproduce: install
	@scripts/check_stale_lock.sh . $(CONFIG)
	$(BIN)/bertlook preflight $(CONFIG)
	$(SNAKEMAKE) --configfile $(CONFIG)

report: install
	for run in $$($(BIN)/bertlook runs $(CONFIG)); do \
	  $(BIN)/snakemake --configfile $(CONFIG) --report results/$$run/report.html || exit 1; \
	done

check: install
	$(BIN)/bertlook check-regression $(OFFLINE_RUN) --against $(GOLDEN)
	$(BIN)/bertlook check-regression $(OFFLINE_RUN) --against paper

golden: install
	$(BIN)/bertlook make-golden $(OFFLINE_RUN) --out $(GOLDEN)

unlock: install
	$(SNAKEMAKE) --configfile $(CONFIG) --unlock

lint: install
	$(BIN)/snakemake --lint --configfile $(OFFLINE_CONFIG)

bench: install
	$(BIN)/python scripts/bench_extract.py
	$(BIN)/python scripts/bench_js.py --threads 2
	$(BIN)/python scripts/bench_heads.py
	$(BIN)/python scripts/bench_probes.py

clean:
	rm -rf $(VENV) .snakemake
