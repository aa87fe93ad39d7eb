"""Ordering admitted hits: reciprocal rank fusion, version order, boosts, and the hits themselves.

Fusion sums ``weight / (rrf_k + rank)`` over the lists that found a candidate;
scores are never averaged across retrievers. On the head of the fused ranking,
the other end of an admitted entry's supersession chain is pulled in on its own
evidence, multiplicative boosts (labels, utility, retention, recency, time
window, dated hits for a question that asks when) reorder, and versions of one
fact trade places (newest first, or oldest first when the query asks for an
earlier state). Then the conversational context of the first hits
(:func:`context_neighbours`) is fused into the order (:func:`fuse_context`),
and last the turns of the source the question names move up
(:func:`named_source`, :func:`prefer_subject`). Nothing here decides the
verdict.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from ..text.gates import Gate
from . import keyword as kw
from ._settings import RecallSettings
from ._table import CandidateTable
from .candidates import Candidates
from .evidence import Evidence
from .index import Row, source_of
from .labels import labels_overlap, merge_labels
from .results import Explanation, MemoryHit
from .temporal import resolve_dates
from .tuning import constant

__all__ = ["ranked_lists", "fuse", "head", "apply_boosts", "order_versions", "order_groups", "build_hits",
           "chain_end", "version_groups", "named_source", "named_among", "source_key", "prefer_subject",
           "context_neighbours",
           "fuse_context", "CONTEXT_GAP", "CONTEXT_SEEDS",
           "CONTEXT_PER_SIDE", "CONTEXT_KEEP"]

#: Entries created at most this many seconds before or after a hit can be its context.
CONTEXT_GAP: float = constant("CONTEXT_GAP")
#: How many of the first hits bring their context in.
CONTEXT_SEEDS: int = constant("CONTEXT_SEEDS")
#: How many entries on each side of a hit are its context.
CONTEXT_PER_SIDE: int = constant("CONTEXT_PER_SIDE")
#: The first hits that keep their places when the context is fused in.
CONTEXT_KEEP: int = constant("CONTEXT_KEEP")

#: The retrievers' lists in the order a hit's explanation names them.
_SOURCES = ("keyword", "semantic", "associative", "exact", "time")


def ranked_lists(found: Candidates, evidence: Evidence, in_window: Collection[int]) -> dict[str, list[int]]:
    """Each retriever's list of entry ids, best first."""
    ev = evidence.value
    exact = found.exact
    lists: dict[str, list[int]] = {}
    if found.sem_list:
        lists["semantic"] = [i for _, i in sorted(found.sem_list, key=lambda t: (-t[0], t[1]))]
    if found.assoc_list:
        lists["associative"] = [i for _, i in sorted(found.assoc_list, key=lambda t: (-t[0], t[1]))]
    if found.kw_list:
        lists["keyword"] = [i for _, i in sorted(found.kw_list, key=lambda t: (-t[0], t[1]))]
    if exact:
        lists["exact"] = sorted(exact, key=lambda i: (-len(exact[i]), -ev[i], i))
    if found.window_ids:
        lists["time"] = sorted(in_window, key=lambda i: (-ev[i], i))
    return lists


def fuse(lists: Mapping[str, Sequence[int]], ids: Sequence[int],
         config: RecallSettings) -> tuple[dict[int, dict[str, int]], dict[int, float]]:
    """Reciprocal rank fusion over the lists: each candidate's rank per list, and its fused score.

    A list named ``"part N:retriever"`` is one part's list of a multi-part question: it
    weighs ``part_weight`` times the retriever's weight.
    """
    ranks: dict[int, dict[str, int]] = {i: {} for i in ids}
    fused: dict[int, float] = {i: 0.0 for i in ids}
    for name, ordered in lists.items():
        part, _, retriever = name.rpartition(":")  # "part 2:keyword": a part's list (see parts.py)
        weight = config.rrf_weights.get(retriever, 1.0) * (config.part_weight if part else 1.0)
        seen = set()
        rank = 0
        for i in ordered:
            if i in seen or i not in fused:
                continue
            seen.add(i)
            rank += 1
            ranks[i][name] = rank
            fused[i] += weight / (config.rrf_k + rank)
    return ranks, fused


def head(admitted: Mapping[int, str], fused: Mapping[int, float], ev: Mapping[int, float],
         exact: Collection[int], limit: int) -> Mapping[int, str]:
    """The admitted hits that can still reach the top ``limit``.

    Only the head of the fused ranking can get there through bounded boosts
    and version swaps: keep that pool (and every exact-token hit).
    """
    pool_size = max(24, 4 * limit)
    if len(admitted) <= pool_size:
        return admitted
    keep = set(sorted(admitted, key=lambda i: (-fused[i], -ev[i], i))[:pool_size]) | set(exact)
    return {i: why for i, why in admitted.items() if i in keep}


def apply_boosts(rows: Mapping[int, Row], admitted: Collection[int], fused: Mapping[int, float], *,
                 config: RecallSettings, query_labels: Mapping[str, list[str]], utility: Callable[[Row], float] | None,
                 retention: Callable[[Row], float] | None, hint_order: str | None,
                 in_window: Collection[int],
                 asks_date: bool = False) -> tuple[dict[int, float], dict[int, dict[str, float]]]:
    """Each admitted hit's boosted score and the boosts applied (``utility`` / ``retention`` None: off).

    With ``asks_date`` (the question asks when, :func:`~hopmem.agent.temporal.asks_for_date`), a hit whose
    text names a date relative to its own time (:func:`~hopmem.agent.temporal.resolve_dates`: "yesterday",
    "last Saturday") gets ``date_boost``: the turn that reports an event usually says when it happened.
    """
    cfg = config
    final: dict[int, float] = {}
    boosts: dict[int, dict[str, float]] = {}
    newest = sorted(admitted, key=lambda i: (rows[i].created_at, i))
    recency_rank = {i: r for r, i in enumerate(newest)}
    for i in admitted:
        row = rows[i]
        b: dict[str, float] = {}
        if query_labels:
            overlap = labels_overlap(query_labels, merge_labels(row.labels, row.inferred_labels))
            b["labels"] = 1.0 + cfg.label_boost * overlap
        if utility is not None:
            b["utility"] = 1.0 + cfg.utility_boost * utility(row)
        if retention is not None:
            b["retention"] = 0.5 + 0.5 * retention(row)
        if hint_order == "recent" and len(newest) > 1:
            b["recency"] = 1.0 + cfg.recency_boost * recency_rank[i] / (len(newest) - 1)
        elif hint_order == "origin" and len(newest) > 1:
            b["recency"] = 1.0 + cfg.recency_boost * (1.0 - recency_rank[i] / (len(newest) - 1))
        if i in in_window:
            b["time window"] = 1.0 + cfg.recency_boost
        if asks_date and cfg.date_boost > 0 and resolve_dates(row.text, row.created_at):
            b["dated"] = 1.0 + cfg.date_boost
        factor = 1.0
        for v in b.values():
            factor *= v
        boosts[i] = b
        final[i] = fused[i] * factor
    return final, boosts


@functools.lru_cache(maxsize=1024)
def _source_words(source: str) -> str | None:
    return " ".join(kw.words(source)) or None


def source_key(metadata: object) -> str | None:
    """A statement's source (:func:`~hopmem.agent.index.source_of`) as the words that name it, joined."""
    source = source_of(metadata)
    return _source_words(source) if isinstance(source, str) else None


def named_source(query: str, rows: Mapping[int, Row], ids: Collection[int]) -> str | None:
    """The one source of the statements ``ids`` that ``query`` names, or None (:func:`named_among`)."""
    return named_among(query, (rows[i].metadata for i in ids))


def named_among(query: str, metadatas: Iterable[object]) -> str | None:
    """The one source among the statements whose metadata are ``metadatas`` that ``query`` names, or None.

    A conversation turn's metadata names its source (its ``speaker`` or
    ``source``, :func:`~hopmem.agent.index.source_of`). When the question names
    exactly one of the sources by its words ("What has *Melanie*
    painted?"), that person is its subject, and what they did is told in their
    own turns rather than in the turns that ask them about it. A question that
    names two sources, or none, has no subject here. Returned as the source's
    lowercase words joined by spaces.
    """
    padded = " " + " ".join(kw.words(query)) + " "
    named = set()
    for metadata in metadatas:
        key = source_key(metadata)
        if key is not None and key not in named and f" {key} " in padded:
            named.add(key)
            if len(named) > 1:
                return None
    return next(iter(named), None)


def order_versions(rows: Mapping[int, Row], ids: Sequence[int], order: str, final: dict[int, float],
                   boosts: dict[int, dict[str, float]]) -> None:
    """Versions of one fact among ``ids``: the preferred one (newest for ``recent``, else oldest) takes the
    group's best score, the others keep theirs (just below it at most), so the version it displaced stays
    right behind it rather than trading places with it."""
    order_groups(rows, version_groups(rows, ids), order, final, boosts)


def order_groups(rows: Mapping[int, Row], groups: Sequence[Sequence[int]], order: str, final: dict[int, float],
                 boosts: Mapping[int, Any]) -> None:
    """:func:`order_versions` over groups already found (:func:`version_groups`)."""
    for group in groups:
        by_time = sorted(group, key=lambda i: (rows[i].created_at, i), reverse=(order == "recent"))
        top = max(final[i] for i in group)
        values = [top] + [min(final[i], top * (1.0 - 1e-3)) for i in by_time[1:]]
        for i, value in zip(by_time, values):
            if final[i] > 0 and abs(value - final[i]) > 1e-12:
                boosts[i]["version order"] = value / final[i]
            final[i] = value


def build_hits(rows: Mapping[int, Row], table: CandidateTable, band_gate: Gate, use_keywords: bool
               ) -> list[MemoryHit]:
    """The hits of ``table.order``, each with its band and explanation, read from the table's columns."""
    found, evidence, admitted, ranks = table.found, table.evidence, table.admitted, table.ranks
    fused, final, boosts, via, in_window = table.fused, table.final, table.boosts, table.via, table.in_window
    assert evidence is not None
    # matched terms for the explanation, by the light stemmer (FTS5's Porter stemmer decided the ranking)
    term_stems = [(t, kw.stem(t)) for t in found.terms] if use_keywords else []
    value, semantic, associative, keyword = evidence.value, evidence.semantic, evidence.associative, evidence.keyword
    hits = []
    for i in table.order:
        row = rows[i]
        found_by = ranks.get(i, {})
        sources = tuple([name for name in _SOURCES if name in found_by])
        parts = {name.partition(":")[0] for name in found_by if ":" in name}
        if parts:
            sources += tuple(sorted(parts))
        band = band_gate.band(value[i])
        if admitted[i] == "exact token" and band == "vague":
            band = "clear"
        stems = row.stems
        expl = Explanation(
            sources=sources, ranks=dict(found_by), semantic=round(semantic.get(i, 0.0), 4),
            associative=round(associative.get(i, 0.0), 4), keyword=round(keyword.get(i, 0.0), 4),
            bm25=found.keyword_scores.get(i), evidence=round(value[i], 4),
            matched_terms=tuple([t for t, st in term_stems if st in stems]),
            exact_tokens=tuple(found.exact.get(i, ())), time_match=i in in_window, admitted_by=admitted[i],
            boosts={k: round(v, 4) for k, v in b.items()} if (b := boosts[i]) else {},
            fused=round(fused.get(i, 0.0), 6), superseded_by=row.superseded_by, via=via.get(i))
        hits.append(MemoryHit(entry_id=i, text=row.text, score=round(final[i], 6), band=band, explanation=expl,
                        kind=row.kind, durability=row.durability, session_id=row.session_id,
                        labels={k: list(v) for k, v in row.labels.items()} if row.labels else {},
                        metadata=row.metadata,
                        created_at=row.created_at, importance=row.importance,
                        dates=resolve_dates(row.text, row.created_at)))
    return hits


def chain_end(rows: Mapping[int, Row], entry_id: int, order: str, visible: Callable[[int], bool]) -> int | None:
    """The newest (``recent``) or oldest (``origin``) visible version of an entry."""
    row = rows.get(entry_id)
    if row is None:
        return None
    seen = {entry_id}
    best = entry_id
    if order == "recent":
        nxt = row.superseded_by
        while nxt is not None and nxt not in seen and nxt in rows:
            seen.add(nxt)
            if visible(nxt):
                best = nxt
            nxt = rows[nxt].superseded_by
    else:
        frontier = list(row.supersedes)
        oldest = (row.created_at, entry_id)
        while frontier:
            cur = frontier.pop()
            if cur in seen or cur not in rows:
                continue
            seen.add(cur)
            r = rows[cur]
            if visible(cur) and (r.created_at, cur) < oldest:
                oldest = (r.created_at, cur)
                best = cur
            frontier.extend(r.supersedes)
    return best


def version_groups(rows: Mapping[int, Row], ids: Sequence[int]) -> list[list[int]]:
    """Groups of ``ids`` connected through supersession links (at least two members each)."""
    members = set(ids)
    root: dict[int, int] = {}

    def find(i: int) -> int:
        while root.get(i, i) != i:
            i = root[i]
        return i

    for i in ids:
        nxt, seen = rows[i].superseded_by, {i}
        while nxt is not None and nxt not in seen and nxt in rows:
            seen.add(nxt)
            if nxt in members:
                a, b = find(i), find(nxt)
                if a != b:
                    root[a] = b
            nxt = rows[nxt].superseded_by
    groups: dict[int, list[int]] = {}
    for i in ids:
        groups.setdefault(find(i), []).append(i)
    return [g for g in groups.values() if len(g) > 1]


def context_neighbours(rows: Mapping[int, Row], by_time: Sequence[tuple[float, int]], seeds: Sequence[int],
                       visible: Callable[[int], bool], gap: float = CONTEXT_GAP,
                       per_side: int = CONTEXT_PER_SIDE) -> list[tuple[int, int]]:
    """The turns stored just before and after each seed: ``(entry, seed)`` pairs, best first.

    Only conversation turns have context: for each seed whose metadata names
    its source (:func:`~hopmem.agent.index.source_of`), in order, the nearest
    visible turns of its scope created within ``gap`` seconds of it,
    alternating sides (before, after, second before, second after), each
    entry once and never a seed. Statements without a source (facts an
    application writes one by one) are not each other's context.
    """
    out: list[tuple[int, int]] = []
    taken = set(seeds)
    for seed in seeds:
        row = rows[seed]
        if source_of(row.metadata) is None:
            continue
        at = bisect.bisect_left(by_time, (row.created_at, seed))
        sides: list[list[int]] = []
        for step in (-1, 1):
            found: list[int] = []
            j = at + step
            while 0 <= j < len(by_time) and len(found) < per_side:
                t, i = by_time[j]
                if abs(t - row.created_at) > gap:
                    break
                other = rows.get(i)
                if (other is not None and other.partition == row.partition and source_of(other.metadata) is not None
                        and visible(i)):
                    found.append(i)
                j += step
            sides.append(found)
        for k in range(per_side):
            for side in sides:
                if k < len(side) and side[k] not in taken:
                    taken.add(side[k])
                    out.append((side[k], seed))
    return out


def prefer_subject(order: Sequence[int], rows: Mapping[int, Row], subject: str, boost: float, rrf_k: float,
                   keep: int = CONTEXT_KEEP) -> list[int]:
    """``order`` (the hits, best first) with the turns of ``subject`` (:func:`named_source`) moved up.

    Each entry scores ``1 / (rrf_k + position)``, times ``1 + boost`` when its
    source is the subject, and the order follows the scores; the first
    ``keep`` of ``order`` stay first, and ties keep ``order``'s order. Working
    on positions rather than scores makes it apply the same way to the hits the
    conversational context brought in (:func:`fuse_context`), which have no
    fused score of their own.
    """
    head = list(order[:keep])
    rest = [i for i in order if i not in head]
    score = {i: (1.0 + boost if source_key(rows[i].metadata) == subject else 1.0) / (rrf_k + n)
             for n, i in enumerate(rest, len(head) + 1)}
    position = {i: n for n, i in enumerate(rest)}
    return head + sorted(rest, key=lambda i: (-score[i], position[i]))


def fuse_context(order: Sequence[int], context: Sequence[int], weight: float, rrf_k: float,
                 keep: int = CONTEXT_KEEP) -> list[int]:
    """``order`` (the hits, best first) and ``context`` (:func:`context_neighbours`' entries) fused by
    reciprocal rank fusion, ``context`` weighing ``weight`` against ``order``'s 1; the first ``keep`` of
    ``order`` stay first. Ties keep ``order``'s order."""
    score: dict[int, float] = {}
    for r, i in enumerate(order, 1):
        score[i] = score.get(i, 0.0) + 1.0 / (rrf_k + r)
    for r, i in enumerate(context, 1):
        score[i] = score.get(i, 0.0) + weight / (rrf_k + r)
    position = {i: n for n, i in enumerate([*order, *context])}
    head = list(order[:keep])
    rest = sorted((i for i in score if i not in head), key=lambda i: (-score[i], position[i]))
    return head + rest
