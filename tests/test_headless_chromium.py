"""tests/headless_chromium.run_chromium on a stand-in browser (a shell script): a browser that exits is returned as
it is; one that hangs after its page is done is killed and taken; one that hangs before is tried again and, hanging
every time, fails the test naming its tries."""

from __future__ import annotations

import time

import pytest

import headless_chromium


def _browser(tmp_path, body: str):
    script = tmp_path / "fake-chromium"
    script.write_text("#!/bin/bash\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def _screenshot_arg(shot):
    return [f"--screenshot={shot}", "file:///page.html"]


SHOT = 'for a in "$@"; do case "$a" in --screenshot=*) echo png > "${a#--screenshot=}";; esac; done'


def test_a_browser_that_exits_is_returned_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setattr(headless_chromium, "find_chromium", lambda: _browser(tmp_path, SHOT + "\necho dom; exit 3"))
    proc = headless_chromium.run_chromium(_screenshot_arg(tmp_path / "s.png"), tmp_path / "p", done=lambda _: True)
    assert proc.returncode == 3 and proc.stdout == "dom\n"  # the caller judges it
    assert "--headless" in proc.args and f"--user-data-dir={tmp_path / 'p' / 'try1'}" in proc.args


def test_a_browser_hung_after_its_page_is_killed_and_taken(tmp_path, monkeypatch):
    shot = tmp_path / "s.png"
    monkeypatch.setattr(headless_chromium, "find_chromium", lambda: _browser(tmp_path, SHOT + "\nsleep 60"))
    t0 = time.perf_counter()
    proc = headless_chromium.run_chromium(_screenshot_arg(shot), tmp_path / "p", done=lambda _: shot.is_file(),
                                          timeout=1)
    assert time.perf_counter() - t0 < 10  # the sleeping child was killed with its group, not waited for
    assert proc.returncode == 0 and "try 1 did not exit within 1 s after its page was done" in proc.stderr


def test_a_browser_hung_before_its_page_is_tried_again_then_fails(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setattr(headless_chromium, "find_chromium",
                        lambda: _browser(tmp_path, f'echo x >> "{calls}"; sleep 60'))
    with pytest.raises(pytest.fail.Exception, match="did not finish the page in 2 tries: try 1: no result within 1 s"):
        headless_chromium.run_chromium(_screenshot_arg(tmp_path / "s.png"), tmp_path / "p", done=lambda _: False,
                                       timeout=1)
    assert calls.read_text().count("x") == 2
