"""Recall: the pipeline from a query to a :class:`~hopmem.agent.Selection`.

Per visible partition the retrievers gather candidates
(:mod:`~hopmem.agent.candidates`); every candidate gets all of its evidence
(:mod:`~hopmem.agent.evidence`); the verdict decides whether anything relevant
is remembered and which candidates are admitted (:mod:`~hopmem.agent.verdict`);
the admitted hits are fused, boosted and ordered (:mod:`~hopmem.agent.ranking`).
A recall with ``record=True`` then writes a receipt and exposure counts.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import InvalidInput
from . import keyword as kw
from . import ranking
from .candidates import gather
from .config import RECALL_MODES
from .core import MemoryCore
from .evidence import Evidence, content_words, lexical_scorer
from .index import Row
from .labels import labels_match
from .parts import asks_for_several, split_parts
from .rerank import rerank
from .results import MemoryHit, Selection
from .temporal import TimeHints, asks_for_date, parse_time_hints
from .validation import identity, statement
from .verdict import (
    abstention_reason,
    admission_reason,
    admit,
    admit_parts,
    decide,
    gate_note,
    ranking_features,
    select_gates,
)

__all__ = ["RecallMixin"]

logger = logging.getLogger("hopmem.agent")


class RecallMixin(MemoryCore):
    """:meth:`recall` and :meth:`rank`."""

    def recall(
        self,
        text: str,
        *,
        session_id: str | None = None,
        labels: Mapping[str, Any] | None = None,
        kinds: Iterable[str] | None = None,
        limit: int = 5,
        mode: str = "hybrid",
        since: float | None = None,
        until: float | None = None,
        record: bool = True,
    ) -> Selection:
        """Recall what is relevant to ``text``; returns a :class:`Selection`.

        Sees the namespace's shared entries plus, with ``session_id``, that
        session's entries. ``labels`` filters on explicit labels (every key
        given must match one of its values); ``kinds`` filters kinds;
        ``since``/``until`` filter creation time. ``mode`` picks the retrievers:
        ``"hybrid"`` (default), ``"associative"`` (engine reads only) or
        ``"keyword"`` (FTS5 and exact tokens only). With ``record`` (default)
        the selection gets a receipt for :meth:`complete`, exposures are
        counted and a ``recalled`` event is emitted.
        """
        self._check_open()
        statement(text)
        session_id = identity(session_id, "session_id", required=False)
        _check_limit(limit)
        if mode not in RECALL_MODES:
            raise InvalidInput(f"mode: expected one of {RECALL_MODES}, got {mode!r}")
        wanted = self.label_policy.normalise(labels, strict=True) if labels else {}
        kind_set = None
        if kinds is not None:
            kind_set = frozenset([kinds] if isinstance(kinds, str) else kinds)
            unknown = kind_set - set(self.kinds)
            if unknown:
                raise InvalidInput(f"kinds: unknown kinds {sorted(unknown)}; known: {sorted(self.kinds)}")
        t0 = time.perf_counter()
        qvec, pieces = self._encode_query(text.strip())
        t1 = time.perf_counter()
        query_labels = {}
        if self.labeler is not None and self.config.label_boost > 0:
            try:
                query_labels = self.label_policy.normalise(self.labeler(text), strict=False)
            except Exception as exc:  # noqa: BLE001 - a user's labeller failing costs the labels, not the recall
                logger.warning("hopmem.agent: labeller failed on a query: %s", exc)
        with self._lock:
            self._check_open()
            self._sync()
            now = self._now()
            selection, newly_expired = self._retrieve(
                text.strip(), qvec, session_id=session_id, wanted=wanted, kind_set=kind_set, limit=limit,
                mode=mode, since=since, until=until, query_labels=query_labels, now=now, pieces=pieces)
            t2 = time.perf_counter()
            timings = {"encode_ms": (t1 - t0) * 1e3, "retrieve_ms": (t2 - t1) * 1e3}
            if record:
                ids = selection.entry_ids
                with self._store.transaction():
                    if ids:
                        self._store.insert_receipt(selection.id, self.namespace, session_id, ids,
                                                   query_labels, now, self.receipt_ttl)
                        self._store.bump_exposures(self.namespace, ids, now)
                        self._receipts += 1
                    self._recalls += 1
                    # receipts stay bounded: by count at once, by age every 64 recalls (an expired
                    # receipt is refused by complete() anyway)
                    if self._receipts > self.max_receipts or self._recalls % 64 == 0:
                        self._store.prune_receipts(self.namespace, now, self.max_receipts)
                        self._receipts = self._store.count_receipts(self.namespace)
                    for row in newly_expired:
                        self._store.update_entry(row.id, self.namespace, expired_notified=1)
                self._data_version = self._store.data_version()
                for entry_id in ids:
                    self._rows[entry_id].exposures += 1
                for row in newly_expired:
                    row.expired_notified = True
            timings["total_ms"] = (time.perf_counter() - t0) * 1e3
            selection = replace(selection, timings=timings)
        if record:
            for row in newly_expired:
                self._emit("expired", row.session_id, now, id=row.id, text=row.text, expires_at=row.expires_at)
            self._emit("recalled", session_id, now, selection_id=selection.id, query=selection.query,
                       abstained=selection.abstained, reason=selection.reason,
                       hits=[{"id": h.entry_id, "text": h.text, "score": h.score, "band": h.band}
                             for h in selection.hits])
        return selection

    def _encode_query(self, text: str) -> tuple[np.ndarray, list[tuple[str, np.ndarray]]]:
        """The query's vector, and its parts with theirs when it is a multi-part question (one encoder call)."""
        parts = split_parts(text, kw.query_terms)
        vecs = self._encode([text, *parts])
        return vecs[0], list(zip(parts, vecs[1:]))

    def _visible(self, row: Row, session_id: str | None, now: float, wanted: dict, kind_set: frozenset | None,
                 since: float | None, until: float | None, expired_out: list[Row]) -> bool:
        if row.durability == "session" and (session_id is None or row.session_id != session_id):
            return False
        if self._expired(row, now):
            if not row.expired_notified:
                expired_out.append(row)
            return False
        if kind_set is not None and row.kind not in kind_set:
            return False
        if wanted and not labels_match(row.labels, wanted):
            return False
        if since is not None and row.created_at < since:
            return False
        if until is not None and row.created_at >= until:
            return False
        if self._suppressed(row, now):
            return False
        return True

    def _retrieve(self, text: str, qvec: np.ndarray, *, session_id: str | None, wanted: dict,
                  kind_set: frozenset | None, limit: int, mode: str, since: float | None, until: float | None,
                  query_labels: dict, now: float, admit_all: bool = False,
                  pieces: Sequence[tuple[str, np.ndarray]] = ()) -> tuple[Selection, list[Row]]:
        cfg = self.config
        expired_out: list[Row] = []
        visible_cache: dict[int, bool] = {}

        def visible(entry_id: int) -> bool:
            hit = visible_cache.get(entry_id)
            if hit is None:
                row = self._rows.get(entry_id)
                hit = row is not None and self._visible(row, session_id, now, wanted, kind_set, since, until,
                                                         expired_out)
                visible_cache[entry_id] = hit
            return hit

        part_keys: list[str | None] = [None] if session_id is None else [None, session_id]
        parts = [p for p in (self._parts.get(k) for k in part_keys) if p is not None and p.live > 0]
        hints = parse_time_hints(text, now, self.day_zero, comparisons=True)
        tables = [self._fts[k] for k in part_keys if k in self._fts]
        # a question asking for several things of one kind reads deeper (its instances resemble it less)
        k = cfg.aggregation_k if asks_for_several(text) else cfg.assoc_k
        found = gather(text, qvec, mode=mode, limit=limit, config=cfg, parts=parts, tables=tables,
                       store=self._store, rows=self._rows, by_time=self._by_time, hints=hints, visible=visible,
                       assoc_k=k)
        # a multi-part question: each part's own candidates (no time window or exact
        # tokens of its own: the whole question has those)
        part_hints = TimeHints(order=None, window=None, cues=hints.cues)
        part_found = [(pvec, gather(ptext, pvec, mode=mode, limit=limit, config=cfg, parts=parts, tables=tables,
                                    store=self._store, rows=self._rows, by_time=self._by_time, hints=part_hints,
                                    visible=visible))
                      for ptext, pvec in pieces]

        gate, band_gate, model, calibrated = select_gates(self._gates, self._band_gates, self._models, mode)
        override = "exact token" if found.exact else ("time window" if found.window_ids else None)
        # the fields every outcome shares (one selection id, made here)
        selection = functools.partial(
            Selection, id=uuid.uuid4().hex, query=text, namespace=self.namespace, session_id=session_id, mode=mode,
            novelty=round(found.novelty, 4), override=override, tau=gate.tau, calibrated=calibrated,
            first_contact=found.first_contact,
            time_hints={"order": hints.order, "window": hints.window, "cues": list(hints.cues)},
            timings={}, created_at=now, parts=tuple(ptext for ptext, _ in pieces))
        suffix = gate_note(gate, calibrated, len(self._rows))
        candidates = found.ids.union(*(pf.ids for _, pf in part_found))
        if not candidates:
            return selection(hits=(), abstained=True, reason="no candidates: nothing visible in this scope matches"
                             + suffix, statistic=None, evidence=None), expired_out

        # every candidate gets all of its evidence, whichever list found it
        cand = sorted(candidates)
        use_keywords = mode in ("hybrid", "keyword")
        evidence = Evidence(mode, cfg, self._rows, qvec, found.semantic, found.associative,
                            lexical_scorer(found.terms, parts) if use_keywords else None)
        evidence.score_all(cand)
        part_evidence = []
        for pvec, pf in part_found:
            pe = Evidence(mode, cfg, self._rows, pvec, pf.semantic, pf.associative,
                          lexical_scorer(pf.terms, parts) if use_keywords else None)
            pe.score_all(cand)
            part_evidence.append(pe)
        # the verdict is the whole question's: over its own candidates, as calibrated
        own = sorted(found.ids) if part_found and found.ids else cand
        in_window = set(found.window_ids)
        ev = evidence.value
        lists = ranking.ranked_lists(found, evidence, in_window)
        ranks, fused = ranking.fuse(lists, cand, cfg)
        ranked = None
        if mode == "hybrid":  # the verdict reads the whole question's fused ranking of its own candidates
            own_ranks, own_fused = (ranks, fused) if own is cand else ranking.fuse(lists, own, cfg)
            fused_order = sorted(own, key=lambda i: (-own_fused[i], -ev[i], i))
            ranked = ranking_features(fused_order, own_ranks, self._rows, content_words(text), parts,
                                      cfg.common_fraction)
        verdict = decide(mode, cfg, gate, model, evidence, own, found.novelty, ranked)
        admitted = admit(cand, evidence, verdict, band_gate, found.exact, in_window, admit_all)
        if verdict.passes:
            admit_parts(admitted, cand, part_evidence, cfg.floor_ratio)
        if not admitted:
            return selection(hits=(), abstained=True, reason=abstention_reason(verdict, gate, cfg) + suffix,
                             statistic=verdict.statistic, evidence=verdict.best_evidence,
                             features=verdict.features), expired_out

        if part_found:
            for n, ((_, pf), pe) in enumerate(zip(part_found, part_evidence), start=1):
                lists.update({f"part {n}:{name}": ids for name, ids in ranking.ranked_lists(pf, pe, ()).items()})
            ranks, fused = ranking.fuse(lists, cand, cfg)
        # a reranker re-orders the fused order's first ``depth`` hits, of which the first ``limit`` are returned
        reranker = self._reranker if mode == "hybrid" else None
        depth = max(limit, reranker.depth) if reranker is not None else limit
        admitted = ranking.head(admitted, fused, ev, found.exact, depth)
        order = hints.order or "recent"
        via = ranking.pull_versions(self._rows, admitted, order, visible, evidence, ranks, fused, verdict.floor)
        final, boosts = ranking.apply_boosts(
            self._rows, admitted, fused, config=cfg, query_labels=query_labels,
            utility=self._utility if self.reinforcement else None,
            retention=(lambda row: self._retention(row, now)) if self.forgetting is not None else None,
            hint_order=hints.order, in_window=in_window, asks_date=asks_for_date(text))
        # an entry matched by an exact token keeps its place
        ranking.order_versions(self._rows, [i for i in admitted if i not in found.exact and ev[i] >= verdict.floor],
                               order, final, boosts)
        ordered_ids = sorted(admitted, key=lambda i: (-final[i], -ev[i], i))
        with_context = mode == "hybrid" and cfg.context_weight > 0 and (verdict.passes or admit_all)
        ordered_ids = self._final_order(text, ordered_ids, depth, visible, evidence, admitted, ranks, fused, final,
                                        boosts, with_context=with_context)
        hits = ranking.build_hits(self._rows, ordered_ids, found=found, evidence=evidence, admitted=admitted,
                                  ranks=ranks, fused=fused, final=final, boosts=boosts, via=via, in_window=in_window,
                                  band_gate=band_gate, use_keywords=use_keywords)
        if reranker is not None:
            vectors = np.stack([self._rows[h.entry_id].vector for h in hits[:reranker.depth]])
            hits = rerank(reranker, text, qvec, hits, vectors, limit)
        reason = admission_reason(verdict, gate, hits[0].explanation.admitted_by)
        return selection(hits=tuple(hits), abstained=False, reason=reason + suffix, statistic=verdict.statistic,
                         evidence=verdict.best_evidence, features=verdict.features), expired_out

    def _final_order(self, text: str, ordered: list[int], limit: int, visible: Callable[[int], bool],
                     evidence: Evidence, admitted: dict[int, str], ranks: dict[int, dict[str, int]],
                     fused: dict[int, float], final: dict[int, float], boosts: dict[int, dict[str, float]], *,
                     with_context: bool) -> list[int]:
        """The first ``limit`` hits: ``ordered`` with the entries stored next to the first hits fused in
        (``with_context``, ``RecallConfig.context_weight``), then the turns of the question's subject moved
        up (``RecallConfig.subject_boost``). An entry that only the context brings is admitted as such.
        (With a reranker, ``limit`` is its depth: it then re-orders these.)

        Scores follow the new order: a hit placed below one it outscored takes a score just below the hit
        before it (its ``context`` or ``subject`` boost says by how much).
        """
        cfg = self.config
        order = ordered
        seed_of: dict[int, int] = {}
        if with_context:
            context = ranking.context_neighbours(self._rows, self._by_time, ordered[:ranking.CONTEXT_SEEDS], visible)
            if context:
                order = ranking.fuse_context(ordered, [i for i, _ in context], cfg.context_weight, cfg.rrf_k)
                seed_of = dict(context)
        step = "context"
        if cfg.subject_boost > 0:
            subject = ranking.named_source(text, self._rows, order)
            if subject is not None:
                moved = ranking.prefer_subject(order, self._rows, subject, cfg.subject_boost, cfg.rrf_k)
                if moved[:limit] != order[:limit]:
                    order, step = moved, "subject"
        order = order[:limit]
        if order == ordered[:limit]:
            return order
        previous = float("inf")
        for i in order:
            if i not in admitted:
                if i not in evidence.value:
                    evidence.add(i)
                ranks.setdefault(i, {})
                fused.setdefault(i, 0.0)
                admitted[i] = f"stored next to hit {seed_of[i]}"
                boosts[i] = {}
                final[i] = previous * (1.0 - 1e-3)
            elif final[i] >= previous:
                lowered = previous * (1.0 - 1e-3)
                if final[i] > 0:
                    boosts[i][step] = lowered / final[i]
                final[i] = lowered
            previous = final[i]
        return order

    def rank(self, text: str, *, session_id: str | None = None, limit: int = 10,
             mode: str = "hybrid") -> list[MemoryHit]:
        """The fused ranking of every candidate, ignoring the gate (no receipts, no events).

        For debugging ("why was this not recalled?") and for evaluating the
        ranking separately from the abstention decision. Each hit's
        ``explanation.admitted_by`` says whether recall would have admitted it.
        """
        self._check_open()
        text = statement(text)
        _check_limit(limit)
        if mode not in RECALL_MODES:
            raise InvalidInput(f"mode: expected one of {RECALL_MODES}, got {mode!r}")
        session_id = identity(session_id, "session_id", required=False)
        vec, pieces = self._encode_query(text)
        with self._lock:
            self._sync()
            sel, _ = self._retrieve(text, vec, session_id=session_id, wanted={}, kind_set=None,
                                    limit=limit, mode=mode, since=None, until=None, query_labels={},
                                    now=self._now(), admit_all=True, pieces=pieces)
        return list(sel.hits)


def _check_limit(limit: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
        raise InvalidInput(f"limit: expected an int in [1, 100], got {limit!r}")
