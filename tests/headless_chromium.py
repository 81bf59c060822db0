"""Headless Chromium for the tests that open a page (the report, the explorer, the atlas): where it is, and one
run of it that a hung browser does not fail.

Chromium's `--virtual-time-budget` now and then never returns: the page is done (a `--screenshot` written, the
DOM final) and the process does not exit, or it stalls before the page loads (html2image issue 97: "chrome hangs
1 out of 10 cases"; CambrianTech/continuum PR 1784: "Chrome writes the --screenshot PNG but never EXITS").
CI met it once in a loaded run (2026-12-06: `test_report_renders_in_a_headless_browser`, 180 s timeout).
:func:`run_chromium` gives each try a wall-clock limit and a fresh profile; a try that hangs is killed and, where
its output is already complete (``done``), taken; otherwise the page is opened once more. Every check of the
page's content stays the caller's: a retry never passes a page that rendered wrong, it only stops a browser
process that did not exit from failing the test."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Callable

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
TRY_TIMEOUT_S = 90  # a page takes 1-5 s; a loaded CI machine 20 s at worst seen
TRIES = 2


def find_chromium() -> str:
    """The Chromium executable; without one, a failure where BERTLOOK_REQUIRE_CHROMIUM or CI is set (.ci/run sets
    it), else a skip, saying why."""
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                   None)
    if browser is None:
        why = "no headless Chromium on PATH (Debian package `chromium`: apt-get install -y chromium)"
        if os.environ.get("BERTLOOK_REQUIRE_CHROMIUM") or os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return browser


def run_chromium(args: list[str], profile: Path, *, done: Callable[[str], bool],
                 timeout: float = TRY_TIMEOUT_S, tries: int = TRIES) -> subprocess.CompletedProcess:
    """Chromium with :data:`FLAGS`, ``args`` (the page and what to do with it) and a fresh ``--user-data-dir``
    under ``profile`` for each try. ``done(stdout)``: whether a try's output is complete (the screenshot file
    exists, the DOM holds the test's result). A try past ``timeout`` seconds is killed with its process group; if
    ``done`` holds then, it is the result (returncode 0, the hang said on stderr), else the next try runs; after
    the last, the test fails naming the tries."""
    browser = find_chromium()
    notes = []
    for k in range(1, tries + 1):
        cmd = [browser, *FLAGS, f"--user-data-dir={profile / f'try{k}'}", "--enable-logging=stderr", "--v=0", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
            return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        if done(out):
            note = f"headless_chromium: try {k} did not exit within {timeout:g} s after its page was done; taken"
            print(note)
            return subprocess.CompletedProcess(cmd, 0, out, err + "\n" + note)
        notes.append(f"try {k}: no result within {timeout:g} s ({err[-300:]!r})")
        print(f"headless_chromium: {notes[-1]}")
    pytest.fail(f"headless Chromium did not finish the page in {tries} tries: " + "; ".join(notes))
