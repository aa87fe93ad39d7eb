"""The stages of recall, in the order :meth:`hopmem.agent._recaller.Recaller.run` calls them (:data:`ORDER`).

Each stage takes the question (:class:`~hopmem.agent._table.Query`) and a
:class:`~hopmem.agent._table.CandidateTable`, plus what it reads of the memory
(rows, configuration), and returns a new table; it never changes the table it
was given. The building blocks are in :mod:`~hopmem.agent.candidates` (the
retrievers), :mod:`~hopmem.agent.evidence`, :mod:`~hopmem.agent.verdict` and
:mod:`~hopmem.agent.ranking`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..text.gates import Gate
from . import ranking
from ._settings import RecallSettings
from ._table import CandidateTable, Query, Scope
from .candidates import Candidates, gather
from .evidence import Evidence, content_words, lexical_scorer
from .index import Row
from .parts import asks_for_several
from .temporal import TimeHints, asks_for_date
from .verdict import VerdictModel, admit_parts, decide, ranking_features
from .verdict import admit as admit_by_verdict

#: The stages in the order recall runs them (a layout test holds :meth:`Recaller.run` to it).
ORDER = ("find", "score", "fuse", "judge", "admit", "fuse_question_parts", "keep_head", "pull_versions",
         "boost", "order_versions", "sort", "add_context", "prefer_subject", "settle")


def find(query: Query, scope: Scope, config: RecallSettings, store: Any, rows: Mapping[int, Row],
         by_time: list[tuple[float, int]]) -> CandidateTable:
    """The retrievers' candidates for the whole question and, searched on their own (without a time window
    or exact tokens of their own: the whole question has those), for each of its question parts."""
    # a question asking for several things of one kind reads deeper (its instances resemble it less)
    k = config.aggregation_k if asks_for_several(query.text) else config.assoc_k
    args = dict(mode=query.mode, limit=query.limit, config=config, partitions=scope.partitions, tables=scope.tables,
                store=store, rows=rows, by_time=by_time, visible=scope.visible)
    found = gather(query.text, query.vector, hints=query.hints, assoc_k=k, **args)
    ids = found.ids
    part_found: tuple[Candidates, ...] = ()
    if query.question_parts:
        part_hints = TimeHints(order=None, window=None, cues=query.hints.cues)
        part_found = tuple([gather(text, vec, hints=part_hints, **args) for text, vec in query.question_parts])
        ids = ids.union(*[pf.ids for pf in part_found])
    return CandidateTable(found=found, part_found=part_found, ids=tuple(sorted(ids)),
                          in_window=frozenset(found.window_ids))


def score(query: Query, table: CandidateTable, config: RecallSettings, rows: Mapping[int, Row],
          scope: Scope) -> CandidateTable:
    """Every candidate's evidence, whichever list found it: against the whole question and against each
    question part."""

    def evidence(found: Candidates, vector: Any) -> Evidence:
        lexical = lexical_scorer(found.terms, scope.partitions) if query.reads_keywords else None
        out = Evidence(query.mode, config, rows, vector, found.semantic, found.associative, lexical)
        out.score_all(table.ids)
        return out

    whole = evidence(table.found, query.vector)
    part_evidence = tuple([evidence(pf, vec) for pf, (_, vec) in zip(table.part_found, query.question_parts)])
    # The verdict reads the whole question's own candidates. In the modes that read vectors every candidate
    # counts as its own (its semantic score is completed above), so only keyword mode leaves a multi-part
    # question's part-only candidates out.
    own = table.ids
    if table.part_found and table.found.ids and not whole.use_vectors:
        own = tuple(sorted(table.found.ids))
    return table.but(evidence=whole, part_evidence=part_evidence, own=own)


def fuse(query: Query, table: CandidateTable, config: RecallSettings) -> CandidateTable:
    """Reciprocal rank fusion of the whole question's lists (:func:`hopmem.agent.ranking.fuse`)."""
    assert table.evidence is not None
    lists = ranking.ranked_lists(table.found, table.evidence, table.in_window)
    ranks, fused = ranking.fuse(lists, table.ids, config)
    return table.but(lists=lists, ranks=ranks, fused=fused)


def judge(query: Query, table: CandidateTable, config: RecallSettings, gate: Gate, model: VerdictModel | None,
          rows: Mapping[int, Row], scope: Scope) -> CandidateTable:
    """The verdict (:func:`hopmem.agent.verdict.decide`): is anything relevant remembered? Hybrid mode's
    reads the fused ranking of the whole question's own candidates."""
    assert table.evidence is not None
    ranked = None
    if query.mode == "hybrid":
        own = list(table.own)
        ranks, fused = ((table.ranks, table.fused) if table.own == table.ids
                        else ranking.fuse(table.lists, own, config))
        ev = table.ev
        fused_order = sorted(own, key=lambda i: (-fused[i], -ev[i], i))
        ranked = ranking_features(fused_order, ranks, rows, content_words(query.text), scope.partitions,
                                  config.common_fraction)
    verdict = decide(query.mode, config, gate, model, table.evidence, table.own, table.found.novelty, ranked)
    return table.but(verdict=verdict)


def admit(query: Query, table: CandidateTable, band_gate: Gate, config: RecallSettings) -> CandidateTable:
    """The admitted candidates and why (:func:`hopmem.agent.verdict.admit`); after a yes verdict each
    question part also admits its own best candidates."""
    assert table.evidence is not None and table.verdict is not None
    admitted = admit_by_verdict(table.ids, table.evidence, table.verdict, band_gate, table.found.exact,
                                table.in_window, query.admit_all)
    if table.verdict.passes:
        admit_parts(admitted, table.ids, table.part_evidence, config.floor_ratio)
    return table.but(admitted=admitted)


def fuse_question_parts(query: Query, table: CandidateTable, config: RecallSettings) -> CandidateTable:
    """A multi-part question's parts' lists join the fusion (each weighing ``part_weight``)."""
    if not table.part_found:
        return table
    lists = dict(table.lists)
    for n, (pf, pe) in enumerate(zip(table.part_found, table.part_evidence), start=1):
        lists.update({f"part {n}:{name}": ids for name, ids in ranking.ranked_lists(pf, pe, ()).items()})
    ranks, fused = ranking.fuse(lists, table.ids, config)
    return table.but(lists=lists, ranks=ranks, fused=fused)


def keep_head(query: Query, table: CandidateTable, depth: int) -> CandidateTable:
    """The admitted hits that can still reach the first ``depth`` (:func:`hopmem.agent.ranking.head`)."""
    admitted = ranking.head(table.admitted, table.fused, table.ev, table.found.exact, depth)
    return table if admitted is table.admitted else table.but(admitted=admitted)


def pull_versions(query: Query, table: CandidateTable, rows: Mapping[int, Row], scope: Scope) -> CandidateTable:
    """The other end of each admitted entry's supersession chain (newest, or oldest when the question asks
    for an earlier state), admitted on its own evidence (at least the verdict's floor) just behind it."""
    assert table.evidence is not None and table.verdict is not None
    order = query.hints.order or "recent"
    # an entry without versions is its own chain's end
    relatives = {i: ranking.chain_end(rows, i, order, scope.visible) for i in table.admitted
                 if (row := rows[i]).superseded_by is not None or row.supersedes}
    if not relatives:
        return table.but(via={}) if table.via else table
    # the versions not scored yet get their evidence (no ranks: no list found them)
    new = [r for r in dict.fromkeys(relatives.values()) if r is not None and r not in table.ev]
    evidence = table.evidence.extended(new) if new else table.evidence
    via: dict[int, int] = {}
    for i, relative in relatives.items():
        if (relative is not None and relative != i and relative not in table.admitted and relative not in via
                and evidence.value[relative] >= table.verdict.floor):
            via[relative] = i
    if not via:
        return table.but(evidence=evidence, via=via)
    why = ("newer" if order == "recent" else "older") + " version of an admitted hit"
    admitted = {**table.admitted, **dict.fromkeys(via, why)}
    fused = {**table.fused, **{r: max(table.fused.get(r, 0.0), table.fused[i] * 0.999) for r, i in via.items()}}
    return table.but(admitted=admitted, fused=fused, evidence=evidence, via=via)


def boost(query: Query, table: CandidateTable, config: RecallSettings, rows: Mapping[int, Row], utility: Any,
          retention: Any) -> CandidateTable:
    """Each admitted hit's boosted score (:func:`hopmem.agent.ranking.apply_boosts`)."""
    final, boosts = ranking.apply_boosts(
        rows, table.admitted, table.fused, config=config, query_labels=query.labels, utility=utility,
        retention=retention, hint_order=query.hints.order, in_window=table.in_window,
        asks_date=asks_for_date(query.text))
    return table.but(final=final, boosts=boosts)


def order_versions(query: Query, table: CandidateTable, rows: Mapping[int, Row]) -> CandidateTable:
    """Versions of one fact trade places (:func:`hopmem.agent.ranking.order_versions`); an entry matched by
    an exact token, or below the verdict's floor, keeps its place."""
    assert table.verdict is not None
    ev, exact, floor = table.ev, table.found.exact, table.verdict.floor
    ids = [i for i in table.admitted if i not in exact and ev[i] >= floor]
    groups = ranking.version_groups(rows, ids)
    if not groups:
        return table
    final = dict(table.final)
    boosts = {**table.boosts, **{i: dict(table.boosts[i]) for group in groups for i in group}}
    ranking.order_groups(rows, groups, query.hints.order or "recent", final, boosts)
    return table.but(final=final, boosts=boosts)


def sort(query: Query, table: CandidateTable) -> CandidateTable:
    """The admitted hits by final score (then evidence, then id)."""
    final, ev = table.final, table.ev
    return table.but(order=tuple(sorted(table.admitted, key=lambda i: (-final[i], -ev[i], i))))


def add_context(query: Query, table: CandidateTable, config: RecallSettings, rows: Mapping[int, Row],
                by_time: list[tuple[float, int]], scope: Scope) -> CandidateTable:
    """Hybrid mode, once the verdict is yes (or for ranking alone): the entries stored next to the first hits
    fused into the order (``Tuning.context_weight``, :func:`hopmem.agent.ranking.fuse_context`)."""
    assert table.verdict is not None
    if not (query.mode == "hybrid" and config.context_weight > 0 and (table.verdict.passes or query.admit_all)):
        return table
    context = ranking.context_neighbours(rows, by_time, table.order[:ranking.CONTEXT_SEEDS], scope.visible)
    if not context:
        return table
    order = ranking.fuse_context(table.order, [i for i, _ in context], config.context_weight, config.rrf_k)
    return table.but(order=tuple(order), context_of=dict(context))


def prefer_subject(query: Query, table: CandidateTable, config: RecallSettings, rows: Mapping[int, Row],
                   depth: int) -> CandidateTable:
    """The turns of the source the question names move up (``Tuning.subject_boost``,
    :func:`hopmem.agent.ranking.prefer_subject`), when that changes the first ``depth``."""
    if config.subject_boost <= 0:
        return table
    subject = ranking.named_source(query.text, rows, table.order)
    if subject is None:
        return table
    moved = ranking.prefer_subject(table.order, rows, subject, config.subject_boost, config.rrf_k)
    if moved[:depth] == list(table.order[:depth]):
        return table
    return table.but(order=tuple(moved), moved_by="subject")


def settle(query: Query, table: CandidateTable, sorted_order: tuple[int, ...], depth: int) -> CandidateTable:
    """The first ``depth`` hits. Where context or subject changed them (against ``sorted_order``, the order
    by score), scores follow the new order: a hit placed below one it outscored takes a score just below
    the hit before it (its ``context`` or ``subject`` boost says by how much), and an entry only the context
    brought is admitted as such."""
    order = table.order[:depth]
    if order == sorted_order[:depth]:
        return table if len(order) == len(table.order) else table.but(order=order)
    evidence = table.evidence
    assert evidence is not None
    added = [i for i in order if i not in table.admitted and i not in evidence.value]
    if added:
        evidence = evidence.extended(added)
    admitted, final, boosts = dict(table.admitted), dict(table.final), dict(table.boosts)
    previous = float("inf")
    for i in order:
        if i not in admitted:  # its ranks and fused score stay as they were (none, 0, if it was no candidate)
            admitted[i] = f"stored next to hit {table.context_of[i]}"
            boosts[i] = {}
            final[i] = previous * (1.0 - 1e-3)
        elif final[i] >= previous:
            lowered = previous * (1.0 - 1e-3)
            if final[i] > 0:
                boosts[i] = {**boosts[i], table.moved_by: lowered / final[i]}
            final[i] = lowered
        previous = final[i]
    return table.but(order=order, evidence=evidence, admitted=admitted, final=final, boosts=boosts)
