"""Tests for bertlook.reporting.paper_reference: the packaged paper numbers are present and well-formed."""

from __future__ import annotations

import pytest

from bertlook.reporting import paper_reference as pr
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


# probe: UAS (percent) as printed in Table 3 of the paper
TABLE3 = {
    "right_branching": 26,
    "distances_glove": 58,
    "random_init_attn_glove": 30,
    "attn": 61,
    "attn_glove": 77,
    "attn_glove_released": 77,
    "structural_probe": 80,
}


def test_table3_numbers_as_printed():
    ref = pr.table3_reference()
    assert list(ref) == list(TABLE3)  # the paper's row order, then the released-code and context rows
    for probe, uas in TABLE3.items():
        row = ref[probe]
        assert row["uas"] == uas and row["source"] == "Table 3" and row["probe"] == probe, probe
        assert 0 < row["tolerance"] <= 5
    assert ref["attn_glove"]["printed_by_code"] == 78.0
    assert all("printed_by_code" not in r for k, r in ref.items() if k != "attn_glove")
    assert "off-by-one" in ref["attn_glove_released"]["note"]
    assert ref["structural_probe"]["comparable"] is False and ref["structural_probe"]["metric"] == "UUAS"
    assert all(r["comparable"] is True for k, r in ref.items() if k != "structural_probe")
    # the probes module's ids are the reference's ids
    from bertlook.analyses.probes.catalogue import OWN_PROBES, PROBES

    paper_probes = [p for p in PROBES if p not in OWN_PROBES]  # the controls are bertlook's (issues 14, 16)
    assert set(paper_probes) <= set(ref) and not set(OWN_PROBES) & set(ref)
    assert {p: ref[p]["uas"] for p in paper_probes} == {
        "right_branching": 26.0, "distances_glove": 58.0, "random_init_attn_glove": 30.0,
        "attn": 61.0, "attn_glove": 77.0, "attn_glove_released": 77.0}


def test_figure_facts_present():
    facts = {f["id"]: f for f in pr.figure_facts()}
    assert list(facts) == ["sep_share_layers_6_10", "sep_to_sep", "prev_token_heads", "next_token_heads",
                           "last_layer_cls_entropy", "broad_heads_max_attention"]
    sep = facts["sep_share_layers_6_10"]
    assert sep["metric"] == {"stat": "sep", "aggregate": "mean", "layers": [6, 10]}
    assert (sep["op"], sep["value"]) == (">", 0.5) and "Figure 2" in sep["source"]
    sep_sep = facts["sep_to_sep"]
    assert sep_sep["metric"]["stat"] == "sep_sep" and sep_sep["metric"]["layers"] is None
    assert (sep_sep["op"], sep_sep["value"]) == (">", 0.9) and "scope_note" in sep_sep
    for fid, stat, n in (("prev_token_heads", "prev", 4), ("next_token_heads", "next", 5)):
        f = facts[fid]
        assert f["metric"]["stat"] == stat and f["metric"]["aggregate"] == "count_above"
        assert f["metric"]["threshold"] == 0.5 and (f["op"], f["value"], f["tolerance"]) == ("==", n, 1)
    cls = facts["last_layer_cls_entropy"]
    assert cls["metric"] == {"stat": "cls_entropy", "aggregate": "mean", "layers": "last"}
    assert (cls["op"], cls["value"], cls["tolerance"]) == ("==", 3.89, 0.3)
    broad = facts["broad_heads_max_attention"]
    assert broad["metric"]["where"] == {"stat": "entropy", "op": ">", "value": 3.8}
    assert (broad["op"], broad["value"]) == ("<=", 0.1)
    for f in facts.values():  # every number has a source and a tolerance
        assert f["source"] and f["description"] and f["tolerance"] >= 0


def test_every_number_has_source_and_tolerance():
    doc = pr.load_reference()
    for section in ("table1", "table2", "table3", "figure_facts"):
        for row in doc[section]:
            assert row.get("source"), (section, row)
            assert isinstance(row.get("tolerance"), (int, float)), (section, row)


def _expect_invalid(mutate, msg):
    doc = pr.load_reference()
    mutate(doc)
    with pytest.raises(BertlookError, match=msg):
        pr._validate(doc)


def test_table2_needs_tolerance():
    _expect_invalid(lambda d: d["table2"][0].pop("tolerance"), "tolerance")


def test_table3_validation():
    _expect_invalid(lambda d: d["table3"][0].pop("tolerance"), "lacks tolerance")
    _expect_invalid(lambda d: d["table3"][1].pop("source"), "lacks source")
    _expect_invalid(lambda d: d["table3"][0].update(uas=260), "percentage")
    _expect_invalid(lambda d: d["table3"][4].update(printed_by_code="78"), "printed_by_code")
    _expect_invalid(lambda d: d["table3"][0].update(tolerance=-1), "tolerance")
    _expect_invalid(lambda d: d["table3"][6].update(comparable="no"), "comparable")
    _expect_invalid(lambda d: d["table3"].append(dict(d["table3"][0])), "twice")
    _expect_invalid(lambda d: d.update(table3=[]), "non-empty list")


def test_figure_facts_validation():
    _expect_invalid(lambda d: d["figure_facts"][0].pop("tolerance"), "lacks tolerance")
    _expect_invalid(lambda d: d["figure_facts"][0].pop("source"), "lacks source")
    _expect_invalid(lambda d: d["figure_facts"][0].update(source=" "), "empty `source`")
    _expect_invalid(lambda d: d["figure_facts"][0].update(op="~"), "op '~'")
    _expect_invalid(lambda d: d["figure_facts"][0].update(value="half"), "`value` must be a number")
    _expect_invalid(lambda d: d["figure_facts"][0]["metric"].update(aggregate="median"), "aggregate 'median'")
    _expect_invalid(lambda d: d["figure_facts"][2]["metric"].pop("threshold"), "threshold")
    _expect_invalid(lambda d: d["figure_facts"][0]["metric"].update(layers=[10, 6]), "layers")
    _expect_invalid(lambda d: d["figure_facts"][0]["metric"].update(layers="first"), "layers")
    _expect_invalid(lambda d: d["figure_facts"][1]["metric"].update(reference_layers=[0, 3]), "reference_layers")
    _expect_invalid(lambda d: d["figure_facts"][5]["metric"].update(where={"stat": "entropy", "op": "=="}), "where")
    _expect_invalid(lambda d: d["figure_facts"][0].update(metric="mean sep"), "`stat`")
    _expect_invalid(lambda d: d["figure_facts"].append(dict(d["figure_facts"][0])), "twice")
    with pytest.raises(BertlookError, match="figure fact"):
        doc = pr.load_reference()
        doc["figure_facts"][3]["tolerance"] = -0.5
        pr._validate(doc)


def test_table3_and_facts_are_copies():
    pr.table3_reference()["attn"]["uas"] = 0
    pr.figure_facts()[0]["metric"]["layers"] = [1, 2]
    assert pr.table3_reference()["attn"]["uas"] == 61
    assert pr.figure_facts()[0]["metric"]["layers"] == [6, 10]
