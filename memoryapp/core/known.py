"""The "already known?" check: before a tool call, whether the session already holds its
answer (`check_call`), so the agent can skip the call. `known` only for the same call
exactly (Finding.known: also what recording a finding updates instead of copying), a
read of a file changed since is `stale` instead, and `related` names the earlier findings
that cover the call without answering it (memoryapp.lib.related is the rule).
"""

from __future__ import annotations

from memoryapp.core.context import finding_dict
from memoryapp.core.models import Finding, Session
from memoryapp.core.shapes import FindingCheck
from memoryapp.lib import related as related_rule

# How many of the session's newest findings `related` looks through.
RELATED_AMONG = 500


def related_findings(session: Session, tool: str, query: str) -> list[tuple[Finding, str]]:
    """Earlier findings that cover `tool(query)` without answering it exactly, each with
    why, of the session's newest RELATED_AMONG."""
    kind, key = Finding.key_for(tool, query, session.cwd)
    earlier = list(
        Finding.objects.filter(session=session)
        .exclude(identity=key.digest)
        .order_by("-updated_at", "-id")[:RELATED_AMONG]
    )
    new = related_rule.Call(kind, key.display, key.path)
    calls = [related_rule.Call(f.kind, f.query, f.file_path) for f in earlier]
    return [(earlier[r.index], r.why) for r in related_rule.related(new, calls)]


def check_call(session: Session | None, tool: str, query: str) -> FindingCheck:
    """Is `tool(query)` already known in `session`? (`query`: the call's text or its JSON
    arguments.) A session that does not exist yet (None) knows nothing."""
    if session is None:
        return {"known": False, "stale": False, "finding": None, "related": []}
    finding = Finding.known(session, tool, query)
    stale = finding.is_stale() if finding is not None else False
    return {
        "known": finding is not None and not stale,
        "stale": stale,
        "finding": finding_dict(finding, stale) if finding else None,
        "related": [
            {"finding": finding_dict(f), "why": why}
            for f, why in related_findings(session, tool, query)
        ],
    }
