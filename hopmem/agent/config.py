"""Retrieval and admission parameters of the agent memory (:class:`RecallConfig`) and its recall modes.

The defaults are documented in docs/agent-memory.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .._deprecation import module_aliases
from ..errors import InvalidInput
from .tuning import setting

__all__ = ["RECALL_MODES", "DURABILITIES", "DEFAULT_UPDATE_CUES", "DEFAULT_RRF_WEIGHTS", "RecallConfig"]

#: The recall modes: ``"hybrid"`` (every retriever), ``"associative"`` (engine reads only) and
#: ``"keyword"`` (FTS5 and exact tokens only).
RECALL_MODES = ("hybrid", "associative", "keyword")
DURABILITIES = ("shared", "session")


#: Words that phrase a statement as a change of an earlier one. A new statement
#: containing one supersedes its most similar current statement (same kind and
#: scope, cosine >= ``supersede_cosine``). English only; replace or disable
#: (``update_cues=None``: every similar statement supersedes) in RecallConfig.
DEFAULT_UPDATE_CUES = (
    r"\b(now|new|newer|moved|moves|switched|changed|replaced|instead|no longer|increased|decreased|dropped|"
    r"raised|lowered|grown|improved|slipped|again|down to|up to|cut down|latest|retired|refinanced|migrated|"
    r"finished|upgraded|downgraded|rescheduled|postponed|reduced|updated|anymore|any more|stopped|started|"
    r"promoted|renamed|left|quit|became|nowadays|currently)\b"
)


#: Weight of each ranked list in reciprocal rank fusion. The engine's reconstruction list
#: ("associative") weighs 0: on the evaluation's conversations it moved near ties the wrong way.
#: Its score still counts in every candidate's evidence (``path``) and in the verdict.
DEFAULT_RRF_WEIGHTS: Mapping[str, float] = setting("rrf_weights")


@dataclass(frozen=True)
class RecallConfig:
    """Retrieval and admission parameters; the defaults are documented in docs/agent-memory.md.

    Evidence of one candidate entry ``e`` for the query ``q`` (centred unit
    vectors, ``r`` the engine's reconstruction, ``f = cos(q, r)``):

    * ``semantic = cos(q, e)``; ``associative = max(f, 0) * cos(r, e)``;
      ``path = max(semantic, associative)`` (as in :mod:`hopmem.text.recall`);
    * ``keyword = b / (b + bm25_half)`` with ``b`` the entry's BM25 score for
      the query's words (always-positive IDF, see :func:`hopmem.agent.evidence.lexical_scorer`);
    * hybrid ``evidence = path + keyword_weight * keyword``; associative mode
      uses ``path``; keyword mode uses ``keyword``.

    The verdict (abstain or not) compares the log-odds of a logistic model over
    the mode's verdict features (the best candidate's evidence, the query's
    novelty, the semantic margin and the crowd of entries almost as close as
    the nearest; see :mod:`hopmem.agent.verdict`), fitted by
    :meth:`AgentMemory.calibrate`, with the verdict gate's ``tau``. Once the
    verdict is yes, a hit needs ``evidence >= floor_ratio * best evidence``
    (in hybrid mode, or a semantic path of at least ``floor_ratio`` of the best
    path, so that a statement sharing no words with the question is not held
    back by another's keyword evidence); the band gate labels it.
    Independently of the verdict, a rare exact token or the query's time
    window admits an entry, and the newer (or older) version of an admitted
    hit is pulled in on its own evidence and placed just ahead of the version
    it displaced. A question that joins question clauses ("Where do I climb
    now, and what's the hardest route there?", see :mod:`hopmem.agent.parts`)
    is also searched part by part; a question comparing two events ("which
    came first, A or B?") asks for no earlier version of a fact.

    The defaults were chosen on the evaluation's development conversations
    with all-MiniLM-L6-v2 (docs/agent-eval.md). With another encoder, or
    another kind of text, recalibrate (:meth:`AgentMemory.calibrate`) before
    changing any of them, and measure a change on questions of your own.
    ``beta``, ``rrf_k``, ``bm25_half``, ``novelty_ceiling``, ``rrf_weights``,
    ``common_fraction``, ``close_margin`` and ``rebuild_dead_fraction`` are
    the settings the default verdict models were fitted under: their defaults
    come from the tuning record (:mod:`hopmem.agent.tuning`, docs/tuning.md),
    and opening a memory with another value warns (calibrate() fits a verdict under it).

    Attributes
    ----------
    beta : float
        Inverse temperature of the engine's reads (> 0): how sharply a read
        concentrates on the nearest entries. Higher makes the reconstruction
        (``associative`` evidence) follow the nearest entry more closely.
        Rarely worth changing.
    assoc_k : int
        Entries each engine read activates per partition (>= 1): the
        semantic candidate list's length. Raise it for memories where answers
        lie beyond the 32 nearest statements; it costs read time.
    aggregation_k : int
        Entries each engine read activates for a question that asks for
        several things of one kind ("What activities does X partake in?",
        "How many ...", :func:`hopmem.agent.parts.asks_for_several`), in
        place of ``assoc_k`` (>= 1). Their answers are spread over entries
        that each name one instance and resemble the question less than its
        best match, so the read goes deeper for them (the same engine, read
        with its own ``k``). Equal to ``assoc_k``: off.
    activation : {"compact", "exact"}
        How engine reads scan the entries: ``"compact"`` scans a float16 copy
        and re-scores the best candidates exactly (faster on large memories;
        it differs from ``"exact"`` only when a true nearest entry falls
        outside that pool), ``"exact"`` scans float32.
    over_fetch : int
        Keyword candidates fetched from FTS5 per partition (at least ``4 *
        limit``; >= 1). Raise it when many entries are hidden by scope,
        labels or expiry and keyword candidates run out.
    rrf_k : float
        The constant of reciprocal rank fusion, ``weight / (rrf_k + rank)``
        (> 0). Larger flattens the difference between the first ranks.
    keyword_weight : float
        Weight of keyword evidence against the semantic path in hybrid mode's
        evidence. Raise it for text where exact words matter more than
        meaning (codes, names), lower it for paraphrased questions.
    common_fraction : float
        Query words found in more than this share of the visible entries
        (in [0, 1]) are left out of the FTS5 query of a memory of 200 entries
        or more: they add almost nothing to BM25 and cost time.
    bm25_half : float
        The BM25 score at which keyword evidence reaches 0.5 (> 0). Lower it
        when entries are short and BM25 scores small.
    floor_ratio : float
        Once the verdict is yes, a candidate is admitted when its evidence
        reaches this share of the best candidate's (in [0, 1]). Lower returns
        more, weaker hits; higher returns only near ties with the best.
    close_margin : float
        An abstention within this distance below ``tau`` is reported as "too
        close to call" in the selection's reason (wording only).
    rare_min, rare_fraction : int, float
        A query's identifier token (an order number, a ticket id) found in at
        most ``max(rare_min, rare_fraction * N)`` visible entries admits them
        whatever the verdict. Raise them when identifiers repeat across many
        entries.
    dedup_cosine : float
        A new statement of the same kind whose cosine with an existing one
        reaches this (and with the same value tokens), made within an hour
        of it (``hopmem.agent.writes.NEAR_DUPLICATE_WINDOW``), is merged into
        it instead of stored twice. Above 1 disables merging (the same text
        in the same scope is always merged).
    supersede_cosine : float
        A new statement phrased as a change (``update_cues``) supersedes its
        most similar current statement of the same kind and scope when their
        cosine reaches this; conversation turns (statements whose metadata
        name a ``"speaker"`` or ``"source"``) are left out. Above 1 disables
        automatic supersession (``supersedes=`` still works).
    update_cues : str or None
        Regular expression (case-insensitive) of the words that phrase a
        statement as a change (default :data:`DEFAULT_UPDATE_CUES`, English).
        Replace it for another language; None lets every similar statement
        supersede.
    label_boost, utility_boost, recency_boost : float
        Multiplicative boosts that only reorder admitted hits: per label an
        entry shares with the query's labels (from the memory's ``labeler``),
        by learned utility (with ``reinforcement``), and by recency when the
        query asks for the latest state (by age when it asks for an earlier
        one, and for entries in the query's time window). 0 turns one off.
    rrf_weights : mapping of str to float
        Weight of each ranked list (``semantic``, ``associative``, ``keyword``,
        ``exact``, ``time``) in the fusion; default :data:`DEFAULT_RRF_WEIGHTS`.
    rebuild_dead_fraction : float
        A partition is compacted (its engine memory rebuilt at the next read)
        once its deleted entries outnumber both 16 and this share of its live
        ones (in [0, 1]). Lower keeps reads lean after many deletions at the
        cost of more rebuilds.
    part_weight : float
        Weight of a multi-part question's per-part lists in the fusion,
        relative to the whole question's (in [0, 1]). 0 leaves the parts out of
        the fusion (they still admit their own best candidates).
    novelty_ceiling : float
        How :func:`~hopmem.agent.evidence.novelty` weighs the query's words
        (in (0, 10]): ``max(0, novelty_ceiling - zipf)``, ``zipf`` being the
        word's Zipf frequency in English (7.7 for "the", 5.2 for "moment", 3.7
        for "renovation"), so an everyday word the memory lacks weighs less
        than a specific one. The default verdict models are fitted for 7.0:
        recalibrate after changing it.
    context_weight : float
        Weight (in [0, 1]) of the conversational context in hybrid mode's ranking: the
        entries stored just before and after the first three hits (same
        scope, within ``hopmem.agent.ranking.CONTEXT_GAP`` seconds, two on
        each side) are fused into the hits' order as one more list, by
        reciprocal rank fusion at this weight, the first two hits keeping
        their places. A reply ("Yes, twice!") is found through the turn it
        answers. 0 turns it off.
    subject_boost : float
        How much (in [0, 1]) the turns of the question's subject move up in
        the final order. When the question names exactly one of the sources
        among the hits (the ``"speaker"`` or ``"source"`` their metadata
        names: "What has *Melanie* painted?"), each hit scores ``1 / (rrf_k +
        position)``, times ``1 + subject_boost`` for that source's turns, and
        the hits are reordered by it, the first two keeping their places
        (:func:`hopmem.agent.ranking.prefer_subject`). What a person did is
        told in their own turns, not in the turns that ask them about it. It
        applies after the conversational context, in every mode. 0 turns it
        off.
    date_boost : float
        Multiplicative boost (``1 + date_boost``, in [0, 1]) of a hit whose
        text names a date relative to its own time ("yesterday", "last
        Saturday", :func:`hopmem.agent.temporal.resolve_dates`) when the
        question asks when something happened (it opens with "when", "what
        day/month/year ..." or "how long ago";
        :func:`hopmem.agent.temporal.asks_for_date`). The turn that reports an
        event usually says when it happened. English only; 0 turns it off.
    """

    beta: float = setting("beta")
    assoc_k: int = 32
    aggregation_k: int = 64
    activation: Literal["exact", "compact"] = "compact"
    over_fetch: int = 50
    rrf_k: float = setting("rrf_k")
    keyword_weight: float = 0.5
    common_fraction: float = setting("common_fraction")
    bm25_half: float = setting("bm25_half")
    floor_ratio: float = 0.6
    close_margin: float = setting("close_margin")
    rare_min: int = 3
    rare_fraction: float = 0.01
    dedup_cosine: float = 0.95
    supersede_cosine: float = 0.5
    update_cues: str | None = DEFAULT_UPDATE_CUES
    label_boost: float = 0.15
    utility_boost: float = 0.25
    recency_boost: float = 0.1
    rrf_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_RRF_WEIGHTS))
    rebuild_dead_fraction: float = setting("rebuild_dead_fraction")
    part_weight: float = 0.5
    novelty_ceiling: float = setting("novelty_ceiling")
    context_weight: float = 0.5
    subject_boost: float = 0.25
    date_boost: float = 0.5

    def __post_init__(self) -> None:
        for name in ("beta", "rrf_k", "bm25_half"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise InvalidInput(f"{name}: expected a number > 0, got {value!r}")
        for name in ("assoc_k", "aggregation_k", "over_fetch", "rare_min"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name}: expected an int >= 1, got {value!r}")
        for name in ("floor_ratio", "rare_fraction", "rebuild_dead_fraction", "common_fraction", "part_weight",
                     "context_weight", "subject_boost", "date_boost"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise InvalidInput(f"{name}: expected a number in [0, 1], got {value!r}")
        for name in ("dedup_cosine", "supersede_cosine"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not -1.0 <= value <= 1.01:
                raise InvalidInput(f"{name}: expected a cosine in [-1, 1] (above 1 disables), got {value!r}")
        if self.update_cues is not None:
            try:
                object.__setattr__(self, "_cues", re.compile(self.update_cues, re.IGNORECASE))
            except (re.error, TypeError) as exc:
                raise InvalidInput(f"update_cues: expected a regular expression or None: {exc}") from None
        if (isinstance(self.novelty_ceiling, bool) or not isinstance(self.novelty_ceiling, (int, float))
                or not 0.0 < self.novelty_ceiling <= 10.0):
            raise InvalidInput(f"novelty_ceiling: expected a number in (0, 10], got {self.novelty_ceiling!r}")
        if self.activation not in ("exact", "compact"):
            raise InvalidInput(f"activation: expected 'exact' or 'compact', got {self.activation!r}")

    def phrased_as_change(self, text: str) -> bool:
        """Whether ``text`` is phrased as a change of an earlier statement: it matches ``update_cues``
        (always true with ``update_cues=None``). Such a statement may supersede a similar one."""
        cues: re.Pattern[str] | None = getattr(self, "_cues", None)
        return cues is None or cues.search(text) is not None


__getattr__ = module_aliases(__name__, {"MODES": ("RECALL_MODES", lambda: RECALL_MODES)})
