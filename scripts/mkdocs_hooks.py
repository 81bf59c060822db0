"""MkDocs hooks (mkdocs.yml `hooks:`): pages generated at build time, so that they cannot go stale.

- reference/cli.md: every `bertlook` subcommand's `--help`, from the parsers themselves (bertlook.cli.build_parser);
- reference/config.md: config/README.md (the configuration reference the tests check against the schema);
- development/changelog.md: CHANGELOG.md;
- index.md: README.md, its links rewritten for the site (docs/X -> X, config/README.md -> the configuration
  reference, CHANGELOG.md -> the changelog; files outside the site, LICENSE and CITATION.cff, named as text).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]


def cli_reference() -> str:
    """Markdown of `bertlook --help` and of every subcommand's help, in pipeline order."""
    os.environ.setdefault("COLUMNS", "110")  # argparse wraps help at the terminal width: fixed here
    from bertlook.cli import ORDER, build_parser

    parser = build_parser(full=True)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    names = [n for n in ORDER if n.replace("_", "-") in sub.choices]
    names = [n.replace("_", "-") for n in names] + sorted(set(sub.choices) - {n.replace("_", "-") for n in names})
    parts = ["# Command line", "",
             "Every step of the workflow is one `bertlook` subcommand; the Snakemake rules only call them. This page "
             "is generated from the parsers when the site is built (`make docs`), so it is the `--help` of the "
             "installed version.", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name in names:
        parts += [f"## `bertlook {name}`", "", "```text", sub.choices[name].format_help().rstrip(), "```", ""]
    return "\n".join(parts)


def home_page() -> str:
    """README.md as the site's home page."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = text.replace("](config/README.md)", "](reference/config.md)").replace("](CHANGELOG.md)",
                                                                              "](development/changelog.md)")
    text = text.replace("](docs/", "](")
    return re.sub(r"\[([^\]]+)\]\((LICENSE|CITATION\.cff)\)", r"\1 (the file `\2` of the repository)", text)


def on_files(files, config):
    generated = {
        "index.md": home_page(),
        "reference/cli.md": cli_reference(),
        "reference/config.md": (ROOT / "config" / "README.md").read_text(encoding="utf-8"),
        "development/changelog.md": (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
    }
    for path, content in generated.items():
        files.append(File.generated(config, path, content=content))
    return files
