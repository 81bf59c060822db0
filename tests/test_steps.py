"""bertlook.pipeline.steps and bertlook.cli.declared_steps: the steps of a run, each declared once in its
CLI module (no Snakemake here; the DAG side is in
tests/test_workflow_dag.py::test_every_declared_step_is_made_by_its_rule, a new step end to end in
tests/test_toy_step.py)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from bertlook.cli import declared_steps
from bertlook.pipeline import steps
from bertlook.pipeline.config import load_yaml_strict, validate_config

ROOT = Path(__file__).resolve().parents[1]


STEPS = declared_steps()
SWITCHES = sorted({s.switch for s in STEPS if s.switch} | {"random_init"})


@pytest.fixture(scope="module")
def offline_config():
    return validate_config(load_yaml_strict(ROOT / "config" / "offline.yaml"), source="config/offline.yaml")


def test_declarations_are_well_formed():
    assert steps.check_steps(STEPS) == STEPS
    for step in STEPS:
        for page in step.pages:
            assert (ROOT / "workflow" / "report" / page.caption_file).is_file(), (step.name, page.caption)
    # the paper's steps first (manifest order), then those beyond it
    assert [s.beyond for s in STEPS] == sorted(s.beyond for s in STEPS)
    assert [s.name for s in STEPS[:4]] == ["surface_stats", "cluster_heads", "figures", "heads"]


@pytest.mark.parametrize("change, message", [
    (dict(name="heads"), "step 'heads': step 'heads' is declared twice"),
    (dict(maps=("attention", "nonsense")), "map kind 'nonsense'"),
    (dict(env="gpu"), "env 'gpu'"),
    (dict(outputs=("tables/{run}.csv",)), "no wildcard"),
    (dict(outputs=()), "no outputs"),
    (dict(summary="tables/x.summary.json"), "a summary, but the step is the paper's"),
    (dict(pages=(steps.Page("tables/x.csv", "x.csv", "Tables", "X"),)), "page 'x.csv' (an .html or .png)"),
    (dict(pages=(steps.Page("tables/x.md", "table1.html", "Tables", "X"),)), "page 'table1.html' is declared twice"),
    (dict(golden=(steps.GoldenTable("tree_heads", "tables/x.csv", ("layer",)),)), "golden group 'tree_heads'"),
])
def test_a_bad_declaration_names_its_step(change, message):
    toy = steps.Step(**{"name": "toy", "outputs": ("tables/toy.csv",), **change})
    with pytest.raises(ValueError, match=re.escape(message)):
        steps.check_steps([*STEPS, toy])


def test_every_switch_is_a_config_section_or_composite(offline_config):
    for switch in {s.switch for s in STEPS} - {None} - set(steps.COMPOSITE_SWITCHES):
        assert isinstance(offline_config[switch]["enabled"], bool), switch
    # random_init has no output of its own: the probes job trains on its maps (Table 3's random-init row)
    assert set(steps.COMPOSITE_SWITCHES) <= {s.switch for s in STEPS} | {"random_init"}


def test_a_new_switch_reads_its_section():
    toy = steps.Step("toy", ("tables/toy.csv",), switch="toy")
    config = {"norms": {"enabled": True, "probes": True}, "probes": {"random_init": True, "layer_ablations": []},
              "toy": {"enabled": False}}
    on = steps.switches(config, True, [toy])
    assert on["toy"] is False and steps.enabled_steps([toy], on) == []
    config["toy"]["enabled"] = True
    assert steps.run_outputs([toy], steps.switches(config, True, [toy])) == ["tables/toy.csv"]


def test_switches_follow_the_config(offline_config):
    on = steps.switches(offline_config, has_train_split=True, declared=STEPS)
    assert set(on) == set(SWITCHES) and all(on.values())
    assert len(steps.enabled_steps(STEPS, on)) == len(STEPS)
    # no train split: no probes, hence none of their twins
    off = steps.switches(offline_config, has_train_split=False, declared=STEPS)
    assert not off["probes"] and not off["random_init"] and not off["norm_probes"] and not off["probe_ablations"]
    assert off["norms"] and off["rollout"]
    names = {s.name for s in steps.enabled_steps(STEPS, off)}
    assert {"probes", "probes_norm", "probe_ablations"}.isdisjoint(names) and "heads_norm" in names
    config = copy.deepcopy(offline_config)
    config["norms"]["enabled"] = False
    config["rollout"]["enabled"] = False
    on = steps.switches(config, has_train_split=True, declared=STEPS)
    assert not on["norms"] and not on["norm_probes"] and not on["rollout"] and on["probe_ablations"]
    outputs = steps.run_outputs(STEPS, on)
    assert "tables/table3.csv" in outputs and not any("norm" in p or "rollout" in p for p in outputs)


def test_run_outputs_pages_and_summaries_of_a_full_run(offline_config):
    on = steps.switches(offline_config, has_train_split=True, declared=STEPS)
    outputs = steps.run_outputs(STEPS, on)
    assert len(outputs) == len(set(outputs))
    assert {"tables/table1.csv", "tables/table2.csv", "tables/table3.csv", "figures/fig3_sep_gradients.png",
            "comparison.md", "resources.md", "tables/tree_heads.csv"} <= set(outputs)
    pages = steps.run_pages(STEPS, on)
    assert len({p.page for p in pages}) == len(pages)  # one file per page under report/
    assert len(pages) == 39
    assert list(steps.beyond_summaries(STEPS, on)) == ["stats_norm", "stats_alti", "heads_norm", "tree_heads", "probes_norm",
                                                       "probe_ablations", "head_detectors", "rollout", "rollout_table1",
                                                       "contributions", "faithfulness", "head_report"]
    assert all(s.endswith(".summary.json") for s in steps.beyond_summaries(STEPS, on).values())
    assert [t.group for t in steps.golden_tables(STEPS)] == ["head_importance", "attention_stats_alti", "tree_heads",
                                                             "tree_heads_best",
                                                             "probe_ablations", "head_detectors", "rollout_stats",
                                                             "contribution_stats", "contribution_heads",
                                                             "table1_contributions", "faithfulness", "head_ablation",
                                                             "head_report"]
    # a cost per rule, declared by one of the steps that share it (bertlook.pipeline.costs)
    costs = steps.rule_costs(STEPS)
    assert sorted(costs) == sorted({s.rule_name for s in STEPS})
    assert costs["rollout"] is costs["surface_stats"] and costs["rollout_words"] is costs["heads"]
    assert costs["head_report"] is costs["explorer"] is costs["figures"]


def test_syntax_runs_have_the_syntax_steps_only():
    assert [s.name for s in steps.syntax_steps(STEPS)] == ["heads"]
    assert [p.page for p in steps.syntax_pages(STEPS)] == ["table1.html", "head_accuracy.html", "fig5_syntax_heads.png"]


def test_a_step_is_off_when_a_step_it_needs_is(offline_config):
    """`needs`: the explorer reads the report card; with head_report off it is off too, whatever its own key."""
    import copy

    config = copy.deepcopy(offline_config)
    assert steps.switches(config, has_train_split=True, declared=STEPS)["explorer"] is True
    config["head_report"]["enabled"] = False
    on = steps.switches(config, has_train_split=True, declared=STEPS)
    assert on["explorer"] is False and on["head_report"] is False
    assert "explorer.html" not in steps.run_outputs(STEPS, on)


def test_the_optional_fields_are_keywords():
    """A declaration names what it sets beyond a page's source, file, category and label, and beyond a step's
    name and outputs."""
    with pytest.raises(TypeError):
        steps.Page("tables/x.md", "x.html", "Tables", "X", "x.rst")
    with pytest.raises(TypeError):
        steps.Step("toy", ("tables/toy.csv",), ())
    assert steps.figure_page("x.png", "Figures", "X", caption="x.rst").caption_file == "x.rst"
