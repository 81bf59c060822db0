"""Shared pytest fixtures: tiny random BERT models and hand-written corpora."""

from __future__ import annotations

import os
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


_FIRST = ("slow", "e2e", "integration")  # the longest tests (whole tiny runs, subprocess pipelines) first


def pytest_collection_modifyitems(config, items):
    """Run the longest tests first (stable order otherwise): with pytest-xdist (make test: two workers, one
    test file per worker) a whole tiny Snakemake run then starts at once, beside the unit tests, instead of
    being the last file to start and the one everything waits for."""
    def rank(item) -> int:
        return next((i for i, m in enumerate(_FIRST) if item.get_closest_marker(m)), len(_FIRST))

    items.sort(key=rank)
