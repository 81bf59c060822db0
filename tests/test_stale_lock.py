"""scripts/check_stale_lock.sh: a lock is stale unless a snakemake process works in that directory.

Fake "snakemake" processes (``exec -a snakemake python3 -c sleep ARGS``) stand for runs: one elsewhere must not
hide a stale lock; one whose current directory or ``--directory`` argument is the work directory
owns it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "scripts" / "check_stale_lock.sh"


def _locked(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / ".snakemake" / "locks").mkdir(parents=True)
    (work / ".snakemake" / "locks" / "0.input.lock").write_text("x\n")
    return work


def _check(work: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHECK), str(work), "config.yaml"], capture_output=True, text=True, timeout=30)


def _fake_snakemake(cwd: Path, *args: str) -> subprocess.Popen:
    python = os.path.realpath(sys.executable)  # the binary itself: a pyenv shim would re-exec and drop argv[0]
    proc = subprocess.Popen(["bash", "-c", 'exec -a snakemake "$0" -c "import time; time.sleep(60)" "$@"', python, *args],
                            cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    return proc


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def test_no_lock_is_fine(tmp_path):
    assert _check(tmp_path).returncode == 0


def test_stale_lock_is_reported_even_when_another_run_is_elsewhere(tmp_path, procs):
    work = _locked(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    procs.append(_fake_snakemake(other, "--directory", str(other)))
    got = _check(work)
    assert got.returncode == 2, got.stderr
    assert "make unlock CONFIG=config.yaml" in got.stderr and str(work) in got.stderr


@pytest.mark.parametrize("how", ["cwd", "directory", "directory=", "relative"])
def test_a_run_working_there_owns_the_lock(tmp_path, procs, how):
    work = _locked(tmp_path)
    if how == "cwd":
        procs.append(_fake_snakemake(work, "--cores", "1"))
    elif how == "directory":
        procs.append(_fake_snakemake(tmp_path, "--directory", str(work)))
    elif how == "directory=":
        procs.append(_fake_snakemake(tmp_path, f"--directory={work}"))
    else:
        procs.append(_fake_snakemake(tmp_path, "-d", "work"))
    assert _check(work).returncode == 0
