"""``bertlook resources RUN_DIR``: the measured resources of a run, per rule, from Snakemake's
benchmark files.

Every rule writes ``results/{run}/benchmarks/RULE[-WILDCARDS].tsv`` (the download rules write theirs
under ``{resources_dir}/benchmarks/``, the cross-model summary under ``{run_name}-all-models/
benchmarks/``). Snakemake's format: a header and one line per repeat, tab-separated::

    s  h:m:s  max_rss  max_vms  max_uss  max_pss  io_in  io_out  mean_load  cpu_time

``s`` wall seconds; ``max_*`` MiB (resident, virtual, unique, proportional set size of the job's
process tree); ``io_in`` / ``io_out`` MiB read / written; ``mean_load`` CPU percent (100 = one core
busy); ``cpu_time`` CPU seconds (user + system). ``NA`` = not sampled.

How Snakemake samples (``snakemake.benchmark``): every 0.5 s during the first 30 s of a job, then
every 30 s. So ``max_rss`` is a lower bound (a peak between two samples is missed) and a job shorter
than about a second has at most one sample, often of the shell that starts it (``manifest`` of the
offline run: 0.3 s, 3 MB): such rows are flagged in ``note``.

The table has one row per benchmark file (or, with ``by_rule``, per rule: sharded / per-split jobs
summed), and a ``TOTAL`` row per run directory: wall and CPU time summed (the serial time; jobs may
have run in parallel), I/O summed, the largest RSS.
"""

from __future__ import annotations

import csv
import datetime
import os
from pathlib import Path
from typing import Any, Iterable

from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path

BENCHMARK_COLUMNS = ["s", "h:m:s", "max_rss", "max_vms", "max_uss", "max_pss", "io_in", "io_out",
                     "mean_load", "cpu_time"]
MEMORY_COLUMNS = ["max_rss", "max_vms", "max_uss", "max_pss"]
TABLE_COLUMNS = ["run", "rule", "wildcards", "jobs", "wall_s", "wall_hms", "wall_share", "cpu_s",
                 "mean_load_pct", "max_rss_mb", "max_vms_mb", "max_uss_mb", "max_pss_mb", "io_in_mb",
                 "io_out_mb", "note"]
SHORT_JOB_S = 1.0
NOTE_NA = "memory/CPU not sampled (job ended before the first sample)"
NOTE_SHORT = "under 1 s: memory sampled at most once (lower bound)"


def _number(text: str, where: str) -> float | None:
    text = text.strip()
    if text in ("NA", "-", ""):
        return None
    try:
        value = float(text)
    except ValueError:
        raise BertlookError(f"{where}: {text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise BertlookError(f"{where}: {text!r} is not a finite non-negative number")
    return value


def read_benchmark(path: str | os.PathLike) -> dict[str, Any]:
    """One Snakemake benchmark file -> ``{s, max_rss, ..., cpu_time, repeats}``.

    Several lines (``benchmark: repeat(...)``): wall, CPU, load and I/O are averaged, memory is the
    largest. ``None`` where Snakemake wrote ``NA``."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            rows = list(csv.reader(fh, delimiter="\t"))
    except (OSError, UnicodeDecodeError) as err:
        raise BertlookError(f"{path}: cannot read benchmark file ({err})") from None
    if not rows or [c.strip() for c in rows[0][:len(BENCHMARK_COLUMNS)]] != BENCHMARK_COLUMNS:
        raise BertlookError(f"{path}:1: not a Snakemake benchmark file (expected the header "
                            f"{' '.join(BENCHMARK_COLUMNS)})")
    header = [c.strip() for c in rows[0]]
    records = []
    for lineno, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) < len(BENCHMARK_COLUMNS):
            raise BertlookError(f"{path}:{lineno}: {len(row)} fields, expected {len(header)}")
        records.append({name: _number(row[i], f"{path}:{lineno}: column {name}")
                        for i, name in enumerate(header) if name in BENCHMARK_COLUMNS and name != "h:m:s"})
    if not records:
        raise BertlookError(f"{path}: no measurement (header only)")
    out: dict[str, Any] = {"repeats": len(records)}
    for name in BENCHMARK_COLUMNS:
        if name == "h:m:s":
            continue
        values = [r[name] for r in records if r[name] is not None]
        if not values:
            out[name] = None
        elif name in MEMORY_COLUMNS:
            out[name] = max(values)
        else:
            out[name] = sum(values) / len(values)
    return out


def _hms(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return str(datetime.timedelta(seconds=round(seconds)))


def benchmark_dir(path: str | os.PathLike) -> tuple[str, Path]:
    """``(label, directory of .tsv files)`` of a run directory (its ``benchmarks/``) or of a
    ``benchmarks`` directory itself (label: the directory above it)."""
    path = Path(path)
    if (path / "benchmarks").is_dir():
        return path.resolve().name, path / "benchmarks"
    if path.name == "benchmarks":
        return path.resolve().parent.name, path
    return path.resolve().name, path / "benchmarks"


def _job_row(label: str, tsv: Path, bench: dict[str, Any]) -> dict[str, Any]:
    rule, _, wildcards = tsv.stem.partition("-")
    note = ""
    if bench["max_rss"] is None:
        note = NOTE_NA
    elif bench["s"] is not None and bench["s"] < SHORT_JOB_S:
        note = NOTE_SHORT
    return {
        "run": label, "rule": rule, "wildcards": wildcards, "jobs": 1,
        "wall_s": bench["s"], "cpu_s": bench["cpu_time"], "mean_load_pct": bench["mean_load"],
        **{f"{name}_mb": bench[name] for name in MEMORY_COLUMNS},
        "io_in_mb": bench["io_in"], "io_out_mb": bench["io_out"], "note": note,
    }


def _sum(values: Iterable[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _max(values: Iterable[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _combine(rows: list[dict[str, Any]], *, rule: str, wildcards: str) -> dict[str, Any]:
    """Several jobs as one row: times and I/O summed, memory the largest, load = CPU / wall."""
    wall, cpu = _sum(r["wall_s"] for r in rows), _sum(r["cpu_s"] for r in rows)
    notes = sorted({r["note"] for r in rows if r["note"]})
    return {
        "run": rows[0]["run"], "rule": rule, "wildcards": wildcards, "jobs": sum(r["jobs"] for r in rows),
        "wall_s": wall, "cpu_s": cpu,
        "mean_load_pct": 100.0 * cpu / wall if wall and cpu is not None else None,
        **{f"{name}_mb": _max(r[f"{name}_mb"] for r in rows) for name in MEMORY_COLUMNS},
        "io_in_mb": _sum(r["io_in_mb"] for r in rows), "io_out_mb": _sum(r["io_out_mb"] for r in rows),
        "note": "; ".join(notes),
    }


def resource_table(dirs: Iterable[str | os.PathLike], *, exclude: Iterable[str] = (),
                   by_rule: bool = False) -> list[dict[str, Any]]:
    """Rows of :data:`TABLE_COLUMNS`, per run directory: one per benchmark file (``by_rule``: per
    rule), sorted by rule and wildcards, then a ``TOTAL`` row. Rules in ``exclude`` are left out (the
    resources rule's own benchmark). Directories without benchmark files are skipped; none at all is
    an error."""
    exclude = set(exclude)
    table: list[dict[str, Any]] = []
    searched = []
    for d in dirs:
        label, bench_dir = benchmark_dir(d)
        searched.append(str(bench_dir))
        files = sorted(bench_dir.glob("*.tsv")) if bench_dir.is_dir() else []
        rows = [_job_row(label, f, read_benchmark(f)) for f in files]
        rows = [r for r in rows if r["rule"] not in exclude]
        if not rows:
            continue
        if by_rule:
            grouped: dict[str, list[dict[str, Any]]] = {}
            for r in rows:
                grouped.setdefault(r["rule"], []).append(r)
            rows = [_combine(g, rule=rule, wildcards=",".join(r["wildcards"] for r in g if r["wildcards"]))
                    if len(g) > 1 else g[0] for rule, g in grouped.items()]
        rows.sort(key=lambda r: (r["rule"], r["wildcards"]))
        total = _combine(rows, rule="TOTAL", wildcards="")
        total["note"] = "serial sum of wall and CPU time; jobs may have run in parallel"
        for r in rows + [total]:
            r["wall_share"] = (r["wall_s"] / total["wall_s"]) if total["wall_s"] and r["wall_s"] is not None else None
            r["wall_hms"] = _hms(r["wall_s"])
        table.extend(rows + [total])
    if not table:
        raise BertlookError("no Snakemake benchmark files (*.tsv) in " + ", ".join(searched)
                            + ": run the workflow first (every rule writes one)")
    return [{c: r.get(c) for c in TABLE_COLUMNS} for r in table]


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def write_table_csv(path: str | os.PathLike, table: list[dict[str, Any]]) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(TABLE_COLUMNS)
            for row in table:
                writer.writerow([_csv_value(row[c]) for c in TABLE_COLUMNS])


def table_markdown(table: list[dict[str, Any]], sources: list[str]) -> str:
    lines = ["# Measured resources", "",
             "From Snakemake's benchmark files (" + ", ".join(f"`{s}`" for s in sources) + "). "
             "Wall and CPU time in seconds, memory and I/O in MiB; load in CPU percent (100 = one core). "
             "Snakemake samples memory every 0.5 s for the first 30 s of a job, then every 30 s: "
             "max RSS is a lower bound. RSS sums each process's resident pages, so pages the probes job's forked "
             "workers share with it count once per process; PSS counts them once in all. "
             "TOTAL: wall and CPU time summed (the serial time), the largest RSS and PSS.",
             ""]
    for run in dict.fromkeys(r["run"] for r in table):
        lines += [f"## {run}", "",
                  "| rule | wildcards | jobs | wall | wall s | share | CPU s | load % | max RSS MiB | max PSS MiB | I/O in MiB | "
                  "I/O out MiB | note |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in (r for r in table if r["run"] == run):
            share = f"{100 * r['wall_share']:.0f}%" if r["wall_share"] is not None else ""
            rule = f"**{r['rule']}**" if r["rule"] == "TOTAL" else r["rule"]
            lines.append(f"| {rule} | {r['wildcards']} | {r['jobs']} | {r['wall_hms']} | {_fmt(r['wall_s'])} | "
                         f"{share} | {_fmt(r['cpu_s'])} | {_fmt(r['mean_load_pct'], 0)} | {_fmt(r['max_rss_mb'], 0)} | "
                         f"{_fmt(r['max_pss_mb'], 0)} | {_fmt(r['io_in_mb'])} | {_fmt(r['io_out_mb'])} | {r['note']} |")
        lines.append("")
    return "\n".join(lines)
