"""Which words of a query carry its meaning, and whether a text bears on them.

Search and recall drop stop words ("the", "I", "we", "can", ...) before matching: a
query of stop words alone matches nothing, and a stop word is never highlighted as a
match. A `Query`, read once, says which of its content words and identifiers a text
holds (`matched`: a word matches its plural and its -ing/-ed forms, as a stemmer would),
and whether what a text holds clears the floor a memory must clear to be put in an
agent's context without being asked for (`clears`): some of the query's content words
(two, or three for the long hint a session makes; a word's forms count once), or one
identifier (a word with `_`,
a digit, or a path or dotted name such as `src/app.py`), since an identifier names one
thing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# English function words and the fillers of questions and tasks ("how do I", "please").
STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are aren as at be because
    been before being below between both but by can cannot could couldn did didn do does
    doesn doing don down during each either else ever every few for from further get gets
    got had hadn has hasn have haven having he her here hers herself him himself his how
    i if in into is isn it its itself just let lets like may me might more most much must
    mustn my myself need no nor not now of off on once only or other ought our ours
    ourselves out over own please same shall shan she should shouldn so some such than
    that the their theirs them themselves then there these they this those through to
    too under until up upon us very was wasn we were weren what when where whether which
    while who whom whose why will with within without won would wouldn yes yet you your
    yours yourself yourselves s t d ll m re ve
    """.split()
)

_WORD = re.compile(r"\w+", re.UNICODE)
# An identifier: a path or dotted name, or a word joined by `_`, or one holding a digit.
_IDENTIFIER = re.compile(r"[\w.\-]*[/.][\w.\-/]*\w|\w*_\w+|\w*\d\w*", re.UNICODE)


def content_words(words: list[str]) -> list[str]:
    """`words` without the stop words, in order."""
    return [w for w in words if w.casefold() not in STOPWORDS]


def _stem(word: str) -> str:
    """A word's plain form, enough to match `tests` with `test` and `running` with `run`."""
    w = word.casefold()
    for suffix in ("ing", "ed", "es", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            if suffix == "es" and not w[:-2].endswith(("s", "x", "z", "ch", "sh")):
                continue  # writes -> write (then "s"), but boxes -> box
            w = w[: -len(suffix)]
            break
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiou":  # running -> runn -> run
        w = w[:-1]
    if len(w) > 3 and w.endswith("e"):  # migrate, migrating -> migrat
        w = w[:-1]
    return w


def identifiers(text: str) -> set[str]:
    """The identifiers `text` names (casefolded): `test_upload_resume`, `src/app.py`, `v2`."""
    found = set()
    for token in text.split():
        token = token.strip("`'\"()[]{}<>,;:!?").casefold()
        if token and _IDENTIFIER.fullmatch(token) and not token.replace(".", "").isdigit():
            found.add(token.rstrip("."))
    return found


def query_terms(query: str) -> list[str]:
    """The query's distinct content words, casefolded, in order."""
    seen: list[str] = []
    for word in _WORD.findall(query.casefold()):
        if word not in STOPWORDS and word not in seen:
            seen.append(word)
    return seen


@dataclass(frozen=True)
class Query:
    """A query's content words and identifiers, read once for the many texts it is
    matched with."""

    terms: tuple[str, ...]
    identifiers: frozenset[str]

    @classmethod
    def of(cls, query: str) -> Query:
        return cls(tuple(query_terms(query)), frozenset(identifiers(query)))

    def matched(self, text: str) -> list[str]:
        """The content words and identifiers that `text` holds, in the query's order."""
        stems = {_stem(w) for w in _WORD.findall(text.casefold())}
        matched = [w for w in self.terms if _stem(w) in stems]
        text_folded = text.casefold()
        for identifier in sorted(self.identifiers):
            if identifier in text_folded and identifier not in matched:
                matched.append(identifier)
        return matched

    def names(self, matched: list[str]) -> bool:
        """Whether `matched` (of `self.matched`) holds one of the query's identifiers."""
        return any(m in self.identifiers for m in matched)

    def clears(self, matched: list[str], words: int = 2) -> bool:
        """Whether a text holding `matched` clears the floor: `words` of the content
        words (two unless asked: a long query shares two words with much that it does
        not bear on), or one of the identifiers. Forms of one word count once: a hint
        that says "test", "tests", "run" and "running" shares two words with a memory
        about running tests, not four."""
        return len({_stem(w) for w in matched}) >= words or self.names(matched)


# The words that tie a text to one language's ecosystem (its name, its tools and build
# files); ambiguous English words count only in a phrase (`mix test`, `go build`).
ECOSYSTEM_WORDS: dict[str, tuple[str, ...]] = {
    "python": ("python", "pytest", "pip", "pipenv", "poetry", "pyproject", "virtualenv",
               "venv", "django", "flask", "mypy", "pydantic", "uv run", "uv sync"),
    "rust": ("rust", "cargo", "rustc", "rustup", "clippy", "crates.io"),
    "elixir": ("elixir", "phoenix", "liveview", "exunit", "mix test", "mix deps",
               "mix compile", "mix.exs", "hex.pm", "erlang"),
    "javascript": ("javascript", "typescript", "node", "nodejs", "npm", "yarn", "pnpm",
                   "jest", "vitest", "package.json", "webpack", "vite", "eslint"),
    "go": ("golang", "go test", "go build", "go mod", "go.mod", "go run"),
    "ruby": ("ruby", "rails", "rspec", "bundler", "bundle exec", "gemfile", "rubocop"),
    "java": ("java", "maven", "gradle", "junit", "pom.xml", "kotlin"),
}  # fmt: skip
# A language name, as working context or a file's language gives it, to its ecosystem.
LANGUAGE_ECOSYSTEM = {
    "typescript": "javascript", "tsx": "javascript", "jsx": "javascript", "heex": "elixir",
    "erlang": "elixir", "kotlin": "java",
}  # fmt: skip
_ECOSYSTEM_PATTERNS = {
    name: re.compile(
        r"(?<![\w.])(?:"
        + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in words)
        + r")(?![\w])",
        re.IGNORECASE,
    )
    for name, words in ECOSYSTEM_WORDS.items()
}


def ecosystem_of(language: str) -> str | None:
    """The ecosystem of a language name (`Rust`, `typescript`), None when not one we know."""
    name = language.strip().casefold()
    name = LANGUAGE_ECOSYSTEM.get(name, name)
    return name if name in ECOSYSTEM_WORDS else None


def ecosystems(text: str) -> set[str]:
    """The ecosystems `text` names (`Run the tests with python -m pytest`: python)."""
    return {name for name, pattern in _ECOSYSTEM_PATTERNS.items() if pattern.search(text)}


def of_another_ecosystem(text: str, ecosystem: str | None) -> bool:
    """Whether `text` is about another language's project than `ecosystem`: it names some
    ecosystem, and not this one. Unknown (None) excludes nothing."""
    if ecosystem is None:
        return False
    named = ecosystems(text)
    return bool(named) and ecosystem not in named


# Stop words that change what a fact says: never dropped from its key.
NEGATIONS = frozenset(
    "no not nor never cannot without don doesn didn isn aren wasn weren won wouldn "
    "shouldn couldn hasn haven hadn mustn shan t".split()
)


def fact_key(text: str) -> str:
    """What a fact says, for telling the same fact said again: its content words and
    negations, stemmed, in order. `The staging DB is read-only on Sundays` and `Staging
    DB: read only on Sunday.` give one key; `Tests need Redis` and `Tests do not need
    Redis` two, as do `A depends on B` and `B depends on A`. A text of stop words alone
    is its own words."""
    words = _WORD.findall(text.casefold())
    kept = [_stem(w) for w in words if w not in STOPWORDS or w in NEGATIONS]
    return " ".join(kept) if kept else " ".join(words)
