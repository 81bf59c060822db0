"""One model of an atlas (:mod:`bertlook.reporting.atlas`), read from its run directory ``results/{run}/``.

:func:`run_status` says whether the model ran (its ``manifest.json`` is there), did not run (the first
``error:`` line of its logs, newest log first) or was not run yet. :func:`model_metrics` reads what the run
wrote -- Table 1 with its offset baselines, Table 3's probe UAS, the surface statistics per layer, the head
detectors' summary and the behaviour labels of the Jensen-Shannon clustering -- into one record of numbers
per metric and profiles per layer; a table the run does not have leaves its metrics empty (None), a table
it has but that cannot be read is a ``problem`` of the record, never a failure of the atlas. Nothing is
recomputed from maps.

Token roles are named for the model's family (:func:`token_roles`): the share the tables call ``cls`` is the
first token's ([CLS] for an encoder, BOS or the first word for a decoder: which one, this run's segments say),
``sep`` the [SEP] / EOS token's.

Definitions: docs/guide/outputs.md#the-atlas
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable

from bertlook.errors import BertlookError
from bertlook.io_utils import read_csv_strings
from bertlook.reporting.formatting import pct
from bertlook.reporting.run_files import (CLUSTERS_CSV, MANIFEST, STATS_CSV, TABLE1_CSV, TABLE3_CSV,
                                          parse_number, read_json_file)

RAN, FAILED, INCOMPLETE, NOT_RUN = "ran", "did not run", "incomplete", "not run yet"
DETECTORS_JSON = "tables/head_detectors.summary.json"
STATS_SUMMARY = "tables/attention_stats.summary.json"
SEGMENTS = "corpus/segments.jsonl"
DETECTORS = (("prev_token", "previous-token"), ("duplicate_token", "duplicate-token"), ("induction", "induction"))
PROFILE_COLUMNS = (("first_share", "cls"), ("sep_share", "sep"), ("entropy", "entropy"))
#: the behaviour labels of the clustering, by role (the tables' "[CLS]" / "[SEP]" are a decoder's first / EOS token)
BEHAVIOUR_NAMES = {"[CLS]": "first token", "[SEP]": "[SEP] / EOS"}
_ERROR_LINE = re.compile(r"^\s*error:\s*(.+?)\s*$")
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)?(Error|Exception|Interrupt)\b: ")


def _log_files(run_dir: Path) -> list[Path]:
    """``run_dir/logs/**/*.log``, the newest first (ties by name)."""
    logs = [p for p in (run_dir / "logs").rglob("*.log") if p.is_file()] if (run_dir / "logs").is_dir() else []
    return sorted(logs, key=lambda p: (-p.stat().st_mtime, str(p)))


def first_error_line(run_dir: Path) -> str | None:
    """Why a run failed, from its logs (newest first): the first line starting ``error:`` (bertlook's own
    errors), else the last exception line of a Python traceback (``torch.OutOfMemoryError: ...``); the log
    named. None when no log holds either."""
    found: list[tuple[int, str]] = []
    for path in _log_files(run_dir):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        hit = next((m.group(1) for m in map(_ERROR_LINE.match, lines) if m), None)
        if hit:
            return f"{path.relative_to(run_dir)}: {hit}"
        exc = [line.strip() for line in lines if _EXCEPTION_LINE.match(line)]
        if exc:
            found.append((0, f"{path.relative_to(run_dir)}: {exc[-1]}"))
    return found[0][1][:500] if found else None


def run_status(run_dir: Path) -> tuple[str, str | None]:
    """``(status, reason)``: :data:`RAN` (manifest.json written, the run's last step), :data:`FAILED` with the
    first error line of its logs, :data:`INCOMPLETE` (outputs but no manifest and no error line: stopped or
    still running) or :data:`NOT_RUN` (no run directory, or an empty one)."""
    if (run_dir / MANIFEST).is_file():
        return RAN, None
    if not run_dir.is_dir():
        return NOT_RUN, None
    reason = first_error_line(run_dir)
    if reason:
        return FAILED, reason
    if any(run_dir.iterdir()):
        return INCOMPLETE, "no manifest.json and no error: line in its logs (stopped, or still running)"
    return NOT_RUN, None


def thirds(num_layers: int) -> dict[str, tuple[int, int]]:
    """1-indexed inclusive layer ranges of the early, middle and late thirds (12 layers: 1-4, 5-8, 9-12; the
    middle third of :func:`bertlook.reporting.models_summary.middle_third`); a third with no layer is left out."""
    k = num_layers // 3
    out = {"early": (1, k), "middle": (k + 1, num_layers - k), "late": (num_layers - k + 1, num_layers)}
    return {name: (lo, hi) for name, (lo, hi) in out.items() if lo <= hi}


def relative_depth(layer: int, num_layers: int) -> float:
    """Layer ``layer`` (1-based) of ``num_layers`` at its centre on a 0..1 depth axis: ``(layer - 0.5) / L``."""
    return (layer - 0.5) / num_layers


def _segment_first_tokens(run_dir: Path) -> dict[str, int]:
    """How many of the run's segments start with each token (corpus/segments.jsonl); {} without the file."""
    counts: dict[str, int] = {}
    path = run_dir / SEGMENTS
    if not path.is_file():
        return counts
    with open(path, encoding="utf-8") as fh:
        for k, line in enumerate(fh, 1):
            if line.strip():
                try:
                    tokens = json.loads(line).get("tokens") or [""]
                except (ValueError, AttributeError):
                    raise BertlookError(f"{path}:{k}: not a JSON object") from None
                counts[str(tokens[0])] = counts.get(str(tokens[0]), 0) + 1
    return counts


def token_roles(run_dir: Path, kind: str, stats_summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The two token roles of the surface statistics named for this model: ``first`` (what column ``cls``
    measures) and ``sep``, each with the model's actual ``token`` (None: none) and a ``note``."""
    special = stats_summary.get("special_tokens") or {}
    n = stats_summary.get("n_examples")
    no_sep = next((v for k, v in (stats_summary.get("excluded_from_column") or {}).items() if k.startswith("sep_sep")),
                  None)
    sep_token = special.get("sep")
    sep_note = "" if sep_token else "the tokenizer has none: a share of 0"
    if sep_token and n and no_sep == n:
        sep_note = f"in none of the {n} segments: a share of 0"
    if kind != "decoder":
        return {"first": {"token": special.get("cls"), "note": "the encoder's [CLS] token"},
                "sep": {"token": sep_token, "note": sep_note or "the encoder's [SEP] tokens"}}
    firsts = _segment_first_tokens(run_dir)
    if len(firsts) == 1:
        token, note = next(iter(firsts)), f"every segment starts with it (BOS), {sum(firsts.values())} segments"
    elif firsts:
        token, note = None, f"the first word (no BOS): {len(firsts)} different first tokens"
    else:
        token, note = None, "the first token (position 0); the run keeps no segments to say which"
    return {"first": {"token": token, "note": note}, "sep": {"token": sep_token, "note": sep_note or "the EOS token"}}


def _guard(record: dict[str, Any], what: str, read: Callable[[], None]) -> None:
    """Run ``read``; a table that cannot be read is a problem of ``record``, not of the atlas."""
    try:
        read()
    except (BertlookError, OSError, ValueError, KeyError, TypeError, IndexError) as err:
        record["problems"].append(f"{what}: {err}")


def _table1(record: dict[str, Any], run_dir: Path) -> None:
    path = run_dir / TABLE1_CSV
    if not path.is_file():
        return
    df = read_csv_strings(path, required=("relation", "best_head", "direction", "accuracy", "baseline_offset",
                                          "baseline_accuracy"), what="Table 1")
    for i, r in df.iterrows():
        where, rel = f"{path}:{i + 2}", r["relation"].strip()
        acc, base = parse_number(r["accuracy"], where), parse_number(r["baseline_accuracy"], where)
        offset = parse_number(r["baseline_offset"], where)
        sig = str(r.get("vs_baseline_significant", "")).strip()
        visible = parse_number(r.get("accuracy_visible"), where)  # a decoder's: over the words its head can see
        record["values"][f"t1:{rel}"] = _num(acc)
        record["values"][f"t1_baseline:{rel}"] = _num(base)
        record["details"][f"t1:{rel}"] = (f"head {r['best_head'].strip()} {r['direction'].strip()}; baseline "
                                          f"offset {offset:+.0f}: {pct(base)}" + ("%" if base == base else "")
                                          + (f"; significantly above it (McNemar, Holm): {sig}" if sig else "")
                                          + (f"; over the words it can see (causal): {pct(visible)}%"
                                             if visible == visible else ""))
        if sig in ("True", "False"):
            record["flags"][f"t1:{rel}"] = "above" if sig == "True" else "not above"
        record["details"][f"t1_baseline:{rel}"] = f"offset {offset:+.0f}" if offset == offset else ""


def _table3(record: dict[str, Any], run_dir: Path) -> None:
    path = run_dir / TABLE3_CSV
    if not path.is_file():
        return
    df = read_csv_strings(path, required=("probe", "uas_mean"), what="Table 3")
    for i, r in df.iterrows():
        record["values"][f"probe:{r['probe'].strip()}"] = _num(parse_number(r["uas_mean"], f"{path}:{i + 2}"))
        record["details"][f"probe:{r['probe'].strip()}"] = str(r.get("note", "")).strip()[:200]


def _stats(record: dict[str, Any], run_dir: Path) -> None:
    path = run_dir / STATS_CSV
    if not path.is_file():
        return
    df = read_csv_strings(path, required=("layer", "head", *(c for _, c in PROFILE_COLUMNS)),
                          what="attention statistics")
    sums: dict[str, dict[int, list[float]]] = {key: {} for key, _ in PROFILE_COLUMNS}
    for i, r in df.iterrows():
        layer = int(r["layer"])
        for key, col in PROFILE_COLUMNS:
            v = parse_number(r[col], f"{path}:{i + 2}")
            if v == v:
                sums[key].setdefault(layer, []).append(v)
    L = record["layers"] or max(int(x) for x in df["layer"])
    for key, _ in PROFILE_COLUMNS:
        prof = [(sum(sums[key][l]) / len(sums[key][l])) if sums[key].get(l) else None for l in range(1, L + 1)]
        record["profiles"][key] = prof
        for name, (lo, hi) in thirds(L).items():
            vals = [v for v in prof[lo - 1:hi] if v is not None]
            record["values"][f"{key}:{name}"] = sum(vals) / len(vals) if vals else None
            record["details"][f"{key}:{name}"] = f"layers {lo}-{hi} of {L}, mean over heads"


def _detectors(record: dict[str, Any], run_dir: Path) -> None:
    if not (run_dir / DETECTORS_JSON).is_file():
        return
    doc = read_json_file(run_dir / DETECTORS_JSON, "head detectors' summary")
    for name, _ in DETECTORS:
        det = doc["detectors"][name]
        top = det["top_heads"][0] if det.get("top_heads") else None
        record["values"][f"{name}:heads"] = int(det["n_detected"])
        record["details"][f"{name}:heads"] = f"score > {doc['threshold']}"
        record["values"][f"{name}:best"] = _num(float(top["score"])) if top else None
        record["details"][f"{name}:best"] = f"head {top['head']}" if top else ""
    sink = doc.get("sink_share_per_layer")
    if sink:
        record["profiles"]["sink_random"] = [_num(float(v)) for v in sink]


def _behaviours(record: dict[str, Any], run_dir: Path) -> None:
    path = run_dir / CLUSTERS_CSV
    if not path.is_file():
        return
    df = read_csv_strings(path, required=("layer", "head", "behavior"), what="head clusters")
    counts: dict[str, int] = {}
    for b in df["behavior"]:
        name = BEHAVIOUR_NAMES.get(b.strip(), b.strip())
        counts[name] = counts.get(name, 0) + 1
    for name, c in counts.items():
        record["values"][f"behaviour:{name}"] = c / len(df)
        record["details"][f"behaviour:{name}"] = f"{c} of {len(df)} heads"


def _num(v: float) -> float | None:
    return None if v != v or v in (float("inf"), float("-inf")) else float(v)


def _parameters(run_dir: Path, manifest: dict[str, Any]) -> tuple[int | None, str]:
    """The model's parameter count and where it comes from: the manifest's provenance when it records one,
    else the random-init record of the word stores (kept + re-initialised elements: every parameter of the
    loaded model); ``(None, why)`` when the run wrote neither."""
    prov = (manifest.get("model") or {}).get("provenance") or {}
    for key in ("num_parameters", "n_parameters", "parameters"):
        if isinstance(prov.get(key), int):
            return int(prov[key]), "manifest.json"
    for path in sorted((run_dir / "attention").glob("randwords-*.summary.json")):
        try:
            rec = json.loads(path.read_text(encoding="utf-8")).get("random_init") or {}
            return int(rec["n_kept_elements"]) + int(rec["n_reinitialized_elements"]), str(path.relative_to(run_dir))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return None, "not recorded by the run (no random-init word stores)"


def model_metrics(run_dir: str | os.PathLike, model: dict[str, Any]) -> dict[str, Any]:
    """The atlas record of the model ``model`` (a config ``models`` entry) from its run directory."""
    run_dir = Path(run_dir)
    status, reason = run_status(run_dir)
    record: dict[str, Any] = {
        "label": model["label"], "run": run_dir.name, "status": status, "reason": reason,
        "name_or_path": model.get("name_or_path"), "revision": model.get("revision"),
        "gated": bool(model.get("gated", False)), "family": model.get("family"), "kind": None, "model_type": None,
        "parameters": None, "parameters_source": None, "layers": None, "heads": None, "roles": {},
        "explorer": None, "values": {}, "details": {}, "flags": {}, "profiles": {}, "problems": []}
    if status != RAN:
        record["family"] = record["family"] or "unknown"
        return record
    manifest: dict[str, Any] = {}

    def _model() -> None:
        manifest.update(read_json_file(run_dir / MANIFEST, "run manifest"))
        prov = (manifest.get("model") or {}).get("provenance") or {}
        record.update(kind=prov.get("family"), model_type=prov.get("model_type"),
                      layers=prov.get("num_layers"), heads=prov.get("num_heads"))

    _guard(record, MANIFEST, _model)
    record["family"] = record["family"] or record["model_type"] or "unknown"
    record["parameters"], record["parameters_source"] = _parameters(run_dir, manifest)
    if (run_dir / "explorer.html").is_file():
        record["explorer"] = f"../{run_dir.name}/explorer.html"
    stats_summary: dict[str, Any] = {}
    _guard(record, STATS_SUMMARY, lambda: stats_summary.update(
        read_json_file(run_dir / STATS_SUMMARY, "surface statistics' summary")
        if (run_dir / STATS_SUMMARY).is_file() else {}))
    _guard(record, SEGMENTS, lambda: record["roles"].update(token_roles(run_dir, record["kind"] or "encoder",
                                                                        stats_summary)))
    for what, read in ((TABLE1_CSV, _table1), (TABLE3_CSV, _table3), (STATS_CSV, _stats),
                       (DETECTORS_JSON, _detectors), (CLUSTERS_CSV, _behaviours)):
        _guard(record, what, lambda read=read: read(record, run_dir))
    return record
