"""memoryapp.lib.render: agent markdown through a parser and a sanitiser, tool calls as
people read them, tool results under the call they answer."""

from html.parser import HTMLParser

from memoryapp.lib import render


def _tags(html: str) -> list[tuple[str, list]]:
    found = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, attrs))

    Tags().feed(html)
    return found


def test_markdown_renders_code_lists_links_and_tables():
    html = render.markdown_html(
        "# Plan\n\n- read `a.py`\n- run **tests**\n\n```python\nprint(1 < 2)\n```\n\n"
        "[docs](https://example.com/x)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    )
    assert "<h1>Plan</h1>" in html
    assert "<li>read <code>a.py</code></li>" in html and "<strong>tests</strong>" in html
    assert '<pre><code class="language-python">print(1 &lt; 2)\n</code></pre>' in html
    assert '<a href="https://example.com/x" rel="nofollow noopener noreferrer">docs</a>' in html
    assert "<td>1</td>" in html


def test_markdown_never_lets_html_scripts_or_dangerous_links_through():
    html = render.markdown_html(
        "<script>alert(1)</script>\n\n<img src=x onerror=alert(1)>\n\n"
        "[a](javascript:alert(1)) [b](data:text/html,x) ![i](https://evil.example/p.png)\n\n"
        '<a href="https://x" onclick="alert(1)">raw</a>'
    )
    tags = _tags(html)
    assert {tag for tag, _ in tags} <= {"p", "a"}
    assert all(name == "href" or name == "rel" for _, attrs in tags for name, _ in attrs)
    assert all(
        value.startswith("https://") for _, attrs in tags for n, value in attrs if n == "href"
    )
    assert "&lt;script&gt;" in html  # shown as text, not dropped silently
    assert "evil.example" not in html


def test_long_messages_collapse_and_preview_on_one_line():
    assert not render.is_long("short\ntext")
    assert render.is_long("x" * (render.COLLAPSE_CHARS + 1))
    assert render.is_long("line\n" * render.COLLAPSE_LINES)
    text = "first line\n\n" + "word " * 500
    preview = render.preview(text)
    assert "\n" not in preview and preview.startswith("first line word")
    assert preview.endswith("…") and len(preview) <= render.PREVIEW_CHARS + 1


def test_tool_calls_of_every_shape_read_as_name_and_pretty_arguments():
    calls = render.tool_calls(
        [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "Read", "arguments": '{"file_path": "/a.py", "limit": 5}'},
            },
            {"id": "toolu_2", "name": "Bash", "input": {"command": "pytest -q"}},
            {"id": "c3", "function": {"name": "shell", "arguments": "ls -la"}},  # not JSON
            {"id": "c4", "name": "noop"},
            "not a call",
        ]
    )
    assert [(c.id, c.name) for c in calls] == [
        ("call_1", "Read"),
        ("toolu_2", "Bash"),
        ("c3", "shell"),
        ("c4", "noop"),
    ]
    assert calls[0].arguments == '{\n  "file_path": "/a.py",\n  "limit": 5\n}'
    assert calls[1].arguments == '{\n  "command": "pytest -q"\n}'
    assert calls[2].arguments == "ls -la" and calls[3].arguments == ""
    assert render.tool_calls("[{'id': 'x'}]") == [] and render.tool_calls(None) == []


def test_each_tool_result_sits_under_the_call_it_answers():
    messages = [
        {"seq": 1, "role": "user", "content": "fix it"},
        {
            "seq": 2,
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "a", "name": "Read", "input": {"file_path": "x"}},
                {"id": "b", "name": "Bash", "input": {"command": "ls"}},
            ],
        },
        {"seq": 3, "role": "tool", "tool_call_id": "b", "content": "x.py"},
        {"seq": 4, "role": "tool", "tool_call_id": "a", "content": "print(1)"},
        {"seq": 5, "role": "tool", "tool_call_id": "gone", "content": "its call is not shown"},
        {"seq": 6, "role": "tool", "tool_call_id": "a", "content": "a second answer to a"},
    ]
    shown = render.thread(messages)
    assert [m["seq"] for m in shown] == [1, 2, 5, 6]
    calls = shown[1]["calls"]
    assert [(c.name, c.result["seq"]) for c in calls] == [("Read", 4), ("Bash", 3)]


def test_underscores_in_names_stay_literal_while_stars_emphasise():
    html = render.markdown_html("edit tests/__init__.py and my_module_name, **now** or *soon*")
    assert "tests/__init__.py" in html and "my_module_name" in html and "<em>soon</em>" in html
    assert "<strong>now</strong>" in html and html.count("<strong>") == 1


def test_a_messages_html_is_kept_and_the_same_as_rendered_anew():
    """markdown_html keeps the HTML of messages up to CACHED_MARKDOWN_CHARS (the session
    page shows the same ones on every view): what it answers from there is what rendering
    anew gives, and a longer text is rendered each time, never kept."""
    render._cached_markdown_html.cache_clear()
    text = "Fixed **it** in `src/__init__.py`: <script>alert(1)</script> [x](javascript:1)"
    first = render.markdown_html(text)
    assert render.markdown_html(text) == first == render._markdown_html(text)
    assert "<script" not in first and "<strong>it</strong>" in first
    info = render._cached_markdown_html.cache_info()
    assert (info.hits, info.misses) == (1, 1)
    long_text = "word " * (render.CACHED_MARKDOWN_CHARS // 5 + 1)
    assert render.markdown_html(long_text) == render._markdown_html(long_text)
    assert render._cached_markdown_html.cache_info().currsize == 1
