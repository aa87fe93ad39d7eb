"""The baselines on the same units: BM25 (Okapi, as ``rank_bm25``), dense cosine, and their RRF (k = 60)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

__all__ = ["tokens", "BM25", "dense_ranking", "rrf"]

RRF_K = 60


def tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class BM25:
    """Okapi BM25 with ``rank_bm25.BM25Okapi``'s formula and defaults (k1 1.5, b 0.75, epsilon 0.25):
    ``rank_bm25`` when it is installed, else the same formula here."""

    def __init__(self, corpus: Sequence[str]) -> None:
        docs = [tokens(t) for t in corpus]
        try:
            from rank_bm25 import BM25Okapi
        except ImportError:
            self._impl = None
        else:
            self._impl = BM25Okapi(docs)
            return
        self.k1, self.b, self.epsilon = 1.5, 0.75, 0.25
        self.freqs = [Counter(d) for d in docs]
        self.lengths = np.array([len(d) for d in docs], float)
        self.avgdl = float(self.lengths.mean()) if len(docs) else 0.0
        df = Counter(w for d in docs for w in set(d))
        n = len(docs)
        idf = {w: math.log(n - c + 0.5) - math.log(c + 0.5) for w, c in df.items()}
        average = sum(idf.values()) / len(idf) if idf else 0.0
        eps = self.epsilon * average
        self.idf = {w: (v if v >= 0 else eps) for w, v in idf.items()}

    def scores(self, query: str) -> np.ndarray:
        q = tokens(query)
        if self._impl is not None:
            return np.asarray(self._impl.get_scores(q), float)
        out = np.zeros(len(self.freqs))
        norm = self.k1 * (1 - self.b + self.b * self.lengths / self.avgdl)
        for w in q:
            tf = np.array([f.get(w, 0) for f in self.freqs], float)
            out += self.idf.get(w, 0.0) * tf * (self.k1 + 1) / (tf + norm)
        return out


def order(scores: np.ndarray) -> list[int]:
    """Indices best first (ties by index)."""
    return [int(i) for i in np.lexsort((np.arange(len(scores)), -scores))]


def dense_ranking(unit_vectors: np.ndarray, query_vector: np.ndarray) -> list[int]:
    """Units by cosine to the query (raw encoder vectors, normalized)."""
    u = unit_vectors / np.maximum(np.linalg.norm(unit_vectors, axis=1, keepdims=True), 1e-12)
    q = query_vector / max(float(np.linalg.norm(query_vector)), 1e-12)
    return order(u @ q)


def rrf(*rankings: list[int], k: int = RRF_K) -> list[int]:
    fused: dict[int, float] = {}
    for ranking in rankings:
        for r, i in enumerate(ranking, start=1):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k + r)
    return sorted(fused, key=lambda i: (-fused[i], i))
