"""The notebook API (``bertlook.open_run``, bertlook.reporting.api) on a hand-made run folder: tables, a head's
card, the examples and their maps (dequantised), and bad input named; the example notebook on a real run is in
tests/test_workflow_e2e.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

import bertlook
from bertlook.errors import BertlookError
from bertlook.io_utils import write_json
from bertlook.reporting.explorer import explorer_data, explorer_sample
from test_explorer import _tables, _word_store


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "results" / "tiny-x"
    (run / "tables").mkdir(parents=True)
    report, acc, clusters, stats, norm = _tables(run / "tables")
    sample = explorer_sample(_word_store(tmp_path), _word_store(tmp_path, "normwords-dev", 0.5), words=(3, 5))
    write_json(run / "explorer.json", explorer_data(report, acc, clusters, stats, norm, run="tiny-x", sample=sample))
    write_json(run / "manifest.json", {"run": "tiny-x", "config": {"seed": 3}, "packages": {"bertlook": "0.1.0"},
                                       "model": {"config": {"name_or_path": "tiny"}, "provenance": {"family": "encoder"}}})
    (run / "tables" / "head_report.summary.json").write_text(json.dumps({"heads": 4}))
    return run


def test_tables_card_and_summary(run_dir):
    run = bertlook.open_run(run_dir)
    assert run.name == "tiny-x" and run.config["seed"] == 3 and run.model["provenance"]["family"] == "encoder"
    assert run.tables() == ["attention_stats", "attention_stats_norm", "head_accuracy", "head_clusters",
                            "head_report", "table1"]
    assert run.table("table1.csv")["best_head"].tolist() == ["1-1", "1-1"]
    card = run.head_card(1, 1)
    assert card["behaviour"] == "previous token" and card["prev_token"] == 0.9 and isinstance(card["layer"], int)
    assert run.summary("head_report") == {"heads": 4}
    assert "<th>run</th><td>tiny-x</td>" in run._repr_html_()


def test_examples_and_maps(run_dir):
    run = bertlook.open_run(run_dir)
    ex = run.examples()
    assert ex["id"].tolist() == ["s0", "s1"] and ex["maps"].tolist() == ["attention,norm,rollout"] * 2
    assert run.example(1)["heads"] == [0, 1, 1, 1, 1]
    m = run.maps(1, 2, 1)  # the word store's head: every row on the previous position (row 0 on itself)
    assert m.shape == (7, 7) and m.dtype == np.float32 and m[3, 2] == 1.0 and m[3].sum() == 1.0
    norm = run.maps(1, 1, 2, kind="norm")
    assert norm[3, 2] == pytest.approx(128 / 255) and norm[3, 0] == pytest.approx(128 / 255)
    assert run.maps(0, 1, kind="rollout").shape == (5, 5)


def test_bad_requests_are_named(run_dir, tmp_path):
    run = bertlook.open_run(run_dir)
    with pytest.raises(BertlookError, match=r"table2.csv: no such table in run tiny-x; it has: attention_stats"):
        run.table("table2")
    with pytest.raises(BertlookError, match=r"run tiny-x: no head 3-1 \(layers 1..2, heads 1..2\)"):
        run.head_card(3, 1)
    with pytest.raises(BertlookError, match=r"no example 2 \(0..1\)"):
        run.maps(2, 1, 1)
    with pytest.raises(BertlookError, match=r"no head 1-None"):
        run.maps(0, 1)
    with pytest.raises(BertlookError, match=r"example 0 has no 'gradients' maps"):
        run.maps(0, 1, 1, kind="gradients")
    with pytest.raises(BertlookError, match=r"manifest.json: no run manifest \(is the run finished\?\)"):
        bertlook.open_run(tmp_path / "nowhere")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("{}")
    with pytest.raises(BertlookError, match=r"not a bertlook run manifest \(no 'config'\)"):
        bertlook.open_run(tmp_path / "bad")
    with pytest.raises(AttributeError):
        bertlook.no_such_name  # noqa: B018
