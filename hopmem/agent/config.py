"""The knobs of the agent memory's recall (:class:`RecallConfig`) and its recall modes.

What is not a knob lives elsewhere: what a write merges or supersedes in
:class:`~hopmem.agent.WritePolicy`, and the constants the shipped models were
fitted under, with the conversation steps' values, in
:class:`~hopmem.agent.Tuning` (the tuning record, docs/tuning.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .._deprecation import module_aliases
from ..errors import InvalidInput

__all__ = ["RECALL_MODES", "DURABILITIES", "RecallConfig"]

#: The recall modes: ``"hybrid"`` (every retriever), ``"associative"`` (engine reads only) and
#: ``"keyword"`` (FTS5 and exact tokens only).
RECALL_MODES = ("hybrid", "associative", "keyword")
DURABILITIES = ("shared", "session")

#: Former fields, and where they are now.
_MOVED = {
    **{name: "Tuning" for name in ("beta", "rrf_k", "bm25_half", "novelty_ceiling", "common_fraction",
                                   "close_margin", "rebuild_dead_fraction", "rrf_weights")},
    **{name: "Tuning (a conversation step; RecallConfig(conversation=False) turns them all off)"
       for name in ("aggregation_k", "context_weight", "subject_boost", "date_boost", "part_weight")},
    **{name: "WritePolicy" for name in ("dedup_cosine", "supersede_cosine", "update_cues")},
}


@dataclass(frozen=True, init=False)
class RecallConfig:
    """The knobs of recall: what to read, what to admit, how to order what is admitted.

    Recall finds candidates (the engine's nearest entries, FTS5 keyword
    matches, rare exact tokens, the question's time window), scores each
    one's evidence, decides whether anything relevant is remembered (the
    verdict, against the calibrated gate), admits the candidates close
    enough to the best, and orders them (fusion, boosts, versions). The
    defaults were chosen on conversations with all-MiniLM-L6-v2
    (docs/agent-eval.md); measure a change on questions of your own.

    Attributes
    ----------
    assoc_k : int
        Entries each engine read activates per partition (>= 1): the
        semantic candidate list's length. Raise it when answers lie beyond
        the 32 nearest statements; it costs read time.
    activation : {"compact", "exact"}
        How engine reads scan the entries: ``"compact"`` scans a float16 copy
        and re-scores the best candidates exactly (faster on large memories),
        ``"exact"`` scans float32. Change it only to compare the two.
    over_fetch : int
        Keyword candidates fetched from FTS5 per partition (at least ``4 *
        limit``; >= 1). Raise it when many entries are hidden by scope,
        labels or expiry and keyword candidates run out.
    keyword_weight : float
        Weight of keyword evidence against the semantic path in hybrid mode's
        evidence (>= 0). Raise it for text where exact words matter more than
        meaning (codes, names); lower it for paraphrased questions.
        Recalibrate after changing it: the verdict reads this evidence.
    floor_ratio : float
        Once the verdict is yes, a candidate is admitted when its evidence
        reaches this share of the best candidate's (in [0, 1]). Lower it to
        get more, weaker hits; raise it to get only near ties with the best.
    rare_min, rare_fraction : int, float
        A query's identifier token (an order number, a ticket id) found in at
        most ``max(rare_min, rare_fraction * N)`` visible entries admits them
        whatever the verdict. Raise them when identifiers repeat across many
        entries.
    label_boost, utility_boost, recency_boost : float
        Multiplicative boosts (>= 0) that only reorder admitted hits: per
        label an entry shares with the query's labels (from the memory's
        ``labeler``), by learned utility (with ``reinforcement``), and by
        recency when the query asks for the latest state (by age when it asks
        for an earlier one, and for entries in the query's time window).
        0 turns one off; raise one when that signal matters more to you.
    conversation : bool
        The steps made for conversation turns (True, the default): a question
        asking for several things of one kind reads deeper, a multi-part
        question is also searched part by part, the turns around the first
        hits join the order (a reply is found through the turn it answers),
        the turns of the speaker a question names move up, and for a question
        asking when, turns that date an event move up. Turn it off when the
        memory holds facts or documents rather than turns of a conversation.
        The steps' values are in :class:`~hopmem.agent.Tuning`.
    """

    assoc_k: int
    activation: Literal["exact", "compact"]
    over_fetch: int
    keyword_weight: float
    floor_ratio: float
    rare_min: int
    rare_fraction: float
    label_boost: float
    utility_boost: float
    recency_boost: float
    conversation: bool

    def __init__(self, *, assoc_k: int = 32, activation: Literal["exact", "compact"] = "compact",
                 over_fetch: int = 50, keyword_weight: float = 0.5, floor_ratio: float = 0.6, rare_min: int = 3,
                 rare_fraction: float = 0.01, label_boost: float = 0.15, utility_boost: float = 0.25,
                 recency_boost: float = 0.1, conversation: bool = True, **moved: Any) -> None:
        if moved:
            where = "; ".join(f"{name} -> {_MOVED[name]}" if name in _MOVED else f"{name}: no such setting"
                              for name in sorted(moved))
            raise InvalidInput(f"RecallConfig: unexpected settings ({where}); see docs/tuning.md")
        values = dict(assoc_k=assoc_k, activation=activation, over_fetch=over_fetch, keyword_weight=keyword_weight,
                      floor_ratio=floor_ratio, rare_min=rare_min, rare_fraction=rare_fraction,
                      label_boost=label_boost, utility_boost=utility_boost, recency_boost=recency_boost,
                      conversation=conversation)
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self._check()

    def _check(self) -> None:
        for name in ("assoc_k", "over_fetch", "rare_min"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name}: expected an int >= 1, got {value!r}")
        for name in ("floor_ratio", "rare_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise InvalidInput(f"{name}: expected a number in [0, 1], got {value!r}")
        for name in ("keyword_weight", "label_boost", "utility_boost", "recency_boost"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0.0:
                raise InvalidInput(f"{name}: expected a number >= 0, got {value!r}")
        if self.activation not in ("exact", "compact"):
            raise InvalidInput(f"activation: expected 'exact' or 'compact', got {self.activation!r}")
        if not isinstance(self.conversation, bool):
            raise InvalidInput(f"conversation: expected True or False, got {self.conversation!r}")


__getattr__ = module_aliases(__name__, {"MODES": ("RECALL_MODES", lambda: RECALL_MODES)})
