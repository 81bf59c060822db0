#!/usr/bin/env python3
"""A screenshot of a head explorer page (the README's docs/img/explorer.png), with a head and an example selected.

    python scripts/explorer_screenshot.py results/offline-minilm/explorer.html docs/img/explorer.png --head 1-3

Runs headless Chromium (the Debian package `chromium`) on a copy of the page with a few lines of script that
click the head and choose the example, map kind and view; the page itself is not changed. Prints the PNG's size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DRIVER = """<script>
window.addEventListener("load", function () {
  const pane = document.querySelector(".pane"), choice = %s;
  const cell = pane.querySelector('.cell[data-head="' + choice.head + '"]');
  if (!cell) { document.title = "error: no head " + choice.head; return; }
  const metric = pane.querySelector(".metric");
  if (choice.metric) { metric.value = choice.metric; metric.dispatchEvent(new Event("change")); }
  const example = pane.querySelector(".sentence");
  if (example.options.length > choice.example) { example.selectedIndex = choice.example; }
  example.dispatchEvent(new Event("change"));
  const view = pane.querySelector(".view"); view.value = choice.view; view.dispatchEvent(new Event("change"));
  cell.click();
});
</script>"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("page", type=Path, help="an explorer.html")
    p.add_argument("out", type=Path, help="the PNG to write")
    p.add_argument("--head", default="1-1", help="the head to select, layer-head (default 1-1)")
    p.add_argument("--example", type=int, default=0, help="the example's position in the menu, from 0 (default 0)")
    p.add_argument("--metric", default=None, help="the grid's metric key (default: the page's first)")
    p.add_argument("--view", choices=("lines", "heatmap"), default="lines")
    p.add_argument("--size", default="1280,1500", help="window width,height in pixels (default 1280,1500)")
    args = p.parse_args(argv)
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                   None)
    if browser is None:
        print("error: no headless Chromium on PATH (Debian: apt-get install -y chromium)", file=sys.stderr)
        return 2
    if not args.page.is_file():
        print(f"error: {args.page}: no such page", file=sys.stderr)
        return 2
    choice = json.dumps({"head": args.head, "example": args.example, "metric": args.metric, "view": args.view})
    html = args.page.read_text(encoding="utf-8").replace("</body>", DRIVER % choice.replace("</", "<\\/") + "</body>")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "page.html"
        copy.write_text(html, encoding="utf-8")
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={Path(tmp) / 'profile'}", f"--window-size={args.size}", "--virtual-time-budget=3000",
               f"--screenshot={args.out.resolve()}", copy.as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if proc.returncode != 0 or not args.out.is_file():
        print(f"error: chromium failed (exit {proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
        return 2
    print(f"{args.out}: {args.out.stat().st_size / 1024:.0f} KiB, head {args.head}, example {args.example}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
