"""`python -m agents.importers PATH [PATH...] --url URL --key KEY [--format F]
[--session KEY]`: import transcripts into a running memory server over its API."""

from __future__ import annotations

import argparse
import sys

from agents.client import MemoryClient
from agents.importers.core import TranscriptError
from agents.importers.loader import FORMATS
from agents.importers.send import import_paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agents.importers",
        description="Import agent transcripts (files or folders) into a memory server.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a transcript or a folder")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="the agent's API key")
    parser.add_argument("--format", default="auto", choices=["auto", *FORMATS])
    parser.add_argument("--session", help="session key (default: taken from the file's name)")
    parser.add_argument(
        "--replace", action="store_true", help="an export replaces sessions with the same key"
    )
    args = parser.parse_args(argv)
    try:
        with MemoryClient(args.url, args.key) as client:
            return import_paths(
                client,
                args.paths,
                format=args.format,
                session_key=args.session,
                replace=args.replace,
            )
    except TranscriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
