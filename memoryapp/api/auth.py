"""Bearer-key authentication: a key is looked up by its hash and sees only its agent.

Each key has its own rate limit; an address that sends too many wrong keys is refused
for a while (the middleware answers its requests 429)."""

from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from ninja.security import HttpBearer

from memoryapp.api import answers, restores
from memoryapp.api.schemas import check_session_key
from memoryapp.core import ratelimit, rows
from memoryapp.core.limits import MAX_MESSAGES_SETTING
from memoryapp.core.models import Agent, ApiKey, Message, Session, hash_api_key


class RateLimited(Exception):
    def __init__(self, retry_after: int, detail: str) -> None:
        super().__init__(detail)
        self.retry_after = retry_after
        self.detail = detail

    def response(self) -> JsonResponse:
        """The 429 outside django-ninja (its API answers through `api._rate_limited`)."""
        response = JsonResponse({"detail": self.detail}, status=429)
        response["Retry-After"] = str(self.retry_after)
        return response


# Longer is no key of ours: refused without a lookup.
MAX_TOKEN_LENGTH = 200
# A request this process makes to its own API for one it counted already (an MCP tool's
# call, api/mcp_http.py): the WSGI environ names the key's hash, and the request is not
# counted again. Only the process sets it (a client's headers arrive as HTTP_*).
COUNTED_FOR = "memoryapp.counted_for"


def client_address(request: HttpRequest) -> str:
    return request.META.get("REMOTE_ADDR") or "unknown"


def bearer_token(request: HttpRequest) -> str | None:
    """The request's bearer token as ninja's HttpBearer reads it (None without one)."""
    value = request.headers.get("Authorization")
    if not value:
        return None
    scheme, *rest = value.split(" ")
    return " ".join(rest) if scheme.lower() == "bearer" else None


def count_key_early(request: HttpRequest) -> ratelimit.Counted | None:
    """What the middleware counts of the request's key in its own round trip to the
    cache, before the key is looked up: the key's limit by the token's hash. Only with
    Redis (in process memory there is no round trip to save) and while wrong keys are
    limited: a wrong token is counted under its own hash, only when its address is
    refused nothing (ratelimit.start_hit_and_check), so an address makes at most as many such
    counters per window as it may send wrong keys. None: authentication counts the key."""
    limit = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_KEY)
    failures = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES)
    if limit.count <= 0 or failures.count <= 0 or not ratelimit.one_round_trip():
        return None
    token = bearer_token(request)
    if not token or len(token) > MAX_TOKEN_LENGTH:
        return None
    return ("key", hash_api_key(token), limit)


def start_address_limits(request: HttpRequest) -> None:
    """Count this request against its client address, read the address's failed
    authentications and count the request's API key (by its hash, whose limit
    authentication then applies), in one round trip to the cache that is sent now and
    read by address_refusal: the key's lookup in the database runs meanwhile (a round
    trip to Redis after a pause cost ~0.5 ms here, and an agent's requests come after
    pauses)."""
    if request.META.get(COUNTED_FOR):
        return
    address = client_address(request)
    failures = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES)
    limit = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_ADDRESS)
    key = count_key_early(request)
    pending = ratelimit.start_hit_and_check(
        "address", address, limit, check=("auth-failure", failures), also=key
    )
    request.address_limits = (pending, address, limit, key)  # type: ignore[attr-defined]


def address_refusal(request: HttpRequest) -> RateLimited | None:
    """Too many requests, or too many wrong keys, from the request's address (what
    start_address_limits sent, read here once; None when nothing was sent or all is
    within its limits). Notes the key's count for authentication."""
    started = request.__dict__.pop("address_limits", None)
    if started is None:
        return None
    pending, address, limit, key = started
    failing, over, key_over = pending.answer()
    if key is not None:
        request.key_counted = (key[1], key_over)  # type: ignore[attr-defined]
    if failing is not None:
        detail = f"too many requests with a wrong API key from {address}"
        return RateLimited(failing, f"{detail}; retry after {failing} seconds")
    if over is not None:
        detail = f"more than {limit.count} requests in {limit.seconds} seconds from {address}"
        return RateLimited(over, f"{detail}; retry after {over} seconds")
    return None


def may_write_before_lookup(request: HttpRequest, key_hash: str) -> bool:
    """Whether a request whose key is looked up in its write's own statement
    (sessions.post_turn_at_once) may send that write: what authenticate refuses a
    usable key for is known before the lookup. A refused address raises RateLimited
    here, as authenticate would (whatever the key). False when the key's limit cannot
    be told before the lookup (counted in process memory, where only a usable key is
    counted, or over the limit, which only a usable key is answered 429 for):
    authenticate then decides, as before, without the address's answer, read here once."""
    refused = address_refusal(request)
    if refused is not None:
        raise refused
    if ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_KEY).count <= 0:
        return True
    counted, retry_after = _counted_early(request, key_hash)
    return counted and retry_after is None


def _counted_early(request: HttpRequest, key_hash: str) -> tuple[bool, int | None]:
    """Whether the middleware counted this key in its round trip (count_key_early), and
    if so its answer: the seconds to wait when over the key's limit, else None."""
    if request.META.get(COUNTED_FOR) == key_hash:
        return True, None
    early = getattr(request, "key_counted", None)
    if early is not None and early[0] == key_hash:
        return True, early[1]
    return False, None


def _find_key(
    token: str, session_key: str | None = None, history: tuple[int | None] | None = None
) -> ApiKey | None:
    """The usable key `token` is, with its agent: what `ApiKey.objects.usable()
    .select_related("agent").filter(key_hash=…).first()` answers, in a third of its time
    (every request authenticates; the ORM compiled that query anew each time).

    With `session_key`, the agent's live session of that key comes in the same round
    trip (or None), as `key.session_read = (session_key, session)`: see live_session.
    With `history` too, `(max_messages,)` of a restore (None: the agent's), the
    session's messages come along when the restore reads them all at once (no more of
    them than the limit and one: conversation._choose) and they are few (READ_WITH_KEY),
    as `key.messages_read`: see messages_read. Only those after this process's copy of
    the session's messages are read, when the statement finds the copy still stored
    (api/restores.py)."""
    statement = _key_statement(session_key is not None, history is not None)
    key_hash = hash_api_key(token)
    params: list = [key_hash]
    if session_key is not None:
        params = [session_key, timezone.now(), *params]
    copy = None
    # A copy is made and used only outside a transaction: see restores.ROW_VERSION_SQL.
    copying = history is not None and not connection.in_atomic_block
    if history is not None:
        copy = restores.COPIES.get(key_hash, session_key) if copying else None
        named, versions = restores.NO_COPY if copy is None else copy.params()
        params = [history[0], *named, *params, versions]
    # A request's first statement: without a health check's round trip before it.
    found = rows.first_read(statement.sql, params)
    if not found:
        return None
    row, at = found[0], statement.lookup_start
    key = statement.key.instance(row, at)
    key.agent = statement.agent.instance(row, at + len(statement.key))
    if session_key is not None:
        at += len(statement.key) + len(statement.agent)
        read = row[at] is not None  # the session's id: NULL when the join found none
        session = statement.session.instance(row, at) if read else None
        key.session_read = (session_key, session)
        if history is not None and session is not None:
            at = (key_hash, session_key) if copying else None
            messages = _restored(statement, row, found[1:], session, at, copy)
            if messages is not None:
                key.messages_read = (session_key, history[0], session.pk, messages)
    return key


def _restored(
    statement: _KeyStatement,
    row: tuple,
    new: list[tuple],
    session: Session,
    at: tuple[str, str] | None,
    copy: restores.Copy | None,
) -> list[dict[str, Any]] | None:
    """The session's every message, oldest first, from the statement's rows `new` (the
    messages after `copy`'s, or all of them) and the copy it was sent; with `at` (the
    key's hash and the session's key: none inside a transaction), they become the
    process's copy there. None when the statement did not read them (a session too long
    for the limit or READ_WITH_KEY: see _KeyStatement) or found the copy no longer what
    is stored (then dropped)."""
    whole, after, incarnation, same = row[statement.restore_at : statement.restore_at + 4]
    if not whole:
        if copy is not None and at is not None and session.message_count > READ_WITH_KEY:
            restores.COPIES.drop(*at)  # never to be read with the key again
        return None
    # The statement read after the copy (-1: it read them all) only if it named this
    # session and incarnation; the rows the copy holds must still be what is stored.
    if after >= 0:
        assert copy is not None and at is not None
        if not same:
            restores.COPIES.drop(*at)
            return None
    messages = answers.history_messages(new)
    if after >= 0:
        messages = [*copy.messages, *messages]
    if len(messages) != session.message_count:
        return None  # not all of them (a gap in the seqs): read the usual way
    if at is not None and messages:
        before, size = ("", 0) if after < 0 else (copy.versions, copy.size)
        versions = restores.versions_text(new, answers.HISTORY_MESSAGE_WIDTH, before)
        size += restores.size_of(new)
        copied = restores.Copy(session.pk, incarnation, tuple(messages), versions, size)
        restores.COPIES.keep(*at, copied)
    return messages


# The most messages a restore reads with its key (a session's size, whatever the limit).
# Authentication reads them before a rate limit or the view can refuse the request: this
# bounds what a refused one costs. A longer session's restore reads after the lookup, as
# before (a round trip saved is little beside its read).
READ_WITH_KEY = 500


class _KeyStatement:
    """The key's lookup (with its agent; the session a path names; a restore's messages)."""

    def __init__(self, with_session: bool, with_messages: bool) -> None:
        self.key, self.agent = rows.columns(ApiKey, "k"), rows.columns(Agent, "a")
        self.session = rows.columns(Session, "s")
        select = f"{self.key.sql}, {self.agent.sql}"
        joins = f"FROM {ApiKey._meta.db_table} k JOIN {Agent._meta.db_table} a ON a.id = k.agent_id"
        if with_session:
            select += f", {self.session.sql}"
            joins += (
                f" LEFT JOIN {Session._meta.db_table} s ON s.agent_id = k.agent_id"
                " AND s.key = %s AND s.expires_at > %s"
            )
        restore = ""
        if with_messages:
            # After the lookup's columns: whether the session's messages are read
            # (`whole`: few enough, see READ_WITH_KEY and conversation._choose), and the
            # seq they are read after: the count of this process's copy of them when the
            # copy names this session and the server's incarnation, else -1 (a seq is 0 or
            # more: PositiveIntegerField); and the incarnation (api/restores.py).
            restore = (
                f", s.message_count <= {READ_WITH_KEY} "
                "AND s.message_count <= COALESCE(CAST(%s AS bigint), a.max_messages) + 1, "
                "CASE WHEN s.id = CAST(%s AS bigint) AND "
                f"{restores.INCARNATION_SQL} = CAST(%s AS text) "
                f"THEN CAST(%s AS integer) ELSE -1 END, {restores.INCARNATION_SQL}"
            )
        lookup = f"SELECT {select}{restore} {joins} WHERE k.key_hash = %s AND k.revoked_at IS NULL"
        width = len(self.key) + len(self.agent) + len(self.session)
        if not with_messages:
            self.sql, self.lookup_start = lookup, 0
            return
        # The lookup's row, then each message as a row of its own, oldest first: the
        # message's columns first (history_messages reads them by position), then what
        # tells this version of its row from any other (restores.ROW_VERSION_SQL), then
        # the lookup's, NULL in a message's row (they are not sent again with every
        # message). The lookup's row ends with the restore's columns above, then whether
        # the messages numbered up to the seq read after are the copy's.
        self.lookup_start = answers.HISTORY_MESSAGE_WIDTH + restores.ROW_VERSION_WIDTH
        self.restore_at = self.lookup_start + width
        found = [f"c{i}" for i in range(width)]
        session_at = len(self.key) + len(self.agent)
        session_id = found[session_at + self.session.attnames.index("id")]
        count = found[session_at + self.session.attnames.index("message_count")]
        # The lookup's row has seq -1 (a message's is 0 or more): it comes first.
        nulls = ", ".join(["-1", *["NULL"] * (self.lookup_start - 1)])
        messages = Message._meta.db_table
        self.sql = (
            f"WITH ka ({', '.join(found)}, whole, after, incarnation) AS ({lookup}) "
            f"SELECT {nulls}, {', '.join(found)}, ka.whole, ka.after, ka.incarnation, "
            "copied.same FROM ka, "
            # Whether the session's messages numbered up to the copy's count are still
            # the copy's rows as they were (their versions, sent as the statement's last
            # parameter), checked only when the messages are read after the copy.
            # `m.seq >= 0` holds for every message: it makes the condition a range, which
            # the planner reckons to be few rows and reads through message_unique_seq as
            # it does the messages' read; with `seq <=` alone it scanned the whole table
            # of bench/peer.py's database (0.9 ms), whose statistics said each session
            # held thousands.
            "LATERAL (SELECT COALESCE(array_agg(m.xmin ORDER BY m.seq) = "
            f"CAST(CAST(%s AS text) AS xid[]), false) FROM {messages} m "
            f"WHERE ka.whole AND ka.after >= 0 AND m.session_id = ka.{session_id} "
            "AND m.seq >= 0 AND m.seq <= ka.after) copied (same) "
            f"UNION ALL SELECT {answers.HISTORY_MESSAGE_SQL}, {restores.ROW_VERSION_SQL}, "
            f"{', '.join(['NULL'] * (width + 4))} "
            # A subquery per lookup row (LATERAL, kept apart from the join by OFFSET 0),
            # read through message_unique_seq as the check above is. As a join, the
            # planner, not knowing the session, reckoned the rows of an average session
            # from the table's statistics: where they counted a few long sessions (one of
            # 100,000 messages beside two others), it scanned the whole table for a
            # session of 150 (16 ms, where the index read them in 0.5).
            f"FROM ka, LATERAL (SELECT m.*, m.xmin FROM {messages} m WHERE ka.whole "
            f"AND m.session_id = ka.{session_id} AND m.seq > ka.after "
            f"AND m.seq <= ka.{count} OFFSET 0) m "
            "ORDER BY 1"  # seq
        )


@functools.cache
def _key_statement(with_session: bool, with_messages: bool) -> _KeyStatement:
    return _KeyStatement(with_session, with_messages)


def messages_read(request: HttpRequest, session: Session, max_messages: int | None) -> Any:
    """The messages of `session` that authentication read with the key for a restore
    with `max_messages` asked (None: the agent's), if it read them (taken once), else
    None: conversation.restore_history's `everything`."""
    read = request.auth.__dict__.pop("messages_read", None)
    if read is None:
        return None
    session_key, limit, session_id, messages = read
    if (session_key, limit, session_id) != (session.key, max_messages, session.pk):
        return None
    return messages if len(messages) == session.message_count else None


def _session_in_path(request: HttpRequest) -> str | None:
    """The session key of a `/api/v1/sessions/{key}/…` request (None for any other, or
    a key the view will refuse): authentication reads that session in its own query."""
    match = request.resolver_match
    if match is None or "key" not in match.kwargs:
        return None
    if not request.path_info.startswith("/api/v1/sessions/"):
        return None
    try:
        return check_session_key(match.kwargs["key"])
    except ValueError:
        return None


def _restore_in_path(request: HttpRequest) -> tuple[int | None] | None:
    """`(max_messages,)` of a `GET …/history` (None when not asked: the agent's), whose
    messages authentication may read in its own statement; None for any other request,
    or one whose max_messages the view will refuse (it checks the limit it reads). On
    PostgreSQL (the statement writes each message's JSON fields: answers.HISTORY_MESSAGE_SQL)
    with the API's own answers (answers.ENABLED)."""
    match = request.resolver_match
    if request.method != "GET" or match is None or match.url_name != "get_history":
        return None
    if connection.vendor != "postgresql" or not answers.ENABLED:
        return None
    asked = request.GET.get("max_messages")
    if asked is None:
        return (None,)
    number = digits_within(asked, MAX_MESSAGES_SETTING)
    return None if number is None else (number,)


def digits_within(value: str, bound: int) -> int | None:
    """`value` as a number when it is written in ASCII digits, no longer than `bound`
    written out (int() refuses 4,300 digits; a leading zero is left to the view), and is
    no more than `bound`; else None."""
    if not (value.isascii() and value.isdigit()) or len(value) > len(str(bound)):
        return None
    number = int(value)
    return number if number <= bound else None


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        usable = token and len(token) <= MAX_TOKEN_LENGTH
        session_key = _session_in_path(request) if usable else None
        history = _restore_in_path(request) if session_key is not None else None
        key = _find_key(token, session_key, history) if usable else None
        # The address's limits, sent by the middleware before the lookup, answered by now.
        refused = address_refusal(request)
        if refused is not None:
            raise refused
        if key is None:
            failures = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_AUTH_FAILURES)
            ratelimit.hit("auth-failure", client_address(request), failures)
            return None
        limit = ratelimit.Limit.parse(settings.MEMORYAPP_RATE_LIMIT_KEY)
        # Counted by the middleware in its round trip (one per request), else here.
        counted, retry_after = _counted_early(request, key.key_hash)
        if not counted:
            retry_after = ratelimit.hit("key", key.key_hash, limit)
        if retry_after is not None:
            ratelimit.note_refusal(key.pk)
            raise RateLimited(
                retry_after,
                f"this API key made more than {limit.count} requests in {limit.seconds} "
                f"seconds; retry after {retry_after} seconds",
            )
        key.touch()
        KNOWN_KEYS.note(key)
        return key


class _KnownKeys:
    """The agent's encoding of each API key this process authenticated, by the key's hash:
    sessions.post_turn_at_once looks a key up in its write only when the key is known
    here (a wrong key never costs a write's statement) and counts tokens in that encoding
    before the statement finds the agent. Bounded (emptied when full: a key forgotten is
    authenticated the usual way once more)."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self.encodings: dict[str, str] = {}

    def encoding(self, key_hash: str) -> str | None:
        return self.encodings.get(key_hash)

    def note(self, key: ApiKey) -> None:
        if self.encodings.get(key.key_hash) == key.agent.encoding:
            return
        if len(self.encodings) >= self.LIMIT:
            self.encodings.clear()
        self.encodings[key.key_hash] = key.agent.encoding


KNOWN_KEYS = _KnownKeys()
