"""bertlook.pipeline.shellcmd: the one way rules build command lines. Each value must reach the program as
exactly one literal argument, whatever it holds; checked by running the built line in bash."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from bertlook.pipeline.shellcmd import command, flag_tokens

HOSTILE = [
    "plain",
    "with space",
    "$(touch PWNED-1)",
    "`touch PWNED-2`",
    ";touch PWNED-3;",
    "'$(touch PWNED-4)'",
    '"$(touch PWNED-5)"',
    "|touch PWNED-6|&touch PWNED-7&",
    "\ntouch PWNED-8\n",
    "{touch,PWNED-9}",
    "${IFS}x\\y*?[a]~",
    "-starts-with-dash",
    "",
]


def _argv_seen_by_program(cmd_line: str, cwd) -> list[str]:
    """Run the line with bash (as Snakemake does) and return the argv the program received."""
    out = subprocess.run(["bash", "-c", cmd_line], capture_output=True, cwd=cwd, check=True).stdout
    return out.decode().split("\0")[:-1]


def test_every_hostile_value_arrives_as_one_literal_argument(tmp_path):
    flags = {f"v{i}": value for i, value in enumerate(HOSTILE)}
    line = command("printf '%s\\0'", "step", flags, env={"OMP_NUM_THREADS": 2})
    argv = _argv_seen_by_program(line, tmp_path)
    expected = ["step"] + [tok for name, value in flags.items() for tok in flag_tokens(name, value)]
    assert argv == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no payload ran


def test_the_payloads_are_live_when_not_quoted(tmp_path):
    """Control: the same values pasted unquoted (what the rules did before) do run commands, so
    the test above can fail."""
    subprocess.run(["bash", "-c", "echo " + " ".join(HOSTILE[2:8])], cwd=tmp_path, capture_output=True)
    assert any(p.name.startswith("PWNED") for p in tmp_path.iterdir())


def test_flag_rendering():
    assert flag_tokens("out_js", "a b") == ["--out-js", "a b"]
    assert flag_tokens("x", None) == [] and flag_tokens("x", False) == []
    assert flag_tokens("mst", True) == ["--mst"]
    assert flag_tokens("conll", ["a", "b"]) == ["--conll", "a", "--conll", "b"]
    assert flag_tokens("offsets", "-3,-2,1") == ["--offsets=-3,-2,1"]  # argparse would take -3 for a flag
    assert flag_tokens("mds_eps", 1e-9) == ["--mds-eps", "1e-09"]
    assert flag_tokens("n", 30) == ["--n", "30"]
    assert shlex.split(command("prog", "step", {"a": "x y"})) == ["prog", "step", "--a", "x y"]


@pytest.mark.parametrize("bad", [{"step": "st ep"}, {"flag": "A-B"}, {"env": "A B"}, {"value": float("nan")}])
def test_names_are_checked_and_non_finite_numbers_refused(bad):
    with pytest.raises(ValueError):
        command(
            "prog",
            bad.get("step", "step"),
            {bad.get("flag", "ok"): bad.get("value", 1)},
            env={bad.get("env", "OK"): 1},
        )


def test_positional_arguments_arrive_literally_and_never_as_flags(tmp_path):
    """command(..., args=[...]): each positional argument one literal argument after the step (the atlas
    rule's CONFIG); one starting with '-' is passed as ./-x, so that argparse does not take it for a flag."""
    values = [v for v in HOSTILE if v]
    argv = _argv_seen_by_program(command("printf '%s\\0'", "atlas", {"out": "o u t"}, args=values), tmp_path)
    assert argv == ["atlas", *[f"./{v}" if v.startswith("-") else v for v in values], "--out", "o u t"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
