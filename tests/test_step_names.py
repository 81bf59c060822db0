"""One name per step: docs/DESIGN.md "## Steps: one name each" against the real code.

The table lists every subcommand of ``bertlook`` with its rules, .smk file(s), CLI module, computation
modules and outputs. Checked here: the table and the parser list the same subcommands; the table and
workflow/rules/*.smk the same rules, each defined in the .smk file the table names and running that
subcommand; the CLI module registers the subcommand (and holds its handler); the modules exist; and
the naming rule: .smk stem == subcommand with `-` -> `_` == CLI module stem == the main rule, the
step's other rules being `<main rule>_<suffix>`, except in the rows whose last column says why not.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

import pytest

from test_envs import workflow_rules
from workflow_helpers import ROOT as REPO

ROOT = Path(os.environ.get("BERTLOOK_DOCS_ROOT") or REPO)
DESIGN = ROOT / "docs" / "DESIGN.md"
RULES_DIR = ROOT / "workflow" / "rules"
PKG_DIR = ROOT / "src" / "bertlook"
SECTION = "## Steps: one name each"
COLUMNS = ["step (subcommand)", "rules", ".smk file", "CLI module", "computation module(s)", "outputs",
           "exception"]


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def parse_table(text: str) -> list[dict]:
    """Rows of the first table after SECTION: column -> cell text, plus the parsed name lists."""
    assert SECTION in text, f"docs/DESIGN.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    assert len(lines) > 2, f"{SECTION}: no table"
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == COLUMNS, f"{SECTION}: columns {header}, expected {COLUMNS}"
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(COLUMNS), f"{SECTION}: {len(cells)} cells in {line!r}"
        row = dict(zip(COLUMNS, cells))
        steps = _names(row["step (subcommand)"])
        assert len(steps) == 1, f"{SECTION}: one step per row: {line!r}"
        row.update(step=steps[0], rules=_names(row["rules"]), smk=_names(row[".smk file"]),
                   cli=_names(row["CLI module"]), modules=_names(row["computation module(s)"]),
                   why=row["exception"].strip())
        assert len(row["cli"]) == 1, f"{row['step']}: one CLI module"
        rows.append(row)
    return rows


@lru_cache(maxsize=None)
def table() -> tuple[dict, ...]:
    return tuple(parse_table(DESIGN.read_text()))


@lru_cache(maxsize=None)
def subcommands() -> dict:
    from bertlook import cli

    try:
        parser = cli.build_parser(full=True)  # every step module registered, not stubs
    except TypeError:  # a parser without lazy loading
        parser = cli.build_parser()
    return next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices


def defined_rules(smk_text: str) -> list[str]:
    """Rules a .smk file defines: `rule NAME:` and `use rule BASE as NAME`."""
    return re.findall(r"^[ \t]*(?:rule (\w+):|use rule \w+ as (\w+)\b)", smk_text, flags=re.M)


def _defined(smk_text: str) -> set[str]:
    return {a or b for a, b in defined_rules(smk_text)}


def naming_problems(row: dict) -> list[str]:
    """How a step with rules breaks the naming rule (empty: it follows it)."""
    stem = row["step"].replace("-", "_")
    out = []
    if row["smk"] != [f"{stem}.smk"]:
        out.append(f".smk file {row['smk']} is not {stem}.smk")
    if row["cli"] != [f"cli/{stem}.py"]:
        out.append(f"CLI module {row['cli']} is not cli/{stem}.py")
    if stem not in row["rules"]:
        out.append(f"no main rule {stem} among {row['rules']}")
    out += [f"rule {r} is neither {stem} nor {stem}_SUFFIX" for r in row["rules"]
            if r != stem and not r.startswith(stem + "_")]
    return out


def test_the_table_parses():
    rows = table()
    steps = [r["step"] for r in rows]
    assert len(steps) == len(set(steps)), "a step listed twice"
    assert {"segments", "extract-segments", "cluster-heads", "surface-stats"} <= set(steps)


def unlisted_row(step: str) -> dict:
    """The row a subcommand missing from the table would have if it follows the naming rule: its
    ``<stem>.smk`` and ``cli/<stem>.py`` and the rules that file defines."""
    stem = step.replace("-", "_")
    smk = RULES_DIR / f"{stem}.smk"
    rules = sorted(_defined(smk.read_text())) if smk.is_file() else []
    cli = f"cli/{stem}.py" if f'"{step}"' in ((PKG_DIR / "cli" / f"{stem}.py").read_text()
                                             if (PKG_DIR / "cli" / f"{stem}.py").is_file() else "") else "?"
    return {"step": step, "rules": rules, "smk": [smk.name] if rules else [], "cli": [cli], "why": ""}


def test_every_subcommand_is_in_the_table_or_follows_the_naming_rule():
    listed = {r["step"] for r in table()}
    real = set(subcommands())
    for step in sorted(real - listed):
        row = unlisted_row(step)
        problems = naming_problems(row) if row["rules"] else ["no rule file"]
        assert not problems, (f"subcommand {step} is missing from docs/DESIGN.md and breaks the naming rule: "
                              + "; ".join(problems))
    assert not listed - real, f"docs/DESIGN.md lists steps that are no subcommand: {sorted(listed - real)}"


def test_every_rule_is_in_the_table_once():
    listed = [rule for r in table() for rule in r["rules"]]
    assert len(listed) == len(set(listed)), "a rule listed under two steps"
    unlisted = {rule for step in set(subcommands()) - {r["step"] for r in table()}
                for rule in unlisted_row(step)["rules"]}
    real = set()
    for smk in RULES_DIR.glob("*.smk"):
        real |= _defined(smk.read_text())
    assert real, "no rules found in workflow/rules"
    missing = real - set(listed) - unlisted
    assert not missing, f"rules missing from docs/DESIGN.md: {sorted(missing)}"
    assert not set(listed) - real, f"docs/DESIGN.md lists rules that do not exist: {sorted(set(listed) - real)}"


@pytest.mark.parametrize("row", table(), ids=lambda r: r["step"])
def test_smk_files_define_the_rules_which_run_the_step(row):
    assert bool(row["rules"]) == bool(row["smk"]), f"{row['step']}: rules and .smk files go together"
    if not row["rules"]:
        assert row["why"], f"{row['step']}: a step without a rule says why in the exception column"
        return
    defined = {}
    for name in row["smk"]:
        path = RULES_DIR / name
        assert path.is_file(), f"{row['step']}: workflow/rules/{name} does not exist"
        rules = _defined(path.read_text())
        assert rules & set(row["rules"]), f"{row['step']}: {name} defines none of {row['rules']}"
        defined.update({rule: name for rule in rules})
    steps = {r.name: r.step for r in workflow_rules()}
    for rule in row["rules"]:
        assert rule in defined, f"{row['step']}: rule {rule} is not defined in {row['smk']}"
        assert steps[rule] == row["step"], f"rule {rule} runs `bertlook {steps[rule]}`, not {row['step']}"


@pytest.mark.parametrize("row", table(), ids=lambda r: r["step"])
def test_cli_module_registers_the_step(row):
    (cli,) = row["cli"]
    path = PKG_DIR / cli
    assert path.is_file(), f"{row['step']}: src/bertlook/{cli} does not exist"
    assert f'"{row["step"]}"' in path.read_text(), f"src/bertlook/{cli} does not name \"{row['step']}\""
    handler = subcommands()[row["step"]].get_default("func")
    module = "bertlook." + cli[: -len(".py")].replace("/", ".")
    assert handler.__module__ == module, f"{row['step']}: handler in {handler.__module__}, table says {module}"


@pytest.mark.parametrize("row", table(), ids=lambda r: r["step"])
def test_computation_modules_exist(row):
    assert row["modules"], f"{row['step']}: no computation module"
    for module in row["modules"]:
        assert (PKG_DIR / module).is_file(), f"{row['step']}: src/bertlook/{module} does not exist"


@pytest.mark.parametrize("row", [r for r in table() if r["rules"]], ids=lambda r: r["step"])
def test_one_name_per_step(row):
    problems = naming_problems(row)
    if row["why"]:
        assert problems, f"{row['step']} follows the naming rule: drop its exception ({row['why']!r})"
    else:
        assert not problems, f"{row['step']}: " + "; ".join(problems) + " (rename, or say why in docs/DESIGN.md)"


def test_the_checks_fail_on_a_wrong_name():
    """Self-check: the naming rule and the table parser catch a renamed file, module or rule."""
    row = next(r for r in table() if r["step"] == "cluster-heads")
    assert not naming_problems(row)
    assert naming_problems({**row, "smk": ["cluster.smk"]})
    assert naming_problems({**row, "cli": ["cli/clustering.py"]})
    assert naming_problems({**row, "rules": ["js_divergence_shard", "cluster_heads"]})
    assert naming_problems({**row, "rules": ["cluster_heads_shard", "clusters"]})
    assert not naming_problems(unlisted_row("cluster-heads"))  # as if it had no row
    assert naming_problems(unlisted_row("coref-extract"))  # coref.smk, cli/coref.py: needs its row
    text = DESIGN.read_text().replace("| `cluster-heads` |", "| `cluster` |")
    assert "cluster" in {r["step"] for r in parse_table(text)}
    assert defined_rules("use rule merge_words as merge_words_random with:\n") == [("", "merge_words_random")]
