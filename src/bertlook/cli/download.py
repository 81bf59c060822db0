"""``bertlook download``: download a file with retries and checksum verification.

The download itself lives in :mod:`bertlook.data.download`; this module holds the argparse glue,
the summary and printing.
"""

from __future__ import annotations

import argparse

from bertlook.io_utils import write_json
from bertlook.pipeline import costs


#: the subcommands this module registers, with their help lines (read without importing this module:
#: bertlook.cli.discover_commands)
COMMANDS = {
    "download": "download a file (e.g. the Wikipedia dump) with retries and checksum verification",
}

#: what the jobs of this module's rules without a step cost (bertlook.pipeline.costs; a step declares its own)
COSTS = {"download_wikipedia": costs.DOWNLOAD, "download_glove": costs.DOWNLOAD}


def _handler(args: argparse.Namespace) -> int:
    from bertlook.data.download import download, fetch_sha1_from_sums

    sha1 = None
    if args.sha1sums_url:
        filename = args.url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        sha1 = fetch_sha1_from_sums(args.sha1sums_url, filename, args.timeout, retries=args.retries)
    info = download(args.url, args.out, sha256=args.sha256, sha1=sha1,
                    retries=args.retries, timeout=args.timeout)
    if args.summary:
        write_json(args.summary, info)
    print(f"download: {info['url']} -> {info['path']} ({info['bytes']} bytes, sha256 {info['sha256']}"
          + (", sha1 verified" if sha1 else "") + (", sha256 verified" if args.sha256 else "") + ")")
    return 0


def register_cli(subparsers) -> None:
    p = subparsers.add_parser(
        "download",
        help=COMMANDS["download"],
        description=(
            "Input: --url (http(s):// or file://), optionally --sha256 and/or --sha1sums-url "
            "(a Wikimedia *-sha1sums.txt listing the file). "
            "Output: --out (written atomically; skipped when it already exists with the expected "
            "checksum) and, with --summary, a JSON file {url, path, sha256, sha1, bytes}. "
            "Connection errors and HTTP 5xx are retried with exponential backoff; 4xx fails at once. "
            "Exit 2 on a checksum mismatch or an unreachable URL."
        ),
    )
    p.add_argument("--url", required=True, help="URL to download")
    p.add_argument("--out", required=True, metavar="PATH", help="destination file")
    p.add_argument("--sha256", metavar="HEX", default=None, help="expected sha256 of the file")
    p.add_argument("--sha1sums-url", metavar="URL", default=None,
                   help="Wikimedia *-sha1sums.txt; the sha1 listed for the URL's file name is verified")
    p.add_argument("--retries", type=int, default=3, help="number of attempts (default 3)")
    p.add_argument("--timeout", type=float, default=60.0, help="socket timeout in seconds (default 60)")
    p.add_argument("--summary", metavar="JSON", default=None,
                   help="write {url, path, sha256, sha1, bytes} here")
    p.set_defaults(func=_handler)
