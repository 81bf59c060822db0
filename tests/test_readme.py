"""The README is a front door (issue 28): short, the two commands on its first screen, every link alive, every
number either checked here against the file that holds it or dated.

Table 1 and Table 3 "at a glance" are compared with tests/golden/offline-minilm.json (the numbers `make check`
guards) and with the paper's numbers in bertlook/reporting/paper_reference.yaml."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
GOLDEN = json.loads((ROOT / "tests" / "golden" / "offline-minilm.json").read_text())["groups"]
PAPER = yaml.safe_load((ROOT / "src" / "bertlook" / "reporting" / "paper_reference.yaml").read_text())
ARROW = {"dep2head": "d→h", "head2dep": "h→d"}


def _table(marker: str) -> list[list[str]]:
    block = README.split(f"<!-- {marker}: checked by tests/test_readme.py -->", 1)[1].strip().split("\n\n", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.splitlines()]
    return rows[2:]  # header and rule


def _golden(group: str, key: str):
    value = GOLDEN[group]["values"][key]
    return value["value"] if isinstance(value, dict) else value


def test_short_with_the_two_commands_first():
    lines = README.splitlines()
    assert len(lines) <= 250, len(lines)
    first_screen = "\n".join(lines[:25])
    assert "make demo" in first_screen and "make test" in first_screen


def test_table1_at_a_glance_matches_the_golden_file_and_the_paper():
    rows = _table("table1")
    assert len(rows) >= 5
    paper = {r["relation"]: r for r in PAPER["table1"]}
    for relation, head, acc, baseline, paper_head, paper_acc, paper_base in rows:
        where = f"README Table 1 row {relation}"
        g = lambda k: _golden("table1", f"{relation}/{k}")  # noqa: E731
        assert head == f"{g('best_head')} {ARROW[g('direction')]}", where
        assert acc == f"{100 * g('accuracy'):.1f}", where
        offset = int(g("baseline_offset"))
        assert baseline == f"{100 * g('baseline_accuracy'):.1f} ({offset:+d})", where
        p = paper[relation]
        assert paper_head == f"{p['head']} {ARROW[p['direction']]}", where
        assert float(paper_acc) == p["accuracy"] and float(paper_base) == p["baseline"], where


def test_table3_at_a_glance_matches_the_golden_file_and_the_paper():
    rows = _table("table3")
    paper = {r["label"]: r for r in PAPER["table3"]}
    for label, offline, paper_uas in rows:
        p = paper[label]
        assert offline == f"{100 * _golden('table3', p['probe'] + '/uas_mean'):.1f}", label
        assert float(paper_uas) == p["uas"], label


def test_every_relative_link_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local, "no relative link found"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing


@pytest.mark.parametrize("paragraph", [p for p in README.split("\n\n") if re.search(r"\d+ min \d+ s", p)])
def test_every_timing_is_dated(paragraph):
    assert re.search(r"20\d\d-\d\d-\d\d", paragraph), paragraph
