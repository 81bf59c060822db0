"""Tests for bertlook.paper_reference: the packaged paper numbers are present and well-formed."""

from __future__ import annotations

import pytest

from bertlook import paper_reference as pr
from bertlook.errors import BertlookError

# relation: (head, accuracy, baseline, baseline offset), as printed in Table 1 of the paper
TABLE1 = {
    "All": ("7-6", 34.5, 26.3, 1),
    "prep": ("7-4", 66.7, 61.8, -1),
    "pobj": ("9-6", 76.3, 34.6, -2),
    "det": ("8-11", 94.3, 51.7, 1),
    "nn": ("4-10", 70.4, 70.2, 1),
    "nsubj": ("8-2", 58.5, 45.5, 1),
    "amod": ("4-10", 75.6, 68.3, 1),
    "dobj": ("8-10", 86.8, 40.0, -2),
    "advmod": ("7-6", 48.8, 40.2, 1),
    "aux": ("4-10", 81.1, 71.5, 1),
    "poss": ("7-6", 80.5, 47.7, 1),
    "auxpass": ("4-10", 82.5, 40.5, 1),
    "ccomp": ("8-1", 48.8, 12.4, -2),
    "mark": ("8-2", 50.7, 14.5, 2),
    "prt": ("6-7", 99.1, 91.4, -1),
}

SD_TO_UD = {
    "nn": "compound", "dobj": "obj", "num": "nummod", "auxpass": "aux:pass", "nsubjpass": "nsubj:pass",
    "poss": "nmod:poss", "possessive": "case", "prep": "case", "pobj": ["obl", "nmod"], "prt": "compound:prt",
    "rcmod": "acl:relcl", "partmod": "acl", "tmod": "obl:tmod", "npadvmod": "obl:npmod", "neg": "advmod",
}


def test_table1_numbers_as_printed():
    ref = pr.table1_reference()
    assert list(ref) == list(TABLE1)  # the paper's row order
    for rel, (head, acc, base, off) in TABLE1.items():
        row = ref[rel]
        assert (row["head"], row["accuracy"], row["baseline"], row["baseline_offset"]) == (head, acc, base, off), rel
        assert row["source"] == "Table 1"
        assert row["direction"] == ("head2dep" if rel == "pobj" else "dep2head")
        assert 0 < row["tolerance"] <= 5
        assert row["paper_relation"] == rel
        layer, h = (int(x) for x in row["head"].split("-"))
        assert 1 <= layer <= 12 and 1 <= h <= 12
        assert row["baseline"] <= row["accuracy"] or rel == "auxpass"


def test_auxpass_discrepancy_flagged():
    row = pr.table1_reference()["auxpass"]
    assert row["notebook_accuracy"] == 94.1 and row["notebook_baseline"] == 82.5
    assert "notebook" in row["note"].lower()
    assert all("note" not in r for k, r in pr.table1_reference().items() if k != "auxpass")


def test_load_reference_structure_and_copy():
    doc = pr.load_reference()
    assert doc["meta"]["arxiv"] == "1906.04341"
    assert isinstance(doc["table1"], list) and len(doc["table1"]) == 15
    doc["table1"].clear()
    assert len(pr.load_reference()["table1"]) == 15  # callers get a copy


def test_relation_maps():
    ud = pr.relation_map("ud")
    assert {k: v["target"] for k, v in ud.items()} == SD_TO_UD
    assert ud["prep"]["direction_reversed"] and ud["pobj"]["direction_reversed"]
    assert not ud["nn"]["direction_reversed"]
    clear = pr.relation_map("clearnlp")
    assert {k: v["target"] for k, v in clear.items()} == {"nn": "compound", "num": "nummod", "possessive": "case"}
    assert pr.relation_map("sd") == {}
    with pytest.raises(BertlookError):
        pr.relation_map("conll")


def test_table1_reference_renamed_per_scheme():
    ud = pr.table1_reference("ud")
    assert "obj" in ud and "dobj" not in ud and ud["obj"]["paper_relation"] == "dobj"
    assert ud["compound"]["head"] == "4-10" and ud["aux:pass"]["paper_relation"] == "auxpass"
    assert "prep" not in ud and "pobj" not in ud and "case" not in ud  # arcs reversed in UD
    assert ud["compound:prt"]["accuracy"] == 99.1 and ud["nmod:poss"]["head"] == "7-6"
    clear = pr.table1_reference("clearnlp")
    assert "compound" in clear and "nn" not in clear
    assert {"dobj", "pobj", "prep", "poss", "auxpass", "All"} <= set(clear)
    with pytest.raises(BertlookError):
        pr.table1_reference("xx")


# system: (all, pronoun, proper, nominal), as printed in Table 2 of the paper
TABLE2 = {
    "nearest": (27, 29, 29, 19),
    "head_match": (52, 47, 67, 40),
    "rule_based": (69, 70, 77, 60),
    "neural": (83, None, None, None),
    "best_head": (65, 64, 73, 58),
}


def test_table2_numbers_as_printed():
    ref = pr.table2_reference()
    assert list(ref) == list(TABLE2)  # the paper's row order
    for system, values in TABLE2.items():
        row = ref[system]
        assert (row["all"], row["pronoun"], row["proper"], row["nominal"]) == values, system
        assert row["source"] == "Table 2" and row["system"] == system
    assert ref["best_head"]["head"] == "5-4" and "head" not in ref["nearest"]
    assert "untruncated" in ref["neural"]["note"]
    ref["nearest"]["all"] = 0
    assert pr.table2_reference()["nearest"]["all"] == 27  # callers get a copy
    assert len(pr.load_reference()["table1"]) == 15  # table1 untouched


def test_table2_validation():
    good = pr.load_reference()
    pr._validate(good)
    for bad_row, msg in [
        ({"system": "oracle", "source": "x", "all": 1, "pronoun": 1, "proper": 1, "nominal": 1}, "unknown system"),
        ({"system": "nearest", "source": "x", "all": 101, "pronoun": 1, "proper": 1, "nominal": 1}, "percentage"),
        ({"system": "head_match", "source": "x", "all": 1, "pronoun": None, "proper": 1, "nominal": 1}, "percentage"),
        ({"system": "best_head", "source": "x", "head": "5", "all": 1, "pronoun": 1, "proper": 1, "nominal": 1},
         "L-H"),
    ]:
        doc = pr.load_reference()
        doc["table2"] = [bad_row]
        with pytest.raises(BertlookError, match=msg):
            pr._validate(doc)
    doc = pr.load_reference()
    doc["table2"] = doc["table2"][:1] * 2
    with pytest.raises(BertlookError, match="twice"):
        pr._validate(doc)
