"""`python -m agents.importers.export FILE [FILE...] --url URL --key KEY [--session KEY]
[--replace]`: import memoryapp exports into a running memory server over its API."""

from __future__ import annotations

import argparse
import sys

from agents.client import MemoryClient
from agents.importers.core import TranscriptError
from agents.importers.export import import_exports


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agents.importers.export",
        description="Import memoryapp exports (a session or a whole agent) into a memory server.",
    )
    parser.add_argument("paths", nargs="+", metavar="FILE", help="an export document")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="the API key of the agent to import into")
    parser.add_argument("--session", help="a new key for the session of a session's export")
    parser.add_argument(
        "--replace", action="store_true", help="replace sessions that exist with the same key"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for the server's answer"
    )
    args = parser.parse_args(argv)
    try:
        with MemoryClient(args.url, args.key, timeout=args.timeout) as client:
            return import_exports(
                client, args.paths, session_key=args.session, replace=args.replace
            )
    except TranscriptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
