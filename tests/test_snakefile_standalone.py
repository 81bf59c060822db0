"""The Snakefile parses with the bertlook of its own checkout (src/), whatever is installed: a copy
of the workflow plans its DAG from the copy's package, which marks its import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.e2e


def test_snakefile_imports_the_package_of_its_own_checkout(tmp_path):
    copy = tmp_path / "checkout"
    copy.mkdir()
    for name in ("Snakefile", "workflow", "src", "envs", "config", ".test", "profiles", "tests/fixtures"):
        src = ROOT / name
        dst = copy / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif src.exists():
            shutil.copy2(src, dst)
    marker = tmp_path / "imported-from"
    init = copy / "src" / "bertlook" / "__init__.py"
    init.write_text(init.read_text() + "\nimport os as _os\n_os.environ.get('BERTLOOK_IMPORT_MARKER') and "
                    "open(_os.environ['BERTLOOK_IMPORT_MARKER'], 'w').write(__file__)\n")
    env = dict(os.environ, BERTLOOK_IMPORT_MARKER=str(marker), PYTHONPATH="")
    snakemake = Path(sys.executable).parent / "snakemake"
    proc = subprocess.run([str(snakemake), "-n", "--configfile", ".test/config.yaml", "--cores", "1"],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert marker.read_text() == str(copy / "src" / "bertlook" / "__init__.py")
