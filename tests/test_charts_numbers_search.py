"""Charts and numbers (issue 10): the tokens charts' shape (every day of the window, empty
days at zero, ticks, labels), their page output and query counts; durations read as
durations; the settings form's English labels, human TTL and loadable encodings; search
with a count, pages, match modes, dates and links that open pruned messages.

The search tests run on SQLite FTS5 and on PostgreSQL (DATABASE_URL=postgres://…)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.template import Context, Template
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryapp.core import search as fulltext
from memoryapp.core.conversation import MessageInput, TurnInput, append_turn
from memoryapp.core.models import Agent, Finding, Memory, Message, Session, Turn
from memoryapp.core.restore import restore_history
from memoryapp.dashboard import charts
from memoryapp.dashboard.settings_views import AgentSettingsForm
from memoryapp.dashboard.templatetags.numbers import format_duration
from memoryapp.lib.tokens import loadable_encodings
from tests.conftest import logged_in_member

HX = {"HX-Request": "true"}
VOID = {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class _Elements(HTMLParser):
    """Every element as (tag, attributes, text inside it, its ancestors' tags)."""

    def __init__(self):
        super().__init__()
        self.elements: list[tuple[str, dict, list[str], list[dict]]] = []
        self._open: list[tuple[str, dict, list[str], list[dict]]] = []

    def handle_starttag(self, tag, attrs):
        element = (tag, dict(attrs), [], [a for _, a, _, _ in self._open])
        self.elements.append(element)
        if tag not in VOID:
            self._open.append(element)

    def handle_startendtag(self, tag, attrs):  # <line/>, <rect/> in SVG
        self.elements.append((tag, dict(attrs), [], [a for _, a, _, _ in self._open]))

    def handle_endtag(self, tag):
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for _, _, text, _ in self._open:
            text.append(data)


def select(html: str, tag: str, within: str = "", **attrs: str) -> list[tuple[dict, str]]:
    """Elements `tag` whose attributes include `attrs` (a class is matched as one of the
    element's classes), inside an element of class `within` if given: (attributes,
    whitespace-normalised text)."""
    parser = _Elements()
    parser.feed(html)

    def matches(a: dict) -> bool:
        for name, value in attrs.items():
            name = name.rstrip("_").replace("_", "-")
            if name == "class":
                if value not in a.get("class", "").split():
                    return False
            elif a.get(name) != value:
                return False
        return True

    return [
        (a, " ".join(" ".join(text).split()))
        for t, a, text, ancestors in parser.elements
        if t == tag
        and matches(a)
        and (not within or any(within in p.get("class", "").split() for p in ancestors))
    ]


# --- charts: pure shapes --------------------------------------------------------------


@pytest.mark.parametrize(
    ("peak", "ticks"),
    [
        (0, [0]),
        (3, [0, 1, 2, 3]),
        (9, [0, 5, 10]),
        (1000, [0, 250, 500, 750, 1000]),
        (1001, [0, 500, 1000, 1500]),
        (123_456, [0, 50_000, 100_000, 150_000]),
    ],
)
def test_ticks_are_round_numbers_from_zero_to_at_least_the_peak(peak, ticks):
    assert charts.nice_ticks(peak) == ticks


def test_tick_labels_are_compact():
    assert [charts.compact_number(v) for v in (0, 950, 2500, 12_000, 1_250_000)] == [
        "0",
        "950",
        "2.5k",
        "12k",
        "1.25M",
    ]


def test_the_daily_chart_covers_every_day_and_empty_days_are_zero():
    first = date(2024, 2, 20)
    chart = charts.daily_chart(
        {date(2024, 2, 21): (800, 200), date(2024, 3, 5): (300, 100)}, first, days=30
    )
    assert len(chart.columns) == 30
    assert chart.columns[0].label == "Tue, Feb 20" and chart.columns[-1].label == "Wed, Mar 20"
    totals = [column.total for column in chart.columns]
    assert totals[1] == 1000 and totals[14] == 400  # Feb 21 and Mar 5 (2024 is a leap year)
    assert totals.count(0) == 28
    assert all(bar.value == 0 and bar.height == 0 for bar in chart.columns[0].bars)
    assert chart.total == 1400 and chart.peak.label == "Wed, Feb 21"
    # Input and output are stacked: the output bar stands on the input bar.
    bar_in, bar_out = chart.columns[1].bars
    assert (bar_in.series, bar_out.series) == (charts.INPUT, charts.OUTPUT)
    assert bar_out.y + bar_out.height == pytest.approx(bar_in.y)
    assert bar_in.y + bar_in.height == chart.plot_height
    # The peak, 1,000, is the top tick: its column is as tall as the plot.
    assert [t.value for t in chart.ticks] == [0, 250, 500, 750, 1000]
    assert bar_in.height + bar_out.height == pytest.approx(chart.plot_height)


def test_the_daily_chart_axes_have_values_and_dates():
    chart = charts.daily_chart({date(2024, 3, 1): (1500, 0)}, date(2024, 2, 1), days=30)
    ticks = {t.value: t for t in chart.ticks}
    assert [t.label for t in chart.ticks] == ["0", "500", "1k", "1.5k"]
    assert ticks[0].y == chart.plot_top + chart.plot_height  # on the baseline
    assert ticks[1500].y == chart.plot_top  # at the top of the plot
    labelled = [c.axis_label for c in chart.columns if c.axis_label]
    # At most 8 dates, the newest always among them, in order.
    assert 4 <= len(labelled) <= charts.MAX_X_LABELS and labelled[-1] == "Mar 1"
    assert chart.columns[-1].axis_label == "Mar 1"
    # A narrow screen keeps every other label, the newest among them.
    kept = [c.axis_label for c in chart.columns if c.axis_label and not c.axis_minor]
    assert kept == labelled[::-1][::2][::-1]
    assert all(c.axis_label for c in chart.columns if c.axis_minor)
    centers = [c.center for c in chart.columns]
    assert centers == sorted(centers) and 0 < centers[0] and centers[-1] < 100


def test_the_turns_chart_puts_input_and_output_side_by_side():
    turns = [Turn(iteration=i, input_tokens=100 * i, output_tokens=10 * i) for i in range(1, 21)]
    chart = charts.tokens_per_turn(turns)
    assert [c.label for c in chart.columns] == [f"#{i}" for i in range(1, 21)]
    assert chart.caption.endswith("#1 to #20")
    last = chart.columns[-1]
    bar_in, bar_out = last.bars
    assert (bar_in.value, bar_out.value) == (2000, 200)
    assert bar_in.x + bar_in.width <= bar_out.x  # side by side, not stacked
    assert bar_in.height == chart.plot_height  # 2,000 is the top tick
    assert chart.columns[9].bars[0].height == pytest.approx(chart.plot_height / 2)
    assert chart.width == charts.SLOT * 20


def test_a_short_session_keeps_bars_narrow_and_no_turns_draw_nothing():
    chart = charts.tokens_per_turn([Turn(iteration=1, input_tokens=5, output_tokens=1)])
    assert chart.width == charts.SLOT * charts.MIN_SLOTS
    assert chart.columns[0].bars[1].height >= 1  # a small non-zero value stays visible
    empty = charts.tokens_per_turn([])
    assert empty.columns == () and empty.total == 0 and empty.peak is None


# --- charts: from the database and on the page -----------------------------------------


def _turn_on(agent: Agent, key: str, when: datetime, tokens_in: int, tokens_out: int) -> None:
    append_turn(
        agent,
        key,
        TurnInput(
            [MessageInput("user", "hello")],
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            timestamp=when,
        ),
    )


@pytest.mark.django_db
def test_tokens_per_day_sums_each_day_of_the_window_in_one_query(agent):
    today = timezone.localdate()
    noon = datetime(today.year, today.month, today.day, 12, tzinfo=UTC)
    _turn_on(agent, "s", noon, 100, 10)
    _turn_on(agent, "s", noon - timedelta(hours=1), 50, 5)
    _turn_on(agent, "s", noon - timedelta(days=3), 7, 3)
    _turn_on(agent, "s", noon - timedelta(days=30), 1000, 1000)  # before the window
    other = Agent.objects.create(name="other")
    _turn_on(other, "s", noon, 999, 999)
    with CaptureQueriesContext(connection) as captured:
        chart = charts.tokens_per_day(agent, today=today)
    assert len(captured) == 1
    totals = [c.total for c in chart.columns]
    assert len(totals) == 30 and totals[-1] == 165 and totals[-4] == 10
    assert sum(totals) == 175
    assert [b.value for b in chart.columns[-1].bars] == [150, 15]


@pytest.mark.django_db
def test_agent_page_draws_the_chart_with_its_numbers_in_text(agent):
    viewer = logged_in_member("viewer", agent, "vera")
    now = timezone.now()
    _turn_on(agent, "s", now, 1200, 300)
    _turn_on(agent, "s", now - timedelta(days=2), 400, 100)
    html = viewer.get("/agents/coder/").content.decode()
    assert len(select(html, "g", within="chart", class_="column")) == 30
    titles = [text for _, text in select(html, "title", within="plot")]
    assert titles[-1].endswith(": 1,500 tokens (1,200 input, 300 output)")
    assert titles[0].endswith(": 0 tokens (0 input, 0 output)")
    svg, _ = select(html, "svg", class_="chart")[0]
    assert svg["width"] == "100%" and svg["role"] == "img"
    plot, _ = select(html, "svg", class_="plot")[0]
    assert plot["width"] == "100%" and plot["preserveaspectratio"] == "none"
    assert plot["viewbox"].startswith("0 0 300 ")
    tick_labels = [text for _, text in select(html, "text", class_="tick")]
    assert tick_labels == ["0", "500", "1k", "1.5k"]
    assert len(select(html, "text", class_="x-label")) >= 4
    rows = select(html, "tr", within="chart-numbers")
    assert len(rows) == 31  # a header and every day
    assert rows[-1][1].endswith("1,200 300 1,500") and rows[-2][1].endswith("0 0 0")
    assert "2,000 tokens in all" in select(html, "figcaption")[0][1]


@pytest.mark.django_db
def test_agent_page_says_so_when_there_were_no_tokens(agent):
    html = logged_in_member("viewer", agent, "vera").get("/agents/coder/").content.decode()
    assert select(html, "p", class_="empty")[0][1] == "No tokens in the last 30 days."
    assert not select(html, "svg", class_="chart")


@pytest.mark.django_db
def test_agent_page_queries_do_not_grow_with_turns_and_days(agent):
    viewer = logged_in_member("viewer", agent, "vera")

    def queries(n):
        for i in range(n):
            _turn_on(agent, f"s{n}", timezone.now() - timedelta(days=i % 25), 10, 1)
        with CaptureQueriesContext(connection) as captured:
            assert viewer.get("/agents/coder/").status_code == 200
        return len(captured)

    assert queries(6) == queries(12)


# --- durations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0, "0 seconds"),
        (1, "1 second"),
        (90, "1 minute, 30 seconds"),
        (3600, "1 hour"),
        (7200, "2 hours"),
        (5400, "1 hour, 30 minutes"),
        (86400, "1 day"),
        (30 * 86400, "30 days"),
        (90061, "1 day, 1 hour"),
        (400 * 86400, "400 days"),
    ],
)
def test_durations_read_as_durations(seconds, said):
    assert format_duration(seconds).replace("\xa0", " ") == said


def test_the_duration_filter_takes_seconds_and_timedeltas():
    template = Template("{% load numbers %}[{{ a|duration }}|{{ b|duration }}|{{ c|duration }}]")
    out = template.render(Context({"a": 2592000, "b": timedelta(hours=2), "c": None}))
    assert out.replace("\xa0", " ") == "[30 days|2 hours|]"


@pytest.mark.django_db
def test_agent_pages_show_the_ttl_as_a_duration(agent):
    agent.ttl_seconds = 2 * 86400
    agent.save()
    viewer = logged_in_member("viewer", agent, "vera")
    overview = viewer.get("/").content.decode().replace("\xa0", " ")
    assert [text for _, text in select(overview, "td")][-1] == "2 days"
    page = viewer.get("/agents/coder/").content.decode().replace("\xa0", " ")
    assert "Sessions live 2 days after their last activity" in page
    assert "172800" not in page


# --- the settings form ------------------------------------------------------------------

SETTINGS = {
    "ttl_seconds_amount": "3",
    "ttl_seconds_unit": "days",
    "max_messages": "50",
    "token_budget": "16000",
    "encoding": "cl100k_base",
}


@pytest.fixture
def staff(agent):
    return logged_in_member("staff", agent, "sam")


@pytest.fixture
def offline_only(monkeypatch):
    """No TIKTOKEN_CACHE_DIR: only the encoding shipped offline can load."""
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    loadable_encodings.cache_clear()
    yield
    loadable_encodings.cache_clear()


def test_settings_labels_read_as_english(db):
    labels = {name: field.label for name, field in AgentSettingsForm().fields.items()}
    assert labels == {
        "ttl_seconds": "TTL",
        "max_messages": "Max messages",
        "token_budget": "Token budget",
        "encoding": "Encoding",
        "system_budget": "System budget",
        "conversation_budget": "Conversation budget",
        "working_budget": "Working-context budget",
        "long_term_budget": "Long-term memory budget",
    }
    assert all(field.help_text for field in AgentSettingsForm().fields.values())


@pytest.mark.django_db
def test_settings_page_shows_labels_a_human_ttl_and_the_loadable_encodings(
    agent, staff, offline_only
):
    agent.ttl_seconds = 7200
    agent.save()
    html = staff.get("/agents/coder/settings/").content.decode()
    # Without the page's random tokens (CSP nonce, CSRF token), which may hold "Ttl".
    words = re.sub(r"[A-Za-z0-9_-]{20,}", "", html)
    assert "Ttl" not in words and "ttl seconds" not in words.lower()
    assert select(html, "legend")[0][1] == "TTL"
    assert select(html, "label", for_="id_max_messages")[0][1] == "Max messages"
    amount, _ = select(html, "input", name="ttl_seconds_amount")[0]
    assert amount["value"] == "2"
    units = select(html, "option", within="settings-fields")
    assert ("hours", "hours") in [(a["value"], t) for a, t in units if "selected" in a]
    encodings = [a["value"] for a, _ in select(html, "option") if a["value"].endswith("_base")]
    assert encodings == ["cl100k_base"] == list(loadable_encodings())
    assert "2 hours after their last activity" in html.replace("\xa0", " ")


@pytest.mark.django_db
def test_ttl_is_entered_as_a_number_and_a_unit(agent, staff, offline_only):
    response = staff.post("/agents/coder/settings/", SETTINGS, headers=HX)
    assert response.status_code == 200
    agent.refresh_from_db()
    assert agent.ttl_seconds == 3 * 86400
    assert "sessions live 3 days" in response.content.decode().replace("\xa0", " ")
    too_long = staff.post(
        "/agents/coder/settings/", {**SETTINGS, "ttl_seconds_amount": "400"}, headers=HX
    )
    html = too_long.content.decode().replace("\xa0", " ")
    assert too_long.status_code == 422 and "At most 365 days." in html
    # What is stored is said as stored, not as the refused form had it.
    assert "sessions live 3 days" in html
    agent.refresh_from_db()
    assert agent.ttl_seconds == 3 * 86400


@pytest.mark.django_db
def test_an_encoding_that_cannot_be_loaded_is_refused(agent, staff, offline_only):
    refused = staff.post(
        "/agents/coder/settings/", {**SETTINGS, "encoding": "o200k_base"}, headers=HX
    )
    assert refused.status_code == 422
    assert "o200k_base is not one of the available choices" in refused.content.decode()
    agent.refresh_from_db()
    assert agent.encoding == "cl100k_base" and agent.ttl_seconds == 3600


@pytest.mark.django_db
def test_a_stored_encoding_that_cannot_be_loaded_is_shown_as_such_and_not_saved(
    agent, staff, offline_only
):
    Agent.objects.filter(pk=agent.pk).update(encoding="p50k_base")
    html = staff.get("/agents/coder/settings/").content.decode()
    selected = [t for a, t in select(html, "option") if "selected" in a and "_base" in t]
    assert selected == ["p50k_base (cannot be loaded here)"]
    refused = staff.post("/agents/coder/settings/", {**SETTINGS, "encoding": "p50k_base"})
    assert refused.status_code == 422 and "TIKTOKEN_CACHE_DIR" in refused.content.decode()
    assert Agent.objects.get(pk=agent.pk).ttl_seconds == 3600


# --- search -----------------------------------------------------------------------------


def _say(agent: Agent, key: str, *texts: str, when: datetime | None = None) -> Session:
    append_turn(
        agent, key, TurnInput([MessageInput("user", text) for text in texts], timestamp=when)
    )
    return Session.objects.get(agent=agent, key=key)


@pytest.fixture
def viewer(agent):
    return logged_in_member("viewer", agent, "vera")


@pytest.mark.django_db
def test_search_counts_and_pages_through_every_hit(agent, viewer, monkeypatch):
    monkeypatch.setattr("memoryapp.dashboard.search_views.PAGE", 5)
    _say(agent, "s1", *[f"parser note number {i}" for i in range(12)])
    first = viewer.get("/agents/coder/search/", {"q": "parser"})
    html = first.content.decode()
    assert select(html, "p", class_="result-count")[0][1].startswith("12 results for “parser”")
    assert "page 1 of 3" in select(html, "p", class_="result-count")[0][1]
    assert [a["href"] for a, _ in select(html, "a", within="pages", rel="next")] == [
        "/agents/coder/search/?q=parser&page=2"
    ]
    numbers = [t for _, t in select(html, "a", within="pages") if t.isdigit()]
    assert numbers == ["2", "3"]
    assert select(html, "span", aria_current="page")[0][1] == "1"
    seen = []
    for number in (1, 2, 3):
        page = viewer.get("/agents/coder/search/", {"q": "parser", "page": number})
        seen += [hit.id for hit in page.context["hits"]]
    assert len(seen) == 12 and len(set(seen)) == 12
    last = viewer.get("/agents/coder/search/", {"q": "parser", "page": 3}).content.decode()
    assert len(select(last, "li", class_="hit")) == 2
    assert not select(last, "a", rel="next") and select(last, "a", rel="prev")
    assert select(last, "ol", class_="hits")[0][0]["start"] == "11"
    fragment = viewer.get(
        "/agents/coder/search/", {"q": "parser", "page": 2}, headers=HX
    ).content.decode()
    assert "<html" not in fragment and len(select(fragment, "li", class_="hit")) == 5


@pytest.mark.django_db
def test_search_queries_do_not_grow_with_hits(agent, viewer):
    def queries(n):
        _say(agent, f"s{n}", *[f"lexer fact {n} {i}" for i in range(n)])
        with CaptureQueriesContext(connection) as captured:
            response = viewer.get("/agents/coder/search/", {"q": "lexer"})
        assert response.status_code == 200
        return len(captured)

    assert queries(3) == queries(6)


@pytest.mark.django_db
def test_phrase_all_words_and_any_word(agent, viewer):
    _say(
        agent,
        "s1",
        "the parser crashes on unicode input",
        "unicode crashes the parser",
        "the parser is fine",
    )

    def found(mode):
        hits = viewer.get("/agents/coder/search/", {"q": "parser crashes", "mode": mode})
        return sorted(hit.seq for hit in hits.context["hits"])

    assert found("phrase") == [1]
    assert found("all") == [1, 2]
    assert found("any") == [1, 2, 3]
    assert found("") == [1, 2]  # all words unless asked otherwise
    html = viewer.get("/agents/coder/search/", {"q": "parser crashes", "mode": "phrase"})
    options = select(html.content.decode(), "option", value="phrase")
    assert "selected" in options[0][0] and options[0][1] == "the exact phrase"
    # A phrase is its words in order and together ("the" counts, or is a gap PostgreSQL
    # keeps for its stop word).
    assert fulltext.count(agent, "crashes the parser", mode="phrase") == 1
    assert fulltext.count(agent, "crashes parser", mode="phrase") == 0
    assert fulltext.count(agent, "crashes parser", mode="all") == 2


@pytest.mark.django_db
def test_each_hit_shows_its_date(agent, viewer):
    said = datetime(2024, 3, 5, 14, 30, tzinfo=UTC)
    session = _say(agent, "s1", "the tokenizer drops emoji", when=said)
    Session.objects.filter(pk=session.pk).update(expires_at=timezone.now() + timedelta(days=1))
    finding = Finding.objects.create(session=session, tool="grep", fact="tokenizer in lex.py")
    Finding.objects.filter(pk=finding.pk).update(updated_at=datetime(2024, 3, 6, 9, 0, tzinfo=UTC))
    memory = Memory.objects.create(agent=agent, content="the tokenizer is tiktoken")
    Memory.objects.filter(pk=memory.pk).update(updated_at=datetime(2024, 3, 7, 8, 15, tzinfo=UTC))
    hits = {h.kind: h for h in fulltext.search(agent, "tokenizer", limit=10)}
    assert hits["message"].at == said
    assert hits["finding"].at == datetime(2024, 3, 6, 9, 0, tzinfo=UTC)
    assert hits["memory"].at == datetime(2024, 3, 7, 8, 15, tzinfo=UTC)
    html = viewer.get("/agents/coder/search/", {"q": "tokenizer"}).content.decode()
    times = sorted(t for _, t in select(html, "time"))
    assert times == ["2024-03-05 14:30", "2024-03-06 09:00", "2024-03-07 08:15"]
    assert select(html, "time")[0][0]["datetime"].startswith("2024-03-0")


@pytest.mark.django_db
def test_a_pruned_message_and_a_finding_link_to_the_message_with_at(agent, viewer):
    agent.max_messages = 4
    agent.save()
    _say(agent, "s1", "the flaky test is in test_io.py")
    for i in range(6):
        session = _say(agent, "s1", f"later message {i}")
    history = restore_history(session, max_messages=4, max_tokens=10_000)
    kept = [m["seq"] for m in history["messages"]]
    assert 1 not in kept  # the hit is pruned
    message = Message.objects.get(session=session, seq=1)
    Finding.objects.create(session=session, tool="pytest", fact="flaky io test", message=message)
    html = viewer.get("/agents/coder/search/", {"q": "flaky"}).content.decode()
    links = {a["href"] for a, _ in select(html, "a", within="hit")}
    assert links == {"/agents/coder/sessions/s1/?at=1#msg-1"}
    assert len(select(html, "li", class_="hit")) == 2  # the message and the finding


@pytest.mark.django_db
def test_search_of_nothing_says_so_and_bad_pages_show_a_page(agent, viewer):
    _say(agent, "s1", "parser")
    html = viewer.get("/agents/coder/search/", {"q": "zebra"}).content.decode()
    assert select(html, "p", class_="result-count")[0][1] == "Nothing matches “zebra”, all words."
    last = viewer.get("/agents/coder/search/", {"q": "parser", "page": "99"})
    assert [h.seq for h in last.context["hits"]] == [1]
    assert viewer.get("/agents/coder/search/", {"q": "parser", "page": "x"}).status_code == 200


@pytest.mark.parametrize("language", ["en-us", "de", "fr", "hi"])
def test_thousands_says_what_intcomma_says(language):
    """`thousands` is humanize's intcomma made cheap for whole numbers: the same text for
    every value in every language (German dots, French narrow spaces, and a language
    that does not group by three, where it leaves the work to intcomma)."""
    from django.contrib.humanize.templatetags.humanize import intcomma
    from django.utils import translation

    from memoryapp.dashboard.templatetags.numbers import thousands

    values = [0, 7, 999, 1000, -1000, 12345, 1234567890, 10**20, 2.5, 1234.5, "4500", "x",
              None, True]  # fmt: skip
    with translation.override(language):
        for value in values:
            assert thousands(value) == intcomma(value), (language, value)


@pytest.mark.django_db
def test_search_marks_content_words_and_finds_nothing_for_stop_words(agent, viewer):
    Memory.objects.create(agent=agent, content="The staging cluster is where we deploy first")
    html = viewer.get("/agents/coder/search/", {"q": "the staging"}).content.decode()
    assert "<mark>staging</mark>" in html
    assert "<mark>The</mark>" not in html and "<mark>the</mark>" not in html
    html = viewer.get("/agents/coder/search/", {"q": "the"}).content.decode()
    assert "staging cluster" not in html


@pytest.mark.django_db
def test_a_file_path_finds_what_names_it_in_every_mode(agent):
    # PostgreSQL keeps `tests/__init__.py` as one lexeme; FTS5 splits it into words.
    named = Memory.objects.create(agent=agent, content="# not a heading: tests/__init__.py")
    Memory.objects.create(agent=agent, content="The tests of the parser live in tests/unit")
    for query, mode in [
        ("Fix tests/__init__.py", fulltext.ANY),
        ("tests/__init__.py heading", fulltext.ALL),
        ("what is in tests/__init__.py?", fulltext.ANY),
    ]:
        hits = fulltext.search(agent, query, kinds=("memory",), mode=mode)
        assert hits and hits[0].id == named.id, (query, mode)
    assert (
        fulltext.search(agent, "tests/__init__.py parser", kinds=("memory",), mode=fulltext.ALL)
        == []
    )
    # Names made of the characters a tsquery would read as syntax are only ever words.
    for query in ["-x/y", "a..b/c", "x/y-", "!x/y", "(a/b)", "a/b:*", "a'b/c"]:
        fulltext.search(agent, query, kinds=("memory",))
        fulltext.search(agent, query, kinds=("memory",), mode=fulltext.ALL)
