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

__all__ = ["CachedEncoder", "make_encoder", "default_cache_dir"]

#: A model call with at most this many texts is timed and its time kept (a query and its parts).
QUERY_CALL = 4


def default_cache_dir() -> Path:
    return Path(os.environ.get("HOPMEM_LOCOMO_CACHE", Path.home() / ".cache" / "hopmem-locomo"))


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class CachedEncoder:
    """``factory()``'s encoder, its vectors cached under ``folder`` (one file set per encoder ``label``)."""

    def __init__(self, label: str, factory: Callable[[], Any], folder: Path | None) -> None:
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


def make_encoder(kind: str, cache_dir: Path | None) -> CachedEncoder:
    """``"minilm"`` (the bundled all-MiniLM-L6-v2, one torch thread), ``"onnx"`` / ``"onnx-int8"`` (the same
    model on ONNX Runtime, float32 / int8, one thread) or ``"hashing"`` (HashingEncoder(384))."""
    if kind == "minilm":
        def factory() -> Any:
            from hopmem.encoders import SentenceTransformerEncoder
            return SentenceTransformerEncoder(num_threads=1)
    elif kind in ("onnx", "onnx-int8"):
        def factory() -> Any:
            from hopmem.encoders import OnnxEncoder
            return OnnxEncoder(quantize="int8" if kind == "onnx-int8" else None, num_threads=1)
    elif kind == "hashing":
        def factory() -> Any:
            from hopmem.encoders import HashingEncoder
            return HashingEncoder(384)
        cache_dir = None  # as fast as a cache lookup
    else:
        raise SystemExit(f"--encoder: expected minilm, onnx, onnx-int8 or hashing, got {kind!r}")
    return CachedEncoder(kind, factory, cache_dir)
