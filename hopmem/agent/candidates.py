"""The candidate lists of one recall, gathered per visible partition.

* **semantic**: the entries the engine's read activates (exact cosines to the query);
* **associative**: the entries nearest the read's reconstruction, found by a
  second, one-step activation, weighted by the read's fidelity;
* **keyword**: FTS5 ``MATCH`` of the query's content words, ranked by BM25;
* **exact**: the query's identifier tokens found as whole tokens in at most
  ``max(rare_min, rare_fraction * N)`` visible entries;
* **time**: the entries created in the query's time window.

Also measured here: the read's first contact and the query's novelty.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..engine.memory import Trace
from . import keyword as kw
from ._settings import RecallSettings
from .evidence import SELECTIVE_MIN_ENTRIES
from .evidence import novelty as _novelty
from .index import Partition, Row
from .store import AgentStore
from .temporal import TimeHints

__all__ = ["Candidates", "gather", "selective_terms"]


@dataclass
class Candidates:
    """What each retriever found for one query (scores by entry id, and the ranked lists)."""

    terms: list[str]
    semantic: dict[int, float] = field(default_factory=dict)
    associative: dict[int, float] = field(default_factory=dict)
    sem_list: list[tuple[float, int]] = field(default_factory=list)
    assoc_list: list[tuple[float, int]] = field(default_factory=list)
    first_contact: float | None = None
    keyword_scores: dict[int, float] = field(default_factory=dict)  # FTS5 bm25 of the keyword list
    kw_list: list[tuple[float, int]] = field(default_factory=list)
    exact: dict[int, list[str]] = field(default_factory=dict)
    novelty: float = 0.0
    window_ids: list[int] = field(default_factory=list)

    @property
    def ids(self) -> set[int]:
        """Every candidate, whichever list found it."""
        return set(self.semantic).union(self.associative, self.keyword_scores, self.exact, self.window_ids)


def selective_terms(terms: list[str], partitions: Sequence[Partition], n: int, common_fraction: float) -> list[str]:
    """Drop terms in more than ``common_fraction`` of the visible entries (keeping the rarest).

    They add almost nothing to BM25 (tiny IDF) but make FTS5 score most of
    the partition, which is what costs time on a large memory.
    """
    cut = common_fraction * n
    if len(terms) < 2 or n < SELECTIVE_MIN_ENTRIES:
        return terms
    dfs = [(sum(p.df.get(kw.stem(t), 0) for p in partitions), t) for t in terms]
    kept = [t for df, t in dfs if df <= cut]
    return kept or [min(dfs)[1]]


def gather(text: str, qvec: np.ndarray, *, mode: str, limit: int, config: RecallSettings,
           partitions: Sequence[Partition], tables: Sequence[str], store: AgentStore, rows: dict[int, Row],
           by_time: list[tuple[float, int]],
           hints: TimeHints, visible: Callable[[int], bool], assoc_k: int | None = None) -> Candidates:
    """Run the retrievers of ``mode`` over the visible partitions (``partitions``, FTS5 ``tables``); engine reads
    activate ``assoc_k`` entries (None: ``config.assoc_k``)."""
    cfg = config
    n_visible_scope = sum(p.live for p in partitions)
    cue_words = {w for cue in hints.cues for w in cue.split()}  # time scaffolding is not a subject
    found = Candidates(terms=[t for t in kw.query_terms(text) if t not in cue_words])
    if mode in ("hybrid", "associative"):
        _read_engines(found, qvec, partitions, cfg, visible, cfg.assoc_k if assoc_k is None else assoc_k)
    if mode in ("hybrid", "keyword") and n_visible_scope:
        _search_keywords(found, text, limit, cfg, partitions, n_visible_scope, tables, store, rows, visible)
        found.novelty = _novelty(found.terms, partitions, cfg.novelty_ceiling)
    if hints.window is not None and n_visible_scope:
        start, end = hints.window
        lo = bisect.bisect_left(by_time, (start, -1))
        hi = bisect.bisect_left(by_time, (end, -1))
        found.window_ids = [i for _, i in by_time[lo:hi] if visible(i)]
    return found


def _read_engines(found: Candidates, qvec: np.ndarray, partitions: Sequence[Partition], cfg: RecallSettings,
                  visible: Callable[[int], bool], k: int) -> None:
    for partition in partitions:
        mem = partition.engine(cfg.beta, cfg.assoc_k, cfg.activation)
        if mem is None:
            continue
        loc_rows = partition.loc_rows
        trace = mem.analyze(qvec, k=k)
        assert isinstance(trace, Trace)  # one query vector: one trace
        fc = float(trace.first_contact)
        fid = float(trace.fidelity)
        if found.first_contact is None or fc > found.first_contact:
            found.first_contact = fc
        for loc, sim in zip(trace.activated, trace.similarities):
            row = loc_rows.get(int(loc))
            if row is None or not partition.alive[row]:
                continue
            entry_id = int(partition.ids[row])
            if visible(entry_id):
                found.semantic[entry_id] = float(sim)
                found.sem_list.append((float(sim), entry_id))
        # resolve the reconstruction: its nearest entries, found by the engine's own
        # activation (exact scores; with activation="compact" a float16 pre-scan)
        weight = max(fid, 0.0)
        resolved = mem.analyze(trace.result, strategy="fast", k=k)
        assert isinstance(resolved, Trace)
        for loc, sim in zip(resolved.activated, resolved.similarities):
            row = loc_rows.get(int(loc))
            if row is None or not partition.alive[row]:
                continue
            entry_id = int(partition.ids[row])
            if visible(entry_id):
                found.associative[entry_id] = weight * float(sim)
                found.assoc_list.append((weight * float(sim), entry_id))


def _search_keywords(found: Candidates, text: str, limit: int, cfg: RecallSettings, partitions: Sequence[Partition],
                     n_visible_scope: int, tables: Sequence[str], store: AgentStore, rows: dict[int, Row],
                     visible: Callable[[int], bool]) -> None:
    match = kw.fts_or_query(selective_terms(found.terms, partitions, n_visible_scope, cfg.common_fraction))
    if match is not None:
        want = max(cfg.over_fetch, 4 * limit)
        for table in tables:  # each partition has its own BM25 statistics; merged by score
            fetch = want
            for _ in range(3):  # widen when hidden (expired, filtered) rows crowd the visible out
                hits = store.keyword_search(table, match, fetch)
                kept = [(b, i) for i, b in hits if visible(i)]
                if len(kept) >= want or len(hits) < fetch:
                    break
                fetch *= 4
            for b, i in kept:
                found.keyword_scores[i] = b
                found.kw_list.append((b, i))
    rare_max = max(cfg.rare_min, int(math.ceil(cfg.rare_fraction * n_visible_scope)))
    for token in kw.identifier_tokens(text):
        phrase = kw.fts_phrase(token)
        if phrase is None:
            continue
        ids = [i for table in tables for i in store.phrase_ids(table, phrase, 4 * rare_max + 8)
               if visible(i) and kw.contains_token(rows[i].text, token)]
        if 1 <= len(ids) <= rare_max:
            for i in ids:
                found.exact.setdefault(i, []).append(token)
