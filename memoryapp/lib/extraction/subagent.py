"""Subagent (Task) results: what the subagent reported, without its preamble.

A subagent's report usually opens with filler ("Perfect! Now I have all the information I
need. Let me provide a comprehensive overview…"); the fact keeps the task's description,
the report's own heading, and its first substantive sentences. `substance` is shared with
web pages, which open with navigation and filler in the same way.
"""

from __future__ import annotations

import re

from memoryapp.lib.extraction.base import Fact, ToolCallData, failed, failure
from memoryapp.lib.extraction.text import one_line, sentences

_PREAMBLE = re.compile(
    r"^(?:(?:Perfect|Excellent|Great|Good|Okay|OK|Alright|All right|Done|Sure|Certainly|"
    r"Absolutely|Wonderful|Awesome)\b[!.,]?"
    r"|(?:Now,? )?I (?:now )?have (?:all|a|enough|gathered|completed|finished|a complete|"
    r"a comprehensive|a clear|a good|everything)"
    r"|(?:Now )?[Ll]et me (?:provide|give|summari[sz]e|compile|put together|present|write|create)"
    r"|Here(?:'s| is| are) (?:a |the |my )?(?:comprehensive |complete |detailed |full |"
    r"thorough |relevant |key )?(?:summary|overview|analysis|report|findings|breakdown|"
    r"results?|information|details|answer|data)"
    r"|Based on (?:my|the|this) (?:analysis|exploration|research|investigation|review|"
    r"findings|search)"
    r"|I(?:'ve| have) (?:now )?(?:completed|finished|gathered|analy[sz]ed|explored|reviewed|"
    r"found|collected)"
    r"|Now I (?:can|will|understand|see)"
    r"|I (?:found|see) (?:all|everything|the information))",
    re.IGNORECASE,
)
_AGENT_FOOTER = re.compile(r"^agentId: \S+.*$", re.MULTILINE)
_HEADING = re.compile(r"^\s*#{1,6}\s+(.+?)\s*#*\s*$")
_BOLD_LINE = re.compile(r"^\s*\*\*(.+?)\*\*:?\s*$")
_SKIP_LINE = re.compile(r"^\s*(?:-{3,}|={3,}|\*{3,}|```.*|\|.*\||<[^>]+>)\s*$")
_SECTION = re.compile(r"^\s*#{1,3}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")


def _strip_preamble(line: str) -> str:
    kept = [s for s in sentences(line) if not _PREAMBLE.match(s)]
    return " ".join(kept)


def substance(text: str, limit: int = 300) -> str:
    """The heading and first substantive sentences of a report or page."""
    text = _AGENT_FOOTER.sub("", text)
    title = ""
    body: list[str] = []
    in_code = False
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            in_code = not in_code
            continue
        if in_code or not raw.strip() or _SKIP_LINE.match(raw):
            continue
        heading = _HEADING.match(raw) or _BOLD_LINE.match(raw)
        if heading:
            if not title and not body:
                title = heading.group(1).strip("*: ")
            elif body:
                break
            continue
        line = _strip_preamble(_LIST_MARK.sub("", raw)).strip()
        if not line:
            continue
        body.append(line)
        if sum(len(b) for b in body) >= limit:
            break
    text_body = " ".join(body)
    if title and text_body:
        return one_line(f"{title}: {text_body}", limit)
    return one_line(title or text_body, limit)


def _result_text(call: ToolCallData) -> str:
    content = call.detail("content")
    if isinstance(content, list):
        parts = [c.get("text", "") for c in content if isinstance(c, dict)]
        if any(parts):
            return "\n".join(parts)
    return call.clean


def extract(call: ToolCallData) -> Fact:
    args = call.args or {}
    description = str(args.get("description") or args.get("task") or "").strip()
    if failed(call):
        return failure(call, prefix=f"{one_line(description, 80)}: " if description else "")
    text = _result_text(call)
    report = substance(text, 240)
    # A long report's own sections say what else it covers.
    headings = [one_line(h.strip("*: "), 40) for h in _SECTION.findall(text)][1:6]
    if headings:
        report += f" (sections: {', '.join(headings)})"
    details = {k: call.detail(k) for k in ("agentId", "totalToolUseCount") if call.detail(k)}
    head = f"{one_line(description, 80)}: " if description else ""
    return Fact(f"{head}{report or 'no report'}", True, details=details)
