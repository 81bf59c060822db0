"""The report's captions (workflow/report/*.rst) render the way `snakemake --report` renders them:
Jinja (trim_blocks, lstrip_blocks) with `snakemake` (config, wildcards, params), then docutils; no
caption may produce a docutils system message, and the Fig 3 caption describes what the run shows."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from bertlook.pipeline.config import load_yaml_strict, validate_config
from workflow_helpers import ROOT

CAPTIONS = sorted((ROOT / "workflow" / "report").glob("*.rst"))
# The targets Snakemake appends to every caption (report/__init__.py: rst_links): one per category.
CATEGORIES = ("Tables", "Figures", "Comparison with the paper", "Beyond the paper", "Resources",
              "Comparison across models", "Across languages", "Data files (CSV)")
LINKS = "\n\n" + "\n".join(f".. _{c}: javascript:app.showCategory('{c}')" for c in CATEGORIES) + "\n"


def render(path, config, **params) -> str:
    from docutils.core import publish_parts
    from jinja2 import Environment

    run = f"{config['run_name']}-{config['models'][0]['label']}"
    snakemake = SimpleNamespace(config=config, wildcards=SimpleNamespace(run=run, model=config["models"][0]["label"]),
                                params=SimpleNamespace(**params))
    text = Environment(trim_blocks=True, lstrip_blocks=True).from_string(path.read_text() + LINKS).render(
        snakemake=snakemake)
    return publish_parts(text, writer="html", settings_overrides={"report_level": 2})["body"]  # warnings, errors


def plain(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.mark.parametrize("configfile", ["config.yaml", "config/offline.yaml"])
@pytest.mark.parametrize("caption", CAPTIONS, ids=lambda p: p.stem)
def test_every_caption_renders_without_a_docutils_message(caption, configfile):
    config = validate_config(load_yaml_strict(ROOT / configfile))
    body = render(caption, config, gradients={"status": "ran", "reason": ""})
    assert body.strip() and "system-message" not in body, plain(body)[:2000]
    assert "comparison.md`` of the run" not in caption.read_text()


def test_fig3_caption_says_what_this_run_shows():
    config = validate_config(load_yaml_strict(ROOT / "config/offline.yaml"))
    fig3 = ROOT / "workflow" / "report" / "fig3_sep_gradients.rst"
    ran = plain(render(fig3, config, gradients={"status": "ran", "reason": ""}))
    assert "Left: the average attention" in ran and "Right: the average magnitude" in ran
    assert "did not run" not in ran
    why = "not run: package:x has no masked-LM head (checkpoint lacks cls.predictions.* weights)"
    skipped = plain(render(fig3, config, gradients={"status": "not run", "reason": why}))
    assert "In this run the gradient stage did not run" in skipped and why in skipped
    assert "Left: the average attention" not in skipped and "Right: the average magnitude" not in skipped


def test_fig1_caption_names_the_configured_heads():
    config = validate_config(load_yaml_strict(ROOT / "config/offline.yaml"))
    fig1 = ROOT / "workflow" / "report" / "fig1_example_heads.rst"
    assert "(as in this run)" in plain(render(fig1, config))
    config["figures"]["example_heads"] = ["1-1", "3-1"]
    text = plain(render(fig1, config))
    assert "not in this run: it draws the configured heads 1-1, 3-1" in text
