"""The session page: the conversation exactly as the agent receives it (pinned system
messages, the summary of what was pruned, the kept run), pruned history a page at a time,
the budget, working context, findings, turns and the assembled prompt, all kept live.

The page assembles the agent's context once (`assemble_context`, as `GET /context` does)
and derives everything it shows from it. The live poll sends what is new and, when
anything changed, the blocks that depend on it, out of band; an edit elsewhere on the page
(`memory-changed`) asks for the same blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.auth.decorators import login_required
from django.db.models import F, Max
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django_htmx.http import HttpResponseStopPolling

from memoryapp.core.context import MAX_FINDINGS, assemble_context, read_findings
from memoryapp.core.limits import MAX_TOKEN_BUDGET
from memoryapp.core.models import (
    ContextItem,
    ExtractionJob,
    Finding,
    MemoryEvent,
    Message,
    Session,
    Subtask,
    ToolCall,
    Turn,
)
from memoryapp.core.restore import message_dict
from memoryapp.dashboard.access import _get_agent_and_role, _get_session_for_user
from memoryapp.dashboard.charts import tokens_per_turn
from memoryapp.lib import prompt as fmt
from memoryapp.lib import render as readable
from memoryapp.lib import tokens

OLDER_PAGE = 50
TURNS_PAGE = 50
LIVE_LIMIT = 100
# The findings the page shows are the ones the context picks from (read once, passed to it).
MAX_FINDINGS_SHOWN = MAX_FINDINGS


def _int_param(request: HttpRequest, name: str, default: int = 0) -> int:
    """A non-negative integer query parameter; anything else is a 404 (a bad link)."""
    raw = request.GET.get(name, "")
    if raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise Http404(f"bad {name}")
    return int(raw)


def _float_param(request: HttpRequest, name: str) -> float:
    raw = request.GET.get(name, "0")
    try:
        value = float(raw)
    except ValueError:
        raise Http404(f"bad {name}") from None
    if not 0 <= value < 1e11:  # a timestamp: also refuses inf and nan
        raise Http404(f"bad {name}")
    return value


# --- the conversation as the agent receives it -------------------------------------------


@dataclass
class Received:
    """The parts of the conversation the agent receives, with their token counts."""

    pinned: list[dict]  # system messages, always kept
    kept: list[dict]  # the newest messages that fit
    first_kept: int  # seq of the first kept non-system message; message_count + 1 if none
    pinned_tokens: int
    kept_tokens: int
    pruned_count: int
    pruned_tokens: int
    summary: dict | None
    summary_tokens: int


def _received(session: Session, context_view: dict) -> Received:
    conversation = context_view["conversation"]
    pinned = [m for m in conversation if m["role"] == "system"]
    kept = [m for m in conversation if m["role"] != "system"]
    kept_tokens = sum(m["token_count"] for m in kept)
    pinned_tokens = sum(m["token_count"] for m in pinned)
    summary = context_view["summary"]
    summary_tokens = 0
    if summary and summary.get("text"):
        encoding = tokens.get_encoding(session.agent.encoding)
        summary_tokens = tokens.count_text(encoding, fmt.summary_section(summary["text"]))
    return Received(
        pinned=pinned,
        kept=kept,
        first_kept=kept[0]["seq"] if kept else session.message_count + 1,
        pinned_tokens=pinned_tokens,
        kept_tokens=kept_tokens,
        pruned_count=session.message_count - len(conversation),
        pruned_tokens=max(0, session.token_count - pinned_tokens - kept_tokens),
        summary=summary,
        summary_tokens=summary_tokens,
    )


def _budget_bars(context_view: dict) -> list[dict]:
    labels = (
        ("system", "System"),
        ("conversation", "Conversation"),
        ("working", "Working context"),
        ("long_term", "Long-term memory"),
    )
    return [
        {
            "label": label,
            "used": context_view["token_counts"][section],
            "budget": context_view["budget"][section],
        }
        for section, label in labels
    ]


_ABSENT = (("name", ""), ("tool_call_id", ""), ("client_id", ""), ("removed_at", None),
           ("revisions", None))  # fmt: skip


def _rows(session: Session, messages: list[dict], *, outside: bool = False) -> list[dict]:
    """Messages ready to show: each with its turn, its tool calls (tool results placed
    under the call they answer), and, on the last message of a turn, the turn's findings
    and the tool calls its messages did not carry. Three queries whatever the count."""
    if not messages:
        return []
    seqs = [m["seq"] for m in messages]
    turn_of = dict(
        Message.objects.filter(session=session, seq__in=seqs).values_list("seq", "turn__iteration")
    )
    iterations = {i for i in turn_of.values() if i is not None}
    records: dict[int, list] = {}
    for call in ToolCall.objects.filter(session=session, turn__iteration__in=iterations).annotate(
        iteration=F("turn__iteration")
    ):
        records.setdefault(call.iteration, []).append(call)
    findings: dict[int, list] = {}
    for finding in Finding.objects.filter(session=session, step__in=iterations):
        findings.setdefault(finding.step, []).append(finding)
    last_of_turn: dict[int, int] = {}
    carries_calls: set[int] = set()
    for message in messages:
        iteration = turn_of.get(message["seq"])
        message["iteration"] = iteration
        message["outside"] = outside
        # message_dict leaves out what a message lacks; the template reads every key, and a
        # key it does not find costs it an exception and a dir() of the dict.
        for key, absent in _ABSENT:
            message.setdefault(key, absent)
        if iteration is not None:
            last_of_turn[iteration] = message["seq"]
            if message.get("tool_calls"):
                carries_calls.add(iteration)
    for message in messages:
        iteration = message["iteration"]
        end = iteration is not None and last_of_turn.get(iteration) == message["seq"]
        message["turn_findings"] = findings.get(iteration, []) if end else []
        message["turn_tool_calls"] = (
            records.get(iteration, []) if end and iteration not in carries_calls else []
        )
    return readable.thread(messages)


def _pruned_page(
    session: Session, *, before: int | None = None, after: int | None = None, until: int
) -> dict:
    """A page of pruned messages in order, never a system message (those are pinned):
    the page before `before` (with the link to the one before it), or the page after
    `after` up to `until`, the first kept message (with the link to the next one)."""
    pruned = Message.objects.filter(session=session, seq__lt=until).exclude(
        role=Message.Role.SYSTEM
    )
    if after is not None:
        found = list(pruned.filter(seq__gt=after).order_by("seq")[: OLDER_PAGE + 1])
        page = found[:OLDER_PAGE]
        next_after = page[-1].seq if len(found) > OLDER_PAGE else None
        earlier = None
    else:
        found = list(pruned.filter(seq__lt=before).order_by("-seq")[: OLDER_PAGE + 1])
        page = found[:OLDER_PAGE][::-1]
        earlier = page[0].seq if len(found) > OLDER_PAGE else None
        next_after = None
    return {
        "older": _rows(session, [message_dict(m) for m in page], outside=True),
        "last_seq": page[-1].seq if page else None,
        "next_before": earlier,
        "next_after": next_after,
        "until": until,
    }


def _around(session: Session, at: int, until: int) -> dict:
    """The pruned page that holds message `at`, with links both ways."""
    page = _pruned_page(session, before=min(at + OLDER_PAGE // 2, until), until=until)
    last = page["last_seq"] or at  # the page's own last message, not its last top-level row
    newer = (
        Message.objects.filter(session=session, seq__gt=last, seq__lt=until)
        .exclude(role=Message.Role.SYSTEM)
        .exists()
    )
    page["next_after"] = last if newer else None
    return page


# --- the blocks the page shows, computed from one assembled context ----------------------


def _blocks(
    session: Session, typed_budget: int | None, findings: list[Finding] | None = None
) -> dict:
    """Everything that changes when the session does: header numbers, what the agent
    receives, budget, summary, prompt, chart, the newest turns. `findings`: the page's
    (`_findings_shown`), which the context then does not read again."""
    context_view = assemble_context(
        session, token_budget=typed_budget, record_access=False, newest_findings=findings
    )
    received = _received(session, context_view)
    now = timezone.now()
    found = list(Turn.objects.filter(session=session).order_by("-iteration")[: TURNS_PAGE + 1])
    newest_turns = found[:TURNS_PAGE]
    return {
        "received": received,
        "summary": received.summary,
        "bars": _budget_bars(context_view),
        "cut": context_view["cut"],
        "prompt_findings": {f["id"] for f in context_view["findings"]},
        "cut_by_budget": context_view["cut"]["messages"]
        - context_view["cut"]["messages_over_limit"],
        "typed_budget": typed_budget,
        "budget_total": context_view["budget"]["total"],
        "total_tokens": context_view["token_counts"]["total"],
        "prompt": context_view["prompt"],
        "chart": tokens_per_turn(newest_turns[::-1]),
        "newest_turns": newest_turns,
        "older_turns": len(found) > TURNS_PAGE,
        "last_turn": newest_turns[0].iteration if newest_turns else 0,
        "now": now,
        # Past its expiry the API answers 404 for it: the agent receives none of this.
        "expired": session.is_expired(now),
    }


def _mark_in_prompt(findings: list[Finding], blocks: dict) -> None:
    """Set `in_prompt` on each finding (what its row says): whether the context the page
    assembled (`_blocks`) gives it to the agent."""
    for finding in findings:
        finding.in_prompt = finding.id in blocks["prompt_findings"]


def _findings_shown(session: Session, after: int | None = None) -> list[Finding]:
    """Findings with what their provenance line shows of their turn, message and tool
    call: the newest (the page), or the first after id `after` (the live poll). Their
    session is the one already read: joined, its row (with the summary's state, kilobytes
    of JSON) would be read and decoded once per finding."""
    if after is None:
        return read_findings(session, MAX_FINDINGS_SHOWN, call_columns=_CALL_SHOWN)
    return read_findings(session, LIVE_LIMIT, after=after, call_columns=_CALL_SHOWN)


def _context_items(session: Session) -> list[ContextItem]:
    """The session's working context, its session the one already read (see above)."""
    items = list(ContextItem.objects.filter(session=session).order_by("-confidence", "key"))
    for item in items:
        item.session = session
    return items


# What the provenance line shows of a finding's call, and what the context answers.
_CALL_SHOWN = ("call_id", "tool", "query")


def _typed_budget(request: HttpRequest) -> int | None:
    raw = request.GET.get("budget") or ""
    if not raw.isascii() or not raw.isdigit():
        return None
    return min(int(raw[:12]), MAX_TOKEN_BUDGET) or None


def _turn_rows(session: Session, before: int) -> dict:
    found = list(
        Turn.objects.filter(session=session, iteration__lt=before).order_by("-iteration")[
            : TURNS_PAGE + 1
        ]
    )
    page = found[:TURNS_PAGE]
    return {
        "turn_rows": page,
        "turns_before": page[-1].iteration if len(found) > TURNS_PAGE else None,
    }


@login_required
@require_GET
def session_detail(request: HttpRequest, name: str, key: str) -> HttpResponse:
    agent, role = _get_agent_and_role(request, name)
    session = _get_session_for_user(request, agent, key)
    base = {"agent": agent, "role": role, "session": session}
    turns_page = None
    if "turns_before" in request.GET:  # the turns table, a page further back
        turns_page = _turn_rows(session, _int_param(request, "turns_before"))
        if request.htmx:
            return render(request, "dashboard/session.html#turn-rows", {**base, **turns_page})
    # The whole page shows the newest findings and the context fits them: read them once.
    findings = None if request.htmx else _findings_shown(session)
    blocks = _blocks(session, _typed_budget(request), findings)
    if request.htmx and request.GET.get("budget") is not None:
        return render(request, "dashboard/session.html#budget", {**base, **blocks})
    if request.htmx and "refresh" in request.GET:  # after an edit on this page
        return render(request, "dashboard/session.html#refresh", {**base, **blocks, "oob": True})
    received = blocks["received"]
    context = {**base, **blocks}
    if request.htmx and request.htmx.target == "pruned-marker":  # "hide them"
        context.update(first_kept=received.first_kept, expanded=False)
        return render(request, "dashboard/session.html#marker", context)
    at = _int_param(request, "at", 0)
    if 0 < at < received.first_kept:  # a link to a pruned message opens its page
        context.update(_around(session, at, received.first_kept), expanded=True)
    if findings is None:
        findings = _findings_shown(session)
    Finding.mark_stale_reads(session, findings)
    _mark_in_prompt(findings, blocks)
    grouped: dict[str, list] = {group: [] for group in fmt.FINDING_GROUPS}
    for finding in findings:
        grouped[fmt.finding_group(finding.kind)].append(finding)
    context_items = _context_items(session)
    MemoryEvent.attach_people(findings, context_items)  # who added or edited each: one query
    context.update(
        rows=_rows(session, received.pinned + received.kept),
        first_kept=received.first_kept,
        context_items=context_items,
        findings_grouped=[(g, grouped[g]) for g in fmt.FINDING_GROUPS],
        subtasks=Subtask.objects.filter(session=session),
        **(
            turns_page
            or {
                "turn_rows": blocks["newest_turns"],
                "turns_before": blocks["newest_turns"][-1].iteration
                if blocks["older_turns"]
                else None,
            }
        ),
        live=_live_state(
            after_seq=session.message_count,
            after_finding=max((f.id for f in findings), default=0),
            items_since=max((i.updated_at.timestamp() for i in context_items), default=0),
            after_turn=blocks["last_turn"],
            first_shown=received.first_kept,
            first_kept=received.first_kept,
            marker=received.pruned_count > 0,
        ),
        failed_jobs=ExtractionJob.objects.failed()
        .filter(session=session)
        .select_related("turn")
        .order_by("-id")[:5],
    )
    return render(request, "dashboard/session.html", context)


@login_required
@require_GET
def session_older(request: HttpRequest, name: str, key: str) -> HttpResponse:
    """Pruned messages a page at a time, each page in order: the page before `before`
    (asked for by the marker itself, the marker comes back expanded around it, its link
    now hiding them), or the page after `after` up to `until` (the first kept message)."""
    agent, role = _get_agent_and_role(request, name)
    session = _get_session_for_user(request, agent, key)
    if "after" in request.GET:
        until = _int_param(request, "until", session.message_count + 1)
        page = _pruned_page(session, after=_int_param(request, "after"), until=until)
    else:
        before = _int_param(request, "before", -1)
        if before < 0:
            raise Http404("bad position")
        page = _pruned_page(session, before=before, until=before)
    context = {"agent": agent, "role": role, "session": session, **page}
    if request.htmx and request.htmx.target == "pruned-marker":
        received = _blocks(session, None)["received"]
        context.update(received=received, first_kept=received.first_kept, expanded=True)
        return render(request, "dashboard/session.html#marker", context)
    if request.htmx:
        return render(request, "dashboard/older.html#pruned-page", context)
    return render(request, "dashboard/older.html", context)


# --- live ----------------------------------------------------------------------------------


def _live_state(**state) -> dict:
    """Where the page is: what the next poll asks for."""
    state["marker"] = int(bool(state["marker"]))
    return state


@login_required
@require_GET
def session_live(request: HttpRequest, name: str, key: str) -> HttpResponse:
    """What is new since the last poll: messages, findings, changed working context, new
    turns; when anything is, the blocks that depend on it (header, what the agent
    receives, budget, summary, prompt, chart, pruned marker) out of band, and the
    messages that left the agent's context since, re-shown dimmed. A constant number of
    queries whatever the session holds."""
    agent, role = _get_agent_and_role(request, name)
    session = _get_session_for_user(request, agent, key)
    after_seq = _int_param(request, "after_seq")
    after_finding = _int_param(request, "after_finding")
    after_turn = _int_param(request, "after_turn")
    items_since = _float_param(request, "items_since")
    first_kept = _int_param(request, "first_kept", session.message_count + 1)
    first_shown = _int_param(request, "first_shown", first_kept)
    marker = request.GET.get("marker") == "1"
    if session.is_expired():
        return HttpResponseStopPolling()
    changed = ContextItem.objects.filter(
        session=session, updated_at__gt=datetime.fromtimestamp(items_since, tz=UTC)
    ).aggregate(latest=Max("updated_at"))["latest"]
    messages = list(
        Message.objects.filter(session=session, seq__gt=after_seq).order_by("seq")[:LIVE_LIMIT]
    )
    findings = _findings_shown(session, after=after_finding)
    context = {"agent": agent, "role": role, "session": session, "oob": True}
    state = {
        "after_seq": messages[-1].seq if messages else after_seq,
        "after_finding": findings[-1].id if findings else after_finding,
        "items_since": changed.timestamp() if changed else items_since,
        "after_turn": after_turn,
        "first_shown": first_shown,
        "first_kept": first_kept,
        "marker": marker,
    }
    if messages or findings or changed:
        items = _context_items(session) if changed else None
        MemoryEvent.attach_people(findings, items or [])
        Finding.mark_stale_reads(session, findings)
        # The budget typed on the page, if any, comes with each poll (hx-include).
        blocks = _blocks(session, _typed_budget(request))
        _mark_in_prompt(findings, blocks)
        received = blocks["received"]
        left = list(
            Message.objects.filter(
                session=session, seq__gte=first_kept, seq__lt=received.first_kept
            )
            .exclude(role=Message.Role.SYSTEM)
            .exclude(seq__gt=after_seq)
            .order_by("seq")[:LIVE_LIMIT]
        )
        context.update(
            blocks,
            new_messages=_rows(session, [message_dict(m) for m in messages]),
            left_context=_rows(session, [message_dict(m) for m in left], outside=True),
            new_turns=[t for t in blocks["newest_turns"] if t.iteration > after_turn],
            new_findings=findings,
            changed_items=items,
            add_marker=received.pruned_count > 0 and not marker,
            first_kept=first_shown,  # the marker's link pages back from what is shown
            expanded=False,
        )
        state.update(
            after_turn=blocks["last_turn"],
            first_kept=max(first_kept, received.first_kept),
            marker=marker or received.pruned_count > 0,
        )
    context["live"] = _live_state(**state)
    return render(request, "dashboard/session.html#live", context)
