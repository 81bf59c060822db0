"""Shared pytest fixtures: tiny random BERT models, their tokenizer, hand-written corpora, offline
stand-ins for the model loader and the datasets cache, and the CLI with every step registered."""

from __future__ import annotations

import bz2
import os
import sys
import types
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A 2-layer x 2-head random BERT (BertModel) with a WordPiece tokenizer, saved locally."""
    from bertlook.testing.tiny_models import make_tiny_bert

    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), num_layers=2, num_heads=2, seed=0)


@pytest.fixture(scope="session")
def tiny_mlm_dir(tmp_path_factory) -> Path:
    """The same tiny BERT with a masked-LM head (BertForMaskedLM)."""
    from bertlook.testing.tiny_models import make_tiny_bert

    return make_tiny_bert(tmp_path_factory.mktemp("tiny_mlm"), num_layers=2, num_heads=2, seed=0, mlm_head=True)


@pytest.fixture(scope="session")
def tokenizer(tiny_bert_dir):
    """The tiny BERT's fast WordPiece tokenizer (what ``modeling.load_tokenizer`` returns for it; loaded
    with ``AutoTokenizer`` so that the data-layer tests need no torch)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert_dir)


@pytest.fixture()
def wiki_bz2(fixtures_dir, tmp_path) -> Path:
    """``fixtures/tiny_wiki.xml`` as a bz2-compressed dump (the format of a real Wikipedia download)."""
    out = tmp_path / "tinywiki-pages-articles.xml.bz2"
    out.write_bytes(bz2.compress((fixtures_dir / "tiny_wiki.xml").read_bytes()))
    return out


@pytest.fixture()
def fake_modeling(monkeypatch):
    """Stand-in for bertlook.attention.modeling (the resolve_model / load_tokenizer contract) without
    torch: the CLI data steps (segments, treebank) then load only a tokenizer."""
    from transformers import AutoTokenizer

    mod = types.ModuleType("bertlook.attention.modeling")
    mod.resolve_model = lambda spec, revision=None: spec
    mod.load_tokenizer = lambda resolved: AutoTokenizer.from_pretrained(resolved)
    monkeypatch.setitem(sys.modules, "bertlook.attention.modeling", mod)
    return mod


@pytest.fixture()
def hf_offline_cache(tmp_path, monkeypatch):
    """No network for Hugging Face ``datasets``, and its cache in the test's tmp dir (use it with
    ``pytestmark = pytest.mark.usefixtures("hf_offline_cache")``)."""
    import datasets.config

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)


@pytest.fixture
def cli_main(monkeypatch):
    """``bertlook.cli.main`` with the compare subcommand registered (whether or not cli lists it)."""
    from bertlook import cli

    if "bertlook.cli.compare" not in cli.COMMAND_MODULES:
        monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "bertlook.cli.compare"])
    return cli.main


_FIRST = ("slow", "e2e", "integration")  # the longest tests (whole tiny runs, subprocess pipelines) first
#: the test files that take longest, longest first (pytest --durations, 2 workers, 2026-12-06: whole tiny runs;
#: the last ones are `make test`'s longest): started first, the shorter files fill the other worker meanwhile
_LONGEST_FILES = ("test_workflow_atlas.py", "test_workflow_sharding.py", "test_workflow_e2e.py",
                  "test_paper_local_servers.py", "test_workflow_languages.py", "test_workflow_decoder.py",
                  "test_workflow_module.py", "test_shell_injection.py", "test_portability.py", "test_toy_step.py")


def pytest_collection_modifyitems(config, items):
    """Run the longest test files first (stable order otherwise): with pytest-xdist (the Makefile: two workers,
    one test file per worker, `--no-loadscope-reorder` so that xdist keeps this order instead of putting the
    files with the most tests first) the whole tiny Snakemake runs start at once, longest first, beside each
    other and the unit tests, instead of the last file to start being the one everything waits for."""
    def rank(item) -> tuple[int, int]:
        name = item.path.name
        by_file = _LONGEST_FILES.index(name) if name in _LONGEST_FILES else len(_LONGEST_FILES)
        return by_file, next((i for i, m in enumerate(_FIRST) if item.get_closest_marker(m)), len(_FIRST))

    items.sort(key=rank)
