"""HTML assertions by selector for the view tests: `select(html, "form", method="post")`
finds elements by tag and attributes, with their text, using only the standard library's
parser (no selector library is a dependency)."""

from html.parser import HTMLParser

VOID = {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class Elements(HTMLParser):
    """Every element as (tag, attributes, text inside it), in document order."""

    def __init__(self):
        super().__init__()
        self.elements: list[tuple[str, dict, list[str]]] = []
        self._open: list[tuple[str, dict, list[str]]] = []

    def handle_starttag(self, tag, attrs):
        element = (tag, dict(attrs), [])
        self.elements.append(element)
        if tag not in VOID:
            self._open.append(element)

    def handle_endtag(self, tag):
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for _, _, text in self._open:
            text.append(data)


def elements(html: str) -> list[tuple[str, dict, list[str]]]:
    parser = Elements()
    parser.feed(html)
    return parser.elements


def select(html: str, tag: str = "", **attrs: str) -> list[tuple[dict, str]]:
    """The elements of `tag` (any, if empty) whose attributes include `attrs` (`_` in a
    name reads as `-`), each as (attributes, whitespace-normalised text)."""
    wanted = {k.replace("_", "-"): v for k, v in attrs.items()}
    return [
        (a, " ".join(" ".join(text).split()))
        for t, a, text in elements(html)
        if (not tag or t == tag) and all(a.get(k) == v for k, v in wanted.items())
    ]


def one(html: str, tag: str = "", **attrs: str) -> tuple[dict, str]:
    """The only element that `select` finds (fails unless there is exactly one)."""
    found = select(html, tag, **attrs)
    assert len(found) == 1, (tag, attrs, found)
    return found[0]
