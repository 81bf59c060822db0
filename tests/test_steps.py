"""bertlook.pipeline.steps: the steps of a run, declared once (no Snakemake here; the DAG side is in
tests/test_workflow_dag.py::test_every_declared_step_is_made_by_its_rule)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from bertlook.pipeline import steps
from bertlook.pipeline.config import load_yaml_strict, validate_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def offline_config():
    return validate_config(load_yaml_strict(ROOT / "config" / "offline.yaml"), source="config/offline.yaml")


def test_declarations_are_well_formed():
    names = [s.name for s in steps.STEPS]
    assert len(names) == len(set(names))
    for step in steps.STEPS:
        assert step.switch is None or step.switch in steps.SWITCHES, step.name
        assert set(step.maps) <= set(steps.MAPS), step.name
        assert step.env in steps.ENVS, step.name
        assert step.outputs and all(not p.startswith("/") and "{" not in p for p in step.outputs), step.name
        assert step.summary is None or step.beyond, step.name  # the paper's summaries: manifest.smk lists them
        for page in step.pages:
            assert (ROOT / "workflow" / "report" / page.caption).is_file(), (step.name, page.caption)
            assert page.page.endswith((".html", ".png")), page


def test_every_switch_is_used_by_a_step_or_the_extraction():
    used = {s.switch for s in steps.STEPS} - {None}
    # random_init has no output of its own: the probes job trains on its maps (Table 3's random-init row)
    assert used | {"random_init"} == set(steps.SWITCHES)


def test_switches_follow_the_config(offline_config):
    on = steps.switches(offline_config, has_train_split=True)
    assert set(on) == set(steps.SWITCHES) and all(on.values())
    assert len(steps.enabled_steps(on)) == len(steps.STEPS)
    # no train split: no probes, hence none of their twins
    off = steps.switches(offline_config, has_train_split=False)
    assert not off["probes"] and not off["random_init"] and not off["norm_probes"] and not off["probe_ablations"]
    assert off["norms"] and off["rollout"]
    names = {s.name for s in steps.enabled_steps(off)}
    assert {"probes", "probes_norm", "probe_ablations"}.isdisjoint(names) and "heads_norm" in names
    config = copy.deepcopy(offline_config)
    config["norms"]["enabled"] = False
    config["rollout"]["enabled"] = False
    on = steps.switches(config, has_train_split=True)
    assert not on["norms"] and not on["norm_probes"] and not on["rollout"] and on["probe_ablations"]
    outputs = steps.run_outputs(on)
    assert "tables/table3.csv" in outputs and not any("norm" in p or "rollout" in p for p in outputs)


def test_run_outputs_pages_and_summaries_of_a_full_run(offline_config):
    on = steps.switches(offline_config, has_train_split=True)
    outputs = steps.run_outputs(on)
    assert len(outputs) == len(set(outputs))
    assert {"tables/table1.csv", "tables/table2.csv", "tables/table3.csv", "figures/fig3_sep_gradients.png",
            "comparison.md", "resources.md", "tables/tree_heads.csv"} <= set(outputs)
    pages = steps.run_pages(on)
    assert len({p.page for p in pages}) == len(pages)  # one file per page under report/
    assert len(pages) == 31
    assert list(steps.beyond_summaries(on)) == ["stats_norm", "heads_norm", "probes_norm", "rollout",
                                                "rollout_table1", "head_report", "tree_heads", "probe_ablations"]
    assert all(s.endswith(".summary.json") for s in steps.beyond_summaries(on).values())


def test_syntax_runs_have_the_syntax_steps_only():
    assert [s.name for s in steps.syntax_steps()] == ["heads"]
    assert [p.page for p in steps.syntax_pages()] == ["table1.html", "head_accuracy.html", "fig5_syntax_heads.png"]
