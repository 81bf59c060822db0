"""The rule files stay small and say each thing once (issue 41): common.smk holds only what several steps
share (<= 250 lines), a rule states its inputs, outputs, log, benchmark and command and takes the rest from
the templates of workflow/Snakefile (median rule body <= 20 lines), no block of 10 lines appears in two rule
files, and every rule gets its resources one way (step_resources, through the templates). Each measurement
is also run on a hand-made bad input, so that it can fail."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from workflow_helpers import ROOT

RULES_DIR = ROOT / "workflow" / "rules"
COMMON_MAX_LINES = 250
MEDIAN_RULE_MAX_LINES = 20
SHARED_BLOCK_LINES = 10
RULE_START = re.compile(r"^([ \t]*)(?:rule (\w+):|use rule \w+ as (\w+)\b)")


def rule_files() -> list[Path]:
    """Every file that holds rules or their functions: workflow/Snakefile and workflow/rules/**/*.smk."""
    return [ROOT / "workflow" / "Snakefile", *sorted(RULES_DIR.rglob("*.smk"))]


def _code(line: str) -> bool:
    return bool(line.strip()) and not line.strip().startswith("#")


def rule_bodies(text: str) -> dict[str, list[str]]:
    """rule name -> its body: the lines from its `rule NAME:` / `use rule BASE as NAME` line up to the next
    statement as little indented as that line, without blank and comment lines."""
    lines = text.splitlines()
    out = {}
    i = 0
    while i < len(lines):
        m = RULE_START.match(lines[i])
        if not m:
            i += 1
            continue
        indent, body = len(m.group(1)), [lines[i]]
        i += 1
        while i < len(lines) and not (_code(lines[i]) and len(lines[i]) - len(lines[i].lstrip()) <= indent):
            body.append(lines[i])
            i += 1
        out[m.group(2) or m.group(3)] = [line for line in body if _code(line)]
    return out


def median_rule_lines(texts: list[str]) -> float:
    """Median body length of the rules (templates, `_name`, and `all` left out) of ``texts``."""
    sizes = [len(body) for text in texts for name, body in rule_bodies(text).items()
             if not name.startswith("_") and name != "all"]
    assert sizes, "no rules found"
    return statistics.median(sizes)


def shared_blocks(texts: dict[str, str], size: int = SHARED_BLOCK_LINES) -> list[tuple[str, str, str]]:
    """(file, file, first line) of every run of ``size`` code lines (whitespace normalised) that two
    different files hold."""
    seen: dict[tuple[str, ...], str] = {}
    found = []
    for name, text in texts.items():
        lines = [" ".join(line.split()) for line in text.splitlines() if _code(line)]
        for i in range(len(lines) - size + 1):
            block = tuple(lines[i:i + size])
            other = seen.setdefault(block, name)
            if other != name:
                found.append((other, name, block[0]))
    return found


def code_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


# ---- the real files ------------------------------------------------------------------------------


def test_common_smk_keeps_what_several_steps_share():
    lines = code_lines(RULES_DIR / "common.smk")
    assert lines <= COMMON_MAX_LINES, f"workflow/rules/common.smk: {lines} lines > {COMMON_MAX_LINES}"
    # a step's own functions live beside its rules (functions/<step>.smk), not here
    for helper in ("treebank_flags", "heads_inputs", "probes_inputs", "coref_input_files", "languages_flags",
                   "summary_report_pages"):
        assert f"def {helper}(" not in (RULES_DIR / "common.smk").read_text(), helper


def test_median_rule_fits_on_a_screen():
    median = median_rule_lines([path.read_text() for path in rule_files()])
    assert median <= MEDIAN_RULE_MAX_LINES, f"median rule body {median} lines > {MEDIAN_RULE_MAX_LINES}"


def test_no_block_of_ten_lines_in_two_rule_files():
    found = shared_blocks({path.name if path.parent == RULES_DIR else str(path.relative_to(ROOT)): path.read_text()
                           for path in rule_files()})
    assert not found, "the same block in two rule files: " + "; ".join(f"{a} / {b}: {line!r}" for a, b, line in found)


def test_every_step_rule_is_made_from_a_template():
    """A rule of workflow/rules/*.smk is `use rule _<template> as NAME` (or a copy of such a rule): its env,
    threads, resources and shell line come from the template; it never sets resources itself."""
    snakefile = (ROOT / "workflow" / "Snakefile").read_text()
    templates = {a or b for a, b in re.findall(r"^(?:rule (_\w+):|use rule \w+ as (_\w+)\b)", snakefile, flags=re.M)}
    assert {"_analysis_step", "_torch_step", "_model_step", "_download"} <= templates
    for path in sorted(RULES_DIR.glob("*.smk")):
        if path.name in ("common.smk", "rule_helpers.smk"):  # the shared helpers, no rules
            continue
        text = path.read_text()
        assert not re.search(r"^[ \t]*rule \w+:", text, flags=re.M), f"{path.name}: a rule not made from a template"
        for directive in ("resources:", "conda:", "shell:"):
            assert not re.search(rf"^[ \t]+{directive}", text, flags=re.M), f"{path.name}: {directive} in a rule"
        assert "snakemake_resources" not in text, f"{path.name}: resources other than through step_resources"


# ---- the measurements fail on bad input ----------------------------------------------------------

LONG_RULE = "rule long:\n" + "".join(f"    # note {i}\n    x{i}=1,\n\n" for i in range(25))
SHORT_RULE = "use rule _analysis_step as short with:\n    output:\n        'a',\n"


def test_rule_bodies_count_code_lines_up_to_the_next_statement():
    text = LONG_RULE + "\n\n" + SHORT_RULE + "\n\nif x:\n\n    use rule short as nested with:\n        log:\n" \
           "            'l',\n\n\nX = 1\n"
    bodies = rule_bodies(text)
    assert {name: len(body) for name, body in bodies.items()} == {"long": 26, "short": 3, "nested": 3}
    assert median_rule_lines([LONG_RULE, LONG_RULE, SHORT_RULE]) == 26 > MEDIAN_RULE_MAX_LINES


def test_a_shared_block_is_found():
    block = "".join(f"    flag_{i}=config['x']['{i}'],\n" for i in range(SHARED_BLOCK_LINES))
    a = "rule a:\n    params:\n" + block
    b = "rule b:\n    input:\n        'in',\n    params:\n" + block.replace("    ", "  ")  # other indentation
    assert shared_blocks({"a.smk": a, "b.smk": b})
    nine = block[: block.rindex("    flag")]  # one line short of a shared block
    assert not shared_blocks({"a.smk": a, "b.smk": "rule b:\n    input:\n" + nine})


def test_common_smk_limit_fails_on_a_long_file(tmp_path):
    long = tmp_path / "common.smk"
    long.write_text("X = 1\n" * (COMMON_MAX_LINES + 1))
    assert code_lines(long) > COMMON_MAX_LINES
