"""`manage.py import_memory` and `export_memory` (memoryapp/core/management/commands)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from memoryapp.core.models import Agent, Memory, Session

FIXTURES = Path(__file__).parent / "fixtures"
MEM0 = [str(FIXTURES / "mem0" / n) for n in ("get_all_alice.json", "history.db")]


def _run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_a_dry_run_says_what_and_creates_not_even_the_agent(db):
    out = _run("import_memory", "mem0", *MEM0, "--agent", "moved", "--dry-run")
    assert out.splitlines()[-1].startswith("mem0 -> agent moved: ")
    assert "would be created" in out
    assert not Agent.objects.filter(name="moved").exists()


def test_an_import_then_the_same_again(db):
    first = _run("import_memory", "letta", str(FIXTURES / "letta" / "loop.af"), "--agent", "moved")
    assert first.splitlines()[-1] == "Letta -> agent moved: 1 session and 9 memories created"
    again = _run("import_memory", "letta", str(FIXTURES / "letta" / "loop.af"), "--agent", "moved")
    assert again.splitlines()[-1] == "Letta -> agent moved: 1 session and 9 memories skipped"
    assert Session.objects.filter(agent__name="moved").count() == 1


def test_a_broken_file_is_refused_whole(db, tmp_path):
    broken = tmp_path / "loop.af"
    broken.write_bytes((FIXTURES / "letta" / "loop.af").read_bytes()[:4000])
    with pytest.raises(CommandError, match="nothing imported: agent file: line"):
        _run("import_memory", "letta", str(broken), "--agent", "moved")
    assert not Memory.objects.exists() and not Session.objects.exists()
    with pytest.raises(CommandError, match="one of the two"):
        _run("import_memory", "ams", "--agent", "moved")


def test_the_export_writes_mem0s_json(db, tmp_path):
    _run("import_memory", "mem0", *MEM0, "--agent", "moved")
    out = tmp_path / "out.json"
    call_command("export_memory", "mem0", "--agent", "moved", "-o", str(out), stderr=StringIO())
    exported = json.loads(out.read_text())["results"]
    source = json.loads((FIXTURES / "mem0" / "get_all_alice.json").read_text())["results"]
    assert sorted(i["id"] for i in exported) == sorted(i["id"] for i in source)
    with pytest.raises(CommandError, match="no agent named"):
        call_command("export_memory", "ams", "--agent", "nobody")
