"""Transcript importers: real agent transcripts turned into turns for the memory API.

Formats (one module each; `--format auto` tells them apart, see `loader`):
- `claude-code`: Claude Code session logs (`~/.claude/projects/<project>/<session>.jsonl`)
  and their subagents' logs;
- `swe-agent`: SWE-agent trajectories (`*.traj`);
- `openai`: OpenAI-style message lists, LLM call logs and ToolBench / ToolLLaMA
  trajectories;
- `openhands`: OpenHands event trajectories, resolver output (`output.jsonl`) and SDK
  `events.jsonl`;
- `aider`: aider chat histories (`.aider.chat.history.md`);
- `memoryapp-export`: a memoryapp export of a session or an agent (`export`): not read
  into turns but sent whole to `POST /api/v1/import`, which recreates it exactly.

    sessions = load_path("~/.claude/projects/my-project")   # a file or a folder
    with MemoryClient(url, key) as client:
        for session in sessions:
            print(send(client, session).lines())

From the command line: `python -m agents.importers PATH [PATH...] --url URL --key KEY
[--format F] [--session KEY]`, or `manage.py import_transcript PATH... --agent NAME`
(exports too); exports from an agent machine: `python -m agents.importers.export FILE
--url URL --key KEY`.
"""

from agents.importers.core import ImportedSession, Problem, TranscriptError, TurnBody
from agents.importers.export import ExportSent, import_exports, send_file
from agents.importers.loader import (
    EXPORT,
    FORMATS,
    ExportFile,
    PathImport,
    UnknownFormat,
    detect_format,
    load_path,
    load_transcript,
    scan_path,
)
from agents.importers.openai import turns_from_messages
from agents.importers.send import SendResult, import_paths, send

__all__ = [
    "EXPORT",
    "FORMATS",
    "ExportFile",
    "ExportSent",
    "ImportedSession",
    "PathImport",
    "Problem",
    "SendResult",
    "TranscriptError",
    "TurnBody",
    "UnknownFormat",
    "detect_format",
    "import_exports",
    "import_paths",
    "load_path",
    "load_transcript",
    "scan_path",
    "send",
    "send_file",
    "turns_from_messages",
]
