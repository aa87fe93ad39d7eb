"""Evidence of each candidate entry for one query, and the lexical statistics behind it.

For a candidate ``e`` and the centered query ``q`` (``r`` the engine's
reconstruction, ``f = cos(q, r)``): ``semantic = cos(q, e)``, ``associative =
max(f, 0) * cos(r, e)``, ``path = max(semantic, associative)``, and ``keyword
= b / (b + bm25_half)`` with ``b`` the entry's BM25 score for the query's words
(:func:`lexical_scorer`). A candidate's evidence is ``path + keyword_weight *
keyword`` in hybrid mode, ``path`` in associative mode and ``keyword`` in
keyword mode. :func:`novelty` measures how much of the query the memory has
never seen; :func:`content_share` how much of its specific vocabulary the
best candidates contain.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from . import keyword as kw
from ._settings import RecallSettings
from .english import zipf
from .index import Partition, Row
from .tuning import constant

__all__ = ["Evidence", "lexical_scorer", "novelty", "content_words", "content_share", "EVERYDAY_ZIPF",
           "CONTENT_WEIGHT_CEILING", "CONTENT_WEIGHT_MIN"]

#: A word at least this frequent in English (Zipf) is everyday vocabulary, not what a question is about.
EVERYDAY_ZIPF: float = constant("EVERYDAY_ZIPF")
#: A content word weighs ``max(CONTENT_WEIGHT_MIN, CONTENT_WEIGHT_CEILING - zipf)`` in :func:`content_share`:
#: a rare word the candidates lack says more than a common one.
CONTENT_WEIGHT_CEILING: float = constant("CONTENT_WEIGHT_CEILING")
CONTENT_WEIGHT_MIN: float = constant("CONTENT_WEIGHT_MIN")
#: BM25's term-frequency saturation and length normalization in :func:`lexical_scorer`.
BM25_K1: float = constant("BM25_K1")
BM25_B: float = constant("BM25_B")
#: Below this many visible entries no query word is too common to search (``common_fraction``).
SELECTIVE_MIN_ENTRIES: int = constant("SELECTIVE_MIN_ENTRIES")
_CONTENT_WORD = re.compile(r"[a-z][a-z'-]*[a-z]")


def lexical_scorer(terms: Sequence[str], partitions: Sequence[Partition]) -> Callable[[Row], float]:
    """BM25 of an entry for the query's words, as keyword *evidence*.

    FTS5 ranks the keyword candidates, but its IDF, ``log((N - n + 0.5) /
    (n + 0.5))``, is zero or clamped for a word in half the entries, so in a
    small memory every match scores ~0. Evidence uses the always-positive
    IDF ``log(1 + (N - n + 0.5) / (n + 0.5))`` (Lucene's), binary term
    frequency and the light stemmer, over the visible partitions;
    k1 = 1.2, b = 0.75.
    """
    n = sum(p.live for p in partitions)
    avgdl = max(1.0, sum(p.total_terms for p in partitions) / max(n, 1))
    weights = {}
    for st in dict.fromkeys(kw.stem(t) for t in terms):
        df = sum(p.df.get(st, 0) for p in partitions)
        if df:
            weights[st] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    k1, b = BM25_K1, BM25_B
    # recall scores every candidate with this: the constant parts of the formula are computed once
    items, k1_plus_1, one_minus_b = tuple(weights.items()), k1 + 1.0, 1.0 - b

    def score(row: Row) -> float:
        stems = row.stems
        matched = sum([w for st, w in items if st in stems])
        if not matched:
            return 0.0
        return matched * k1_plus_1 / (1.0 + k1 * (one_minus_b + b * len(stems) / avgdl))

    return score


def novelty(terms: Sequence[str], partitions: Sequence[Partition], ceiling: float) -> float:
    """Share of the query's word weight in words no visible entry contains (0 = all known).

    A word weighs ``max(0, ceiling - zipf)``, ``zipf`` being its Zipf
    frequency in English (:func:`hopmem.agent.english.zipf`), so that an
    everyday word the memory never stored ("moment") weighs less than a
    specific one ("renovation"); ``ceiling`` is
    ``Tuning.novelty_ceiling``. A word counts once per stem.
    """
    words: dict[str, str] = {}  # per stem, in order, its first word
    for t in terms:
        words.setdefault(kw.stem(t), t)
    if not words:
        return 0.0
    total = unknown = 0.0
    for st, word in words.items():
        df = sum(p.df.get(st, 0) for p in partitions)
        weight = max(0.0, ceiling - zipf(word))
        total += weight
        if df == 0:
            unknown += weight
    return unknown / total if total > 0 else 0.0


def content_words(text: str) -> list[str]:
    """The specific words of a question: lowercase words of 3+ letters (a trailing ``'s`` dropped) that are
    neither stop words nor everyday English (Zipf >= :data:`EVERYDAY_ZIPF`), in order, once each."""
    out: list[str] = []
    for w in _CONTENT_WORD.findall(text.lower()):
        if w.endswith("'s"):
            w = w[:-2]
        if len(w) < 3 or w in kw.STOP_WORDS or w in out or zipf(w) >= EVERYDAY_ZIPF:
            continue
        out.append(w)
    return out


def content_share(words: Sequence[str], found: Iterable[Row], partitions: Sequence[Partition],
                  common_fraction: float) -> float:
    """The weighted share of the question's content ``words`` (:func:`content_words`) that the entries
    ``found`` (the best candidates) contain, matched by the light stemmer; 1 without content words.

    A word weighs ``max(CONTENT_WEIGHT_MIN, CONTENT_WEIGHT_CEILING - zipf)``.
    In a memory of 200 visible entries or more, a word found in more than
    ``common_fraction`` of them is left out, as the keyword search leaves it
    out (:func:`hopmem.agent.candidates.selective_terms`): in a conversation
    that is a speaker's name, which says nothing about the question's subject.
    """
    n = sum(p.live for p in partitions)
    kept = []
    for w in words:
        st = kw.stem(w)
        if n >= SELECTIVE_MIN_ENTRIES and sum(p.df.get(st, 0) for p in partitions) > common_fraction * n:
            continue
        kept.append((st, max(CONTENT_WEIGHT_MIN, CONTENT_WEIGHT_CEILING - zipf(w))))
    if not kept:
        return 1.0
    stems: set[str] = set()
    for row in found:
        stems.update(row.stems)
    total = sum(wt for _, wt in kept)
    return sum(wt for st, wt in kept if st in stems) / total


class Evidence:
    """The evidence of every candidate of one query, in the given mode.

    ``semantic`` and ``associative`` are the engine's scores (copied from the
    candidate lists and completed here for candidates only the keyword, exact
    or time lists found); ``keyword`` holds the normalized BM25 evidence and
    ``value`` the candidate's evidence. Built once per recall
    (:meth:`score_all`); later stages extend a copy (:meth:`extended`).
    """

    def __init__(self, mode: str, config: RecallSettings, rows: Mapping[int, Row], qvec: np.ndarray,
                 semantic: dict[int, float], associative: dict[int, float],
                 lexical: Callable[[Row], float] | None) -> None:
        self.mode = mode
        self.use_vectors = mode in ("hybrid", "associative")
        self.config = config
        self.rows = rows
        self.qvec = qvec
        self.semantic = dict(semantic)
        self.associative = associative
        self.lexical = lexical
        self.keyword: dict[int, float] = {}
        self.value: dict[int, float] = {}

    def score_all(self, ids: Sequence[int]) -> None:
        """Score candidates found by any list (``ids`` sorted), completing their semantic score."""
        missing = [i for i in ids if i not in self.semantic] if self.use_vectors else []
        if missing:  # found by keyword, exact token or time only: score them against the query too
            # np.array, not np.stack: the same matrix, made in a quarter of the time
            direct = np.array([self.rows[i].vector for i in missing]) @ self.qvec
            self.semantic.update(zip(missing, direct.tolist()))
        self.score(ids)

    def extended(self, ids: Iterable[int]) -> Evidence:
        """A copy that also scores ``ids`` (entries brought in after the candidate lists: a version, a
        turn of context); ``self`` is left as it is."""
        out = Evidence(self.mode, self.config, self.rows, self.qvec, self.semantic, self.associative, self.lexical)
        out.keyword = dict(self.keyword)
        out.value = dict(self.value)
        ids = list(ids)
        if self.use_vectors:
            for i in ids:
                out.semantic[i] = float(self.rows[i].vector @ self.qvec)
        out.score(ids)
        return out

    def score(self, ids: Iterable[int]) -> None:
        """Each id's keyword evidence and evidence (its semantic score known); one loop over the candidates,
        the hot path of recall."""
        half, keyword_weight = self.config.bm25_half, self.config.keyword_weight
        lexical, rows, keyword, value = self.lexical, self.rows, self.keyword, self.value
        semantic, associative = self.semantic.get, self.associative.get
        hybrid, associative_mode = self.mode == "hybrid", self.mode == "associative"
        for i in ids:
            b = lexical(rows[i]) if lexical is not None else 0.0
            k = keyword[i] = b / (b + half) if b > 0 else 0.0
            if hybrid:
                value[i] = max(semantic(i, 0.0), associative(i, 0.0)) + keyword_weight * k
            elif associative_mode:
                value[i] = max(semantic(i, 0.0), associative(i, 0.0))
            else:
                value[i] = k

    def path(self, i: int) -> float:
        return max(self.semantic.get(i, 0.0), self.associative.get(i, 0.0))

    def best_path(self, ids: Iterable[int]) -> float:
        """The largest :meth:`path` among ``ids``."""
        semantic, associative = self.semantic.get, self.associative.get
        return max([max(semantic(i, 0.0), associative(i, 0.0)) for i in ids])

    def best(self, ids: Sequence[int]) -> int:
        """The candidate with the most evidence (the lowest id on ties)."""
        value = self.value
        top = max([value[i] for i in ids])
        return min([i for i in ids if value[i] == top])
