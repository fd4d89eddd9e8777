"""The web: pages fetched and searches made.

A fetch keeps the URL, the status when the tool reports one, the page's title (its first
heading or `<title>`) and its first substantive sentences. A search keeps how many results
came back and their titles (Claude Code's WebSearch prints `Links: [{"title", "url"}…]`;
other tools print markdown links or `Title: …` lines).
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

from memoryapp.lib.extraction.base import Fact, ToolCallData, failed, failure
from memoryapp.lib.extraction.identity import URL_FIELDS, first_field, normalize_url
from memoryapp.lib.extraction.subagent import substance
from memoryapp.lib.extraction.text import one_line, plural

RESULTS_SHOWN = 4

_TITLE_TAG = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_LINKS = re.compile(r"Links:\s*(\[.*?\])\s*(?:\n|$)", re.DOTALL)
_MD_LINK = re.compile(r"\[([^\]\n]{3,200})\]\((https?://[^)\s]+)\)")
_TITLE_LINE = re.compile(r"^\s*(?:\d+\.\s*)?(?:Title|title):\s*(.+)$", re.MULTILINE)
_URL_LINE = re.compile(r"^\s*(?:URL|Url|url|Link):\s*(https?://\S+)", re.MULTILINE)


def _domain(url: str) -> str:
    try:
        host = urlsplit(url).netloc
    except ValueError:
        return ""
    return host.removeprefix("www.")


def extract_fetch(call: ToolCallData) -> Fact:
    url = first_field(call.args, URL_FIELDS) or call.detail("url") or call.query.strip()
    url = normalize_url(url) if url else ""
    code = call.detail("code", "status", "status_code")
    details: dict = {"url": url}
    if isinstance(code, int):
        details["status"] = code
    if failed(call) or (isinstance(code, int) and code >= 400):
        reason = call.detail("codeText") or ""
        prefix = f"{url} ({code} {reason}): ".replace(" )", ")") if code else f"{url}: "
        return failure(call, prefix=prefix)
    text = call.clean
    title = ""
    if match := _TITLE_TAG.search(text[:5000]):
        title = one_line(re.sub(r"<[^>]+>", "", match.group(1)), 120)
        text = re.sub(r"<[^>]+>", " ", text)
    body = substance(text, 240)
    if not title and body.startswith("#"):
        title = ""
    status = f" ({code})" if isinstance(code, int) and code != 200 else ""
    parts = [p for p in (title, body) if p]
    return Fact(f"{url}{status}: " + (" — ".join(parts) or "empty page"), True, details=details)


def _results(text: str) -> list[tuple[str, str]]:
    if match := _LINKS.search(text):
        try:
            links = json.loads(match.group(1))
            return [
                (str(item.get("title") or item.get("url")), str(item.get("url") or ""))
                for item in links
                if isinstance(item, dict)
            ]
        except ValueError:
            pass
    if titles := _TITLE_LINE.findall(text):
        urls = _URL_LINE.findall(text)
        return [(t.strip(), urls[i] if i < len(urls) else "") for i, t in enumerate(titles)]
    return [(title, url) for title, url in _MD_LINK.findall(text)]


def extract_search(call: ToolCallData) -> Fact:
    if failed(call):
        return failure(call)
    text = call.clean
    results = _results(text)
    if not results:
        if re.search(r"\bno (?:results|links)\b", text[:300], re.IGNORECASE):
            return Fact("No results", True, details={"results": 0})
        return Fact(substance(text, 240) or "No results", True, details={"results": 0})
    shown = "; ".join(
        one_line(title, 80) + (f" ({_domain(url)})" if _domain(url) else "")
        for title, url in results[:RESULTS_SHOWN]
    )
    more = ", …" if len(results) > RESULTS_SHOWN else ""
    # Claude Code's WebSearch answers the query after its links: keep the answer's start.
    after = _LINKS.split(text, maxsplit=1)[-1] if _LINKS.search(text) else ""
    answer = substance(after, 160) if after.strip() else ""
    return Fact(
        f"{plural(len(results), 'result')}: {shown}{more}" + (f" — {answer}" if answer else ""),
        True,
        details={"results": len(results), "urls": [u for _, u in results[:10]]},
    )
