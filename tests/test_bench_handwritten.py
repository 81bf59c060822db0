"""scripts/bench_handwritten.py (docs/DESIGN.md "What bertlook still writes by hand") runs on tiny
sizes, and the strictness it reports for bertlook's CoNLL-U reader holds: every malformed file is
rejected with file:line. The library columns run only where the [bench] extra is installed."""

from __future__ import annotations

import importlib.util

from workflow_helpers import ROOT


def _bench():
    spec = importlib.util.spec_from_file_location("bench_handwritten", ROOT / "scripts" / "bench_handwritten.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_runs_small_and_our_reader_rejects_every_malformed_file(capsys):
    bench = _bench()
    assert bench.main(["--sentences", "50", "--matrices", "20", "--nx-matrices", "5", "--examples", "3",
                       "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    cases = bench.malformed_cases()
    assert len(cases) == 8
    rows = [line for line in out.splitlines() if line.strip().split("  ")[0] in cases]
    if importlib.util.find_spec("conllu") is not None:
        assert len(rows) == len(cases) and all("rejected, names file:line" in row for row in rows), out
        assert "same maximal scores: True" in out or importlib.util.find_spec("networkx") is None
    assert "total" in out


def test_our_reader_rejects_every_malformed_case_with_file_and_line(tmp_path):
    """Independent of the conllu package: the claims of the DESIGN table about our reader."""
    import re

    import pytest

    from bertlook.errors import BertlookError
    from bertlook.data.treebank import read_conllu

    for name, (lines, line) in _bench().malformed_cases().items():
        path = tmp_path / f"{name.replace(' ', '_')}.conllu"
        path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
        with pytest.raises(BertlookError, match="^" + re.escape(f"{path}:{line}: ")):
            read_conllu(path)
