"""Retrieval and admission parameters of the agent memory (:class:`RecallConfig`) and its modes.

The defaults are documented in docs/agent-memory.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..errors import InvalidInput

__all__ = ["MODES", "DURABILITIES", "DEFAULT_UPDATE_CUES", "DEFAULT_RRF_WEIGHTS", "MARGIN_FEATURES", "RecallConfig"]

MODES = ("hybrid", "associative", "keyword")
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


#: The semantic margins a verdict model can read (``RecallConfig.margin_feature``), as ``(head, skip)``:
#: the mean cosine of the ``head`` nearest entries minus the mean cosine of the ten nearest after the
#: ``skip`` nearest (see :func:`hopmem.agent.verdict.margin`). ``margin`` (the nearest against the ten
#: nearest, itself included) is the original one.
MARGIN_FEATURES: Mapping[str, tuple[int, int]] = {
    "margin": (1, 0),
    "margin_after3": (1, 3),
    "margin_after5": (1, 5),
    "margin_head3": (3, 3),
    "margin_head5": (5, 5),
}


#: Weight of each ranked list in reciprocal rank fusion. The engine's reconstruction list
#: ("associative") weighs 0 since the evaluation's thirteenth round: it moved near ties the wrong way.
#: Its score still counts in every candidate's evidence (``path``) and in the verdict.
DEFAULT_RRF_WEIGHTS: Mapping[str, float] = {
    "semantic": 1.0, "associative": 0.0, "keyword": 1.0, "exact": 1.0, "time": 1.0,
}


@dataclass(frozen=True)
class RecallConfig:
    """Retrieval and admission parameters; the defaults are documented in docs/agent-memory.md.

    Evidence of one candidate entry ``e`` for the query ``q`` (centred unit
    vectors, ``r`` the engine's reconstruction, ``f = cos(q, r)``):

    * ``semantic = cos(q, e)``; ``associative = max(f, 0) * cos(r, e)``;
      ``path = max(semantic, associative)`` (as in :mod:`hopmem.recall`);
    * ``keyword = b / (b + bm25_half)`` with ``b`` the entry's BM25 score for
      the query's words (always-positive IDF, see :func:`hopmem.agent.evidence.lexical_scorer`);
    * hybrid ``evidence = path + keyword_weight * keyword``; associative mode
      uses ``path``; keyword mode uses ``keyword``.

    The verdict (abstain or not) compares one statistic with the verdict
    gate's ``tau``. With ``verdict="model"`` (the default) the statistic is the
    log-odds of a logistic model over the mode's verdict features (the best
    candidate's evidence, the query's novelty, the semantic margin, chosen by
    ``margin_feature`` among :data:`MARGIN_FEATURES`, and with
    ``crowd_feature`` the number of entries almost as close as the nearest;
    see :mod:`hopmem.agent.verdict`), fitted by :meth:`AgentMemory.calibrate`.
    ``crowd_feature=False`` is the previous three-feature verdict.
    With ``verdict="grounding"`` it is a fixed formula: hybrid ``best keyword
    + grounding_semantic_weight * best path``, keyword mode the best keyword,
    associative mode the best path (or, with
    ``associative_statistic="first_contact"``, the read's first contact);
    modes that read keywords subtract ``novelty_weight * novelty`` (the share
    of the query's word weight in words no visible entry contains). Once the
    verdict is yes, a hit needs ``evidence >= floor_ratio * best evidence``; the
    band gate labels it. Independently of the verdict, a rare exact token or
    the query's time window admits an entry, and the newer (or older) version
    of an admitted hit is pulled in on its own evidence.

    With ``split_parts`` a question that joins question clauses ("Where do I
    climb now, and what's the hardest route there?", see
    :mod:`hopmem.agent.parts`) is also searched part by part: each part's
    lists join the fusion with ``part_weight`` times their usual weight, and
    once the verdict is yes a part admits the candidates with ``evidence >=
    floor_ratio * best evidence`` for that part. The verdict itself is the
    whole question's.

    ``version_order`` says how versions of one fact among the admitted hits
    are ordered. ``"swap"``: they trade places, the preferred version (newest,
    or oldest when the query asks for an earlier state) taking the group's
    best score, the next one the second best, and so on. ``"adjacent"`` (the
    default since the evaluation's thirteenth round): the preferred version
    takes the group's best score and the others keep their own, the one it
    displaced staying just behind it.

    With ``comparison_cues`` (on by default), a question comparing two events ("which came
    first, A or B?", "before or after") sets no order: its "first" or
    "before" does not ask for the earlier version of a fact
    (:func:`~hopmem.agent.temporal.parse_time_hints`).

    ``novelty_ceiling`` says how :func:`~hopmem.agent.evidence.novelty`
    weighs the query's words. A number ``c`` (the default 7.0, chosen in the
    evaluation's thirteenth round): ``max(0, c - zipf)``, ``zipf`` being the
    word's Zipf frequency in English (7.7 for "the", 5.2 for "moment", 3.7
    for "renovation"), so an everyday word the memory lacks ("moment",
    "mum") weighs less than a specific one. ``None``: the word's IDF in the
    memory, where every word the memory lacks weighs the most (the
    behaviour before; the uncalibrated default models are fitted for 7.0).

    With ``path_floor`` (hybrid mode, on by default), once the verdict is yes a candidate is
    also admitted when its semantic path alone reaches ``floor_ratio`` of the
    best candidate's path, as associative mode would admit it: a statement
    that shares no words with the question is then not held back by another
    candidate's keyword evidence.
    """

    beta: float = 30.0
    assoc_k: int = 32
    activation: Literal["exact", "compact"] = "compact"
    over_fetch: int = 50
    rrf_k: float = 20.0
    keyword_weight: float = 0.5
    grounding_semantic_weight: float = 0.3
    novelty_weight: float = 0.2
    common_fraction: float = 0.05
    bm25_half: float = 4.0
    floor_ratio: float = 0.6
    close_margin: float = 0.02
    rare_min: int = 3
    rare_fraction: float = 0.01
    dedup_cosine: float = 0.95
    supersede_cosine: float = 0.5
    update_cues: str | None = DEFAULT_UPDATE_CUES
    label_boost: float = 0.15
    utility_boost: float = 0.25
    recency_boost: float = 0.1
    rrf_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_RRF_WEIGHTS))
    associative_statistic: str = "evidence"
    verdict: str = "model"
    margin_feature: str = "margin"
    crowd_feature: bool = True
    rebuild_dead_fraction: float = 0.2
    split_parts: bool = True
    part_weight: float = 0.5
    path_floor: bool = True
    version_order: str = "adjacent"
    comparison_cues: bool = True
    novelty_ceiling: float | None = 7.0

    def __post_init__(self) -> None:
        for name in ("split_parts", "path_floor", "comparison_cues"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidInput(f"{name}: expected a bool, got {getattr(self, name)!r}")
        for name in ("beta", "rrf_k", "bm25_half"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise InvalidInput(f"{name}: expected a number > 0, got {value!r}")
        for name in ("assoc_k", "over_fetch", "rare_min"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name}: expected an int >= 1, got {value!r}")
        for name in ("floor_ratio", "rare_fraction", "rebuild_dead_fraction", "common_fraction", "part_weight"):
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
        if self.novelty_ceiling is not None and (isinstance(self.novelty_ceiling, bool)
                                                 or not isinstance(self.novelty_ceiling, (int, float))
                                                 or not 0.0 < self.novelty_ceiling <= 10.0):
            raise InvalidInput(f"novelty_ceiling: expected None or a number in (0, 10], got {self.novelty_ceiling!r}")
        if self.version_order not in ("swap", "adjacent"):
            raise InvalidInput(f"version_order: expected 'swap' or 'adjacent', got {self.version_order!r}")
        if self.activation not in ("exact", "compact"):
            raise InvalidInput(f"activation: expected 'exact' or 'compact', got {self.activation!r}")
        if self.verdict not in ("model", "grounding"):
            raise InvalidInput(f"verdict: expected 'model' or 'grounding', got {self.verdict!r}")
        if self.margin_feature not in MARGIN_FEATURES:
            raise InvalidInput(f"margin_feature: expected one of {tuple(MARGIN_FEATURES)}, got {self.margin_feature!r}")
        if not isinstance(self.crowd_feature, bool):
            raise InvalidInput(f"crowd_feature: expected a bool, got {self.crowd_feature!r}")
        if self.associative_statistic not in ("evidence", "first_contact"):
            raise InvalidInput(
                f"associative_statistic: expected 'evidence' or 'first_contact', got {self.associative_statistic!r}")
