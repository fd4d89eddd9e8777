"""memoryapp.lib.relevance: which words carry a query, and the floor for injecting a memory."""

from memoryapp.lib import relevance


def matched_terms(query: str, text: str) -> list[str]:
    return relevance.Query.of(query).matched(text)


def bears_on(query: str, text: str, words: int = 2) -> bool:
    asked = relevance.Query.of(query)
    return asked.clears(asked.matched(text), words)


def test_stop_words_are_dropped_and_words_match_their_forms():
    assert relevance.query_terms("How do I run the tests?") == ["run", "tests"]
    assert relevance.query_terms("the I we") == []
    assert matched_terms("running tests", "Run the test suite") == ["running", "tests"]
    assert matched_terms("the staging", "The staging cluster") == ["staging"]
    assert matched_terms("write boxes", "It writes one box") == ["write", "boxes"]


def test_identifiers_are_named_whole():
    ids = relevance.identifiers("why does test_upload_resume fail in src/app.py (v2)?")
    assert ids == {"test_upload_resume", "src/app.py", "v2"}
    assert relevance.identifiers("plain words only, 2026.") == set()


def test_the_floor_wants_two_content_words_or_one_identifier():
    assert bears_on("Migrate the staging database", "Staging database is read-only")
    assert not bears_on("Migrate the staging database", "The staging web server")
    assert bears_on("fix test_upload_resume", "test_upload_resume is flaky")
    assert not bears_on("fix test_upload_resume", "test_upload_retry is flaky")
    assert not bears_on("what is the plan", "the plan")
    # A long hint (a session's goal, task and message) asks for three.
    assert not bears_on("Migrate the staging database", "Staging database", 3)
    assert bears_on("Migrate the staging database", "Migrating staging database", 3)
    # A word's forms are one word: a hint saying "test", "tests", "run" and "running"
    # shares two words with a memory about running the tests of another project.
    hint = "Fix the failing test. Run the tests, running them until they pass."
    memory = "Port the utilities to Rust, running the tests and the test runner's run."
    assert matched_terms(hint, memory) == ["test", "run", "tests", "running"]
    assert not bears_on(hint, memory, 3)
    assert bears_on(hint, "Tests fail until you run the failing fixture", 3)


def test_a_text_about_another_language_s_project():
    from memoryapp.lib.relevance import ecosystem_of, ecosystems, of_another_ecosystem

    assert ecosystems("Run the tests with python -m pytest") == {"python"}
    assert ecosystems("Run mix test before pushing") == {"elixir"}
    assert ecosystems("We mix the colours and go home") == set()  # words, not phrases
    assert ecosystem_of("TypeScript") == "javascript" and ecosystem_of("COBOL") is None
    assert of_another_ecosystem("Run the tests with python -m pytest", "rust")
    assert not of_another_ecosystem("The Rust port still ships the Python package", "rust")
    assert not of_another_ecosystem("Use serde for JSON", "rust")  # names no ecosystem
    assert not of_another_ecosystem("Run the tests with python -m pytest", None)


def test_the_same_fact_said_again_has_one_key_and_a_different_fact_another():
    from memoryapp.lib.relevance import fact_key

    assert fact_key("The staging DB is read-only on Sundays") == fact_key(
        "Staging DB: read only on Sunday."
    )
    assert fact_key("Tests need Redis") != fact_key("Tests do not need Redis")
    assert fact_key("Tests need Redis") != fact_key("Tests can't need Redis")
    assert fact_key("A depends on B") != fact_key("B depends on A")
    assert fact_key("Retry 3 times") != fact_key("Retry 5 times")
    assert fact_key("The") == "the"
