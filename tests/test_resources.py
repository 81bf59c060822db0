"""`bertlook resources`: per-rule measured resources from Snakemake benchmark files."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from bertlook import cli
from bertlook.errors import BertlookError
from bertlook.reporting.resources import TABLE_COLUMNS, read_benchmark, resource_table

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(directory: Path, name: str, *lines: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.tsv"
    path.write_text(HEADER + "".join(line + "\n" for line in lines))
    return path


@pytest.fixture()
def run_dir(tmp_path) -> Path:
    run = tmp_path / "results" / "demo-minilm"
    b = run / "benchmarks"
    _bench(b, "extract_segments", "84.47\t0:01:24\t735.15\t1416.48\t688.82\t698.87\t0.00\t2124.06\t89.31\t75.65")
    _bench(b, "extract_words-train", "17.78\t0:00:17\t695.21\t1410.47\t668.25\t679.45\t4.03\t215.49\t131.65\t24.00")
    _bench(b, "extract_words-dev", "36.73\t0:00:36\t628.52\t1382.06\t602.94\t612.99\t13.70\t31.47\t27.98\t10.50")
    _bench(b, "manifest", "0.31\t0:00:00\t3.05\t4.26\t0.05\t0.73\t0.00\t0.00\t0.00\t0.00")
    _bench(b, "comparison", "0.20\t0:00:00\tNA\tNA\tNA\tNA\tNA\tNA\tNA\tNA")
    _bench(b, "resources", "0.40\t0:00:00\t3.00\t4.00\t0.05\t0.70\t0.00\t0.00\t0.00\t0.00")
    return run


def test_table_per_job_with_a_total(run_dir):
    table = resource_table([run_dir], exclude=["resources"])
    rows = {(r["rule"], r["wildcards"]): r for r in table}
    assert list(rows) == [("comparison", ""), ("extract_segments", ""), ("extract_words", "dev"),
                          ("extract_words", "train"), ("manifest", ""), ("TOTAL", "")]
    assert all(r["run"] == "demo-minilm" for r in table)
    seg = rows[("extract_segments", "")]
    assert (seg["wall_s"], seg["max_rss_mb"], seg["io_in_mb"], seg["io_out_mb"], seg["cpu_s"], seg["mean_load_pct"]) == \
        (84.47, 735.15, 0.0, 2124.06, 75.65, 89.31)
    assert seg["wall_hms"] == "0:01:24" and seg["jobs"] == 1
    assert rows[("manifest", "")]["note"].startswith("under 1 s")
    na = rows[("comparison", "")]
    assert na["max_rss_mb"] is None and na["cpu_s"] is None and "not sampled" in na["note"]
    total = rows[("TOTAL", "")]
    assert total["jobs"] == 5
    assert total["wall_s"] == pytest.approx(84.47 + 17.78 + 36.73 + 0.31 + 0.20)
    assert total["cpu_s"] == pytest.approx(75.65 + 24.00 + 10.50 + 0.00)
    assert total["max_rss_mb"] == 735.15
    assert total["io_out_mb"] == pytest.approx(2124.06 + 215.49 + 31.47)
    assert total["mean_load_pct"] == pytest.approx(100 * total["cpu_s"] / total["wall_s"])
    assert seg["wall_share"] == pytest.approx(84.47 / total["wall_s"])
    assert "resources" not in {r["rule"] for r in table}
    assert "resources" in {r["rule"] for r in resource_table([run_dir])}


def test_by_rule_sums_splits_and_several_directories(run_dir, tmp_path):
    summary = tmp_path / "results" / "demo-all-models"
    _bench(summary / "benchmarks", "models_summary", "1.90\t0:00:01\t228.00\t900.00\t200.00\t210.00\t1.50\t0.01\t52.00\t1.50")
    downloads = tmp_path / "resources" / "benchmarks"  # the download cache's benchmarks folder itself
    _bench(downloads, "download_wikipedia", "30.00\t0:00:30\t50.00\t100.00\t40.00\t45.00\t0.00\t270.00\t10.00\t3.00")
    table = resource_table([run_dir, summary, downloads, tmp_path / "missing"], by_rule=True, exclude=["resources"])
    words = next(r for r in table if r["rule"] == "extract_words")
    assert words["jobs"] == 2 and words["wildcards"] == "dev,train"
    assert words["wall_s"] == pytest.approx(17.78 + 36.73) and words["max_rss_mb"] == 695.21
    assert words["mean_load_pct"] == pytest.approx(100 * (24.00 + 10.50) / (17.78 + 36.73))
    assert [r["run"] for r in table if r["rule"] == "TOTAL"] == ["demo-minilm", "demo-all-models", "resources"]
    assert next(r for r in table if r["rule"] == "download_wikipedia")["io_out_mb"] == 270.0


def test_repeats_are_averaged_and_memory_is_the_largest(tmp_path):
    path = _bench(tmp_path, "heads", "2.0\t0:00:02\t100\t200\t90\t95\t1\t2\t50\t1.0",
                  "4.0\t0:00:04\t300\t100\t80\t85\t3\t4\t70\t3.0")
    got = read_benchmark(path)
    assert got == {"repeats": 2, "s": 3.0, "max_rss": 300.0, "max_vms": 200.0, "max_uss": 90.0, "max_pss": 95.0,
                   "io_in": 2.0, "io_out": 3.0, "mean_load": 60.0, "cpu_time": 2.0}


@pytest.mark.parametrize("content, message", [
    ("", "not a Snakemake benchmark file"),
    ("wall\tmem\n1\t2\n", "not a Snakemake benchmark file"),
    (HEADER, "no measurement"),
    (HEADER + "1.0\t0:00:01\tabc\t1\t1\t1\t1\t1\t1\t1\n", r":2: column max_rss: 'abc' is not a number"),
    (HEADER + "1.0\t0:00:01\t-5\t1\t1\t1\t1\t1\t1\t1\n", "not a finite non-negative number"),
    (HEADER + "1.0\t0:00:01\t1\n", ":2: 3 fields"),
])
def test_malformed_benchmark_files_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "x.tsv"
    path.write_text(content)
    with pytest.raises(BertlookError, match=message) as exc:
        read_benchmark(path)
    assert str(path) in str(exc.value)


def test_cli_writes_csv_and_markdown(run_dir, tmp_path, capsys):
    out_csv, out_md = tmp_path / "out" / "resources.csv", tmp_path / "out" / "resources.md"
    assert cli.main(["resources", str(run_dir), "--exclude", "resources",
                     "--out-csv", str(out_csv), "--out-markdown", str(out_md)]) == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert list(rows[0]) == TABLE_COLUMNS
    seg = next(r for r in rows if r["rule"] == "extract_segments")
    assert (seg["wall_s"], seg["max_rss_mb"], seg["io_out_mb"], seg["cpu_s"]) == ("84.47", "735.15", "2124.06", "75.65")
    assert next(r for r in rows if r["rule"] == "comparison")["max_rss_mb"] == ""  # NA stays empty
    md = out_md.read_text()
    assert "## demo-minilm" in md and "| extract_segments |  | 1 | 0:01:24 | 84.5 |" in md and "**TOTAL**" in md
    assert md.strip() == capsys.readouterr().out.strip()
    # the same through --run-dir (how the rule calls it)
    assert cli.main(["resources", "--run-dir", str(run_dir), "--out-csv", str(tmp_path / "b.csv")]) == 0


def test_cli_without_benchmarks_exits_2(tmp_path, capsys):
    assert cli.main(["resources", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no Snakemake benchmark files") and str(tmp_path / "benchmarks") in err
    assert cli.main(["resources"]) == 2


@pytest.mark.parametrize("step", ["resources", "fetch"])
def test_help_lists_inputs_and_outputs(step, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([step, "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and f"usage: bertlook {step}" in out and "Input" in out and "Output" in out
