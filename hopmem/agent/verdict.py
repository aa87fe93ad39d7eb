"""The verdict of a recall (is anything relevant remembered?) and which candidates it admits.

Two questions, two gates (:class:`hopmem.text.gates.Gate`):

1. **The verdict** compares one statistic with the verdict gate's ``tau``: the
   log-odds of a small logistic model (:class:`VerdictModel`) over the mode's
   verdict features (:data:`VERDICT_FEATURES`). Hybrid mode (the default) reads
   three features that carry over from one memory to another without a
   calibration call:

   * ``evidence``: the best candidate's evidence (hybrid ``path + 0.5 *
     keyword``, associative ``path``, keyword ``keyword``);
   * ``content_share``: the share of the question's specific words (not stop
     words, not everyday English, not words in most entries such as a
     speaker's name), weighted by rarity, that the :data:`SHARE_DEPTH` best
     fused candidates contain (:func:`hopmem.agent.evidence.content_share`): a
     question about something never mentioned asks about words the memory's
     best matches lack;
   * ``agreement``: how many of the :data:`AGREEMENT_TOP` best fused candidates
     both the semantic and the keyword list rank within their
     :data:`AGREEMENT_DEPTH` first: the two channels find the same entries when
     the question is about something stored.

   The associative and keyword modes keep their earlier features, which a
   stored model of hybrid mode may also read:

   * ``novelty``: the share of the query's word weight in words no visible
     entry contains, a word weighing more the rarer it is in English
     (``Tuning.novelty_ceiling``; modes that read keywords);
   * ``margin``: how far the nearest entry's cosine stands above the mean of
     the ten nearest (modes that read vectors);
   * ``crowd``: how many of the next nine nearest entries are within
     :data:`CROWD_COSINE` (0.05) of the nearest one (modes that read vectors).

   :meth:`~hopmem.agent.AgentMemory.calibrate` fits the model (L2-regularised
   logistic regression on standardised features) on held-out queries, and the
   gate's ``tau`` on those queries' out-of-fold log-odds
   (:func:`cross_fitted_log_odds`), so that the error budget holds for new
   queries. Until then the :data:`DEFAULT_MODELS` and :data:`DEFAULT_GATES`
   apply. Hybrid mode's were fitted with all-MiniLM-L6-v2 on the LoCoMo
   development conversations and the project's development sets together
   (``python -m benchmarks.locomo.fit_defaults``), its threshold set where no
   development pool abstains on more than 8% of its answerable questions;
   the other modes' on the project's first development set. A gate stored
   without a model (:meth:`~hopmem.agent.AgentMemory.set_gates` without
   ``models``, or a file calibrated before models existed) applies to the
   fixed formula of :func:`grounding_statistic` instead.
2. **Which hits**: once the verdict is yes, a candidate needs ``evidence >=
   floor_ratio * best evidence`` (in hybrid mode, or a semantic path of at
   least ``floor_ratio`` of the best path); the band gate labels it. Independently of
   the verdict, a rare exact token or the query's time window admits an entry.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidInput
from ..text.gates import Bands, Gate
from ._settings import RecallSettings
from .evidence import Evidence, content_share
from .index import Partition, Row
from .tuning import constant
from .tuning import record as tuning_record

__all__ = ["DEFAULT_GATES", "DEFAULT_BAND_GATES", "DEFAULT_MODELS",
           "VERDICT_FEATURES", "CROWD_COSINE", "MARGIN_NEIGHBOURS", "GROUNDING_SEMANTIC_WEIGHT",
           "GROUNDING_NOVELTY_WEIGHT", "MODE_FEATURES", "CROSS_FIT_FOLDS", "WEAK_GATE_AUC", "VerdictModel", "Verdict",
           "CALIBRATED_FEATURES", "SHARE_DEPTH", "AGREEMENT_TOP", "AGREEMENT_DEPTH", "RANKING_FEATURES",
           "fit_model", "fit_logistic", "cross_fitted_log_odds", "margin", "ranking_features",
           "verdict_features", "grounding_statistic", "select_gates",
           "gate_note", "decide", "admit", "abstention_reason", "admission_reason"]

#: Entries whose cosines define the semantic margin: the nearest one against the mean of this many.
MARGIN_NEIGHBOURS: int = constant("MARGIN_NEIGHBOURS")
#: ``crowd`` counts the next :data:`MARGIN_NEIGHBOURS` - 1 nearest entries within this cosine of the nearest.
CROWD_COSINE: float = constant("CROWD_COSINE")
#: Below this calibrated AUC a reason warns that the gate barely separates related from unrelated queries.
WEAK_GATE_AUC: float = constant("WEAK_GATE_AUC")
#: The grounding statistic (:func:`grounding_statistic`, for gates stored without a model): weight of the
#: best semantic path beside the best keyword evidence, in hybrid mode.
GROUNDING_SEMANTIC_WEIGHT: float = constant("GROUNDING_SEMANTIC_WEIGHT")
#: The grounding statistic: weight of the query's novelty subtracted, in the modes that read keywords.
GROUNDING_NOVELTY_WEIGHT: float = constant("GROUNDING_NOVELTY_WEIGHT")
#: A default (uncalibrated) gate's ``vivid`` band begins this far above its threshold.
DEFAULT_VIVID_MARGIN: float = constant("DEFAULT_VIVID_MARGIN")
#: Folds for the out-of-fold log-odds that :meth:`~hopmem.agent.AgentMemory.calibrate` fits a gate on.
CROSS_FIT_FOLDS: int = constant("CROSS_FIT_FOLDS")
#: The features each mode's verdict model reads (see the module docstring): what
#: :meth:`~hopmem.agent.AgentMemory.calibrate` fits.
VERDICT_FEATURES: Mapping[str, tuple[str, ...]] = {
    "hybrid": ("evidence", "content_share", "agreement"),
    "associative": ("evidence", "margin", "crowd"),
    "keyword": ("evidence", "novelty"),
}
#: The features :meth:`~hopmem.agent.AgentMemory.calibrate` fits a mode's model on. In hybrid mode: the
#: evidence and content share of the default model, and novelty, margin and crowd, which the user's own
#: questions can weigh. Chosen on the project's development sets (``dev``, ``dev2``), where this set's
#: calibrated abstention F1 is at least that of the earlier four features and above the default's three
#: (which alone lost 2.8 points) or all six (agreement adds noise to a fit on a few dozen questions).
CALIBRATED_FEATURES: Mapping[str, tuple[str, ...]] = {
    "hybrid": ("evidence", "content_share", "novelty", "margin", "crowd"),
    "associative": VERDICT_FEATURES["associative"],
    "keyword": VERDICT_FEATURES["keyword"],
}
#: The verdict features read off the fused ranking of the candidates (:func:`ranking_features`).
RANKING_FEATURES = frozenset({"content_share", "agreement"})
#: Which verdict features each mode can compute (a stored model may read a subset of them): hybrid mode
#: also computes the features its earlier models read, so a model stored by an earlier calibration applies.
MODE_FEATURES: Mapping[str, frozenset[str]] = {
    "hybrid": frozenset({"evidence", "novelty", "margin", "crowd", *RANKING_FEATURES}),
    "associative": frozenset(VERDICT_FEATURES["associative"]),
    "keyword": frozenset(VERDICT_FEATURES["keyword"]),
}
#: ``content_share`` looks for the question's words in this many of the best fused candidates.
SHARE_DEPTH: int = constant("SHARE_DEPTH")
#: ``agreement`` counts, among this many of the best fused candidates, those that both the semantic and the
#: keyword list rank within their :data:`AGREEMENT_DEPTH` first.
AGREEMENT_TOP: int = constant("AGREEMENT_TOP")
AGREEMENT_DEPTH: int = constant("AGREEMENT_DEPTH")
#: L2 penalty of the logistic regression, on standardised features (chosen on the development set).
MODEL_L2: float = constant("MODEL_L2")


@dataclass(frozen=True)
class VerdictModel:
    """A logistic model of "something relevant is remembered": ``log-odds = intercept + sum(w * x)``.

    ``weights`` are on the features' own scale (the standardisation used while
    fitting is folded in), in the order of ``features``.
    """

    features: tuple[str, ...]
    weights: tuple[float, ...]
    intercept: float

    def __post_init__(self) -> None:
        if len(self.features) != len(self.weights) or not self.features:
            raise InvalidInput("VerdictModel: expected one weight per feature, at least one feature")
        values = [*self.weights, self.intercept]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            raise InvalidInput(f"VerdictModel: expected finite weights and intercept, got {values!r}")

    def log_odds(self, values: Mapping[str, float]) -> float:
        return float(self.intercept + sum(w * values[name] for name, w in zip(self.features, self.weights)))

    def to_dict(self) -> dict[str, Any]:
        return {"features": list(self.features), "weights": list(self.weights), "intercept": self.intercept}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerdictModel:
        return cls(features=tuple(data["features"]), weights=tuple(float(w) for w in data["weights"]),
                   intercept=float(data["intercept"]))


def fit_model(features: Sequence[str], relevant: Sequence[Mapping[str, float]],
              irrelevant: Sequence[Mapping[str, float]], l2: float = MODEL_L2) -> VerdictModel:
    """Fit a :class:`VerdictModel` on feature values of answerable and unanswerable queries.

    L2-regularised logistic regression (the intercept unpenalised) on
    standardised features, by Newton's method; deterministic. A feature
    constant over the queries gets weight 0.
    """
    if len(relevant) < 1 or len(irrelevant) < 1:
        raise InvalidInput("fit_model: expected at least one relevant and one irrelevant query")
    X = np.array([[float(v[name]) for name in features] for v in (*relevant, *irrelevant)], dtype=np.float64)
    y = np.concatenate([np.ones(len(relevant)), np.zeros(len(irrelevant))])
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    scale[scale < 1e-12] = np.inf  # a constant feature carries no information
    coef, bias = fit_logistic((X - mean) / scale, y, l2=l2)
    weights = coef / scale
    intercept = float(bias - np.sum(coef * mean / scale))
    return VerdictModel(features=tuple(features), weights=tuple(float(x) for x in weights), intercept=intercept)


def cross_fitted_log_odds(features: Sequence[str], relevant: Sequence[Mapping[str, float]],
                          irrelevant: Sequence[Mapping[str, float]], *, folds: int = CROSS_FIT_FOLDS,
                          seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold log-odds: each query scored by a model (:func:`fit_model`) fitted without it.

    The log-odds a model gives the queries it was fitted on are optimistic:
    the fit pushes exactly those unanswerable queries down, so a threshold
    chosen on them lets more new ones through than its error budget says.
    Scored out of fold, each query looks to its model like a new one.

    Folds are stratified: each group is shuffled (``numpy.random.default_rng(seed)``,
    relevant first) and dealt round-robin into ``k = min(folds, len(relevant),
    len(irrelevant))`` folds, so every fold, and what is fitted without it, holds
    both kinds of query. With ``k < 2`` (a group of one) there is nothing to
    hold out: the in-sample log-odds of the model fitted on everything are
    returned. Returns ``(relevant_log_odds, irrelevant_log_odds)`` in input order.
    """
    if len(relevant) < 1 or len(irrelevant) < 1:
        raise InvalidInput("cross_fitted_log_odds: expected at least one relevant and one irrelevant query")
    k = min(int(folds), len(relevant), len(irrelevant))
    if k < 2:
        model = fit_model(features, relevant, irrelevant)
        return (np.array([model.log_odds(v) for v in relevant]),
                np.array([model.log_odds(v) for v in irrelevant]))
    rng = np.random.default_rng(seed)
    fold_of = []
    for group in (relevant, irrelevant):
        assignment = np.empty(len(group), dtype=np.int64)
        assignment[rng.permutation(len(group))] = np.arange(len(group)) % k
        fold_of.append(assignment)
    scores = (np.empty(len(relevant)), np.empty(len(irrelevant)))
    for j in range(k):
        model = fit_model(features, [v for v, f in zip(relevant, fold_of[0]) if f != j],
                          [v for v, f in zip(irrelevant, fold_of[1]) if f != j])
        for group, assignment, out in zip((relevant, irrelevant), fold_of, scores):
            for i in np.flatnonzero(assignment == j):
                out[i] = model.log_odds(group[int(i)])
    return scores


def _default_gate(tau: float) -> Gate:
    return Gate(tau=tau, coverage=0.0, error_rate=0.0, auc=0.5, n_relevant=0, n_irrelevant=0,
                calibrated_writes=None, calibrated_locations=None,
                bands=Bands(vivid=tau + DEFAULT_VIVID_MARGIN, clear=tau), separated=False,
                holdout_coverage=None, holdout_error_rate=None)


#: The uncalibrated verdict models, fitted with :func:`fit_model`. Hybrid mode's on the LoCoMo development
#: conversations and the project's development sets together, each benchmark weighing the same
#: (``python -m benchmarks.locomo.fit_defaults LOCOMO_DATA_DIR``); the other modes' on every question of the
#: project's first development set (``python -m benchmarks.agent_eval.run --data dev --fit-defaults``).
#: The models live in the tuning record (:mod:`hopmem.agent.tuning`) with their provenance.
DEFAULT_MODELS: Mapping[str, VerdictModel] = {mode: VerdictModel.from_dict(model)
                                              for mode, model in tuning_record()["models"].items()}
#: Used with the :data:`DEFAULT_MODELS` until :meth:`AgentMemory.calibrate` is called, and every
#: selection's ``reason`` says the gate is uncalibrated. Thresholds on log-odds. Hybrid mode's is the highest
#: at which no development pool of ``benchmarks.locomo.fit_defaults`` abstains on more than 8% of its
#: answerable questions; the other modes' are deliberately strict (the first development set's gates at
#: error budget 0.1).
DEFAULT_GATES: Mapping[str, Gate] = {mode: _default_gate(tau) for mode, tau in tuning_record()["gates"].items()}
#: Cut points for a hit's band (on its evidence) until calibrated.
DEFAULT_BAND_GATES: Mapping[str, Gate] = {mode: _default_gate(tau)
                                          for mode, tau in tuning_record()["band_gates"].items()}


def select_gates(gates: Mapping[str, Gate], band_gates: Mapping[str, Gate], models: Mapping[str, VerdictModel],
                 mode: str) -> tuple[Gate, Gate, VerdictModel | None, bool]:
    """The verdict gate, the band gate, the verdict model (None: the grounding statistic) and whether
    the gates are calibrated, for ``mode``.

    A stored gate keeps the statistic it was calibrated on: its stored model,
    or the grounding statistic when none was stored with it. Without a stored
    gate, the mode's :data:`DEFAULT_MODELS` and :data:`DEFAULT_GATES` apply.
    """
    gate = gates.get(mode)
    if gate is not None:
        return gate, band_gates.get(mode, gate), models.get(mode), True
    return DEFAULT_GATES[mode], DEFAULT_BAND_GATES[mode], DEFAULT_MODELS[mode], False


def gate_note(gate: Gate, calibrated: bool, entries: int) -> str:
    """What a reason adds about the gate: uncalibrated, calibrated at a much smaller size, or weak."""
    if not calibrated:
        return f"; gate not calibrated: default tau={gate.tau:.2f} (call calibrate())"
    if gate.calibrated_writes and gate.is_stale({"writes": entries, "num_locations": entries}):
        return f"; gate calibrated at {gate.calibrated_writes} entries, now {entries}: recalibrate"
    if gate.n_relevant and gate.n_irrelevant and gate.auc < WEAK_GATE_AUC:
        return (f"; weak gate: calibration separated related from unrelated queries with AUC {gate.auc:.2f} "
                f"(0.5 is chance), so this verdict is little better than a guess: consider rank() or a "
                f"higher error_budget")
    return ""


def margin(near: Sequence[float]) -> float:
    """The first of the descending cosines ``near`` minus the mean of the :data:`MARGIN_NEIGHBOURS` first
    (itself included); 0 if empty."""
    if not near:
        return 0.0
    rest = near[:MARGIN_NEIGHBOURS]
    return near[0] - sum(rest) / len(rest)


def ranking_features(order: Sequence[int], ranks: Mapping[int, Mapping[str, int]], rows: Mapping[int, Row],
                     words: Sequence[str], partitions: Sequence[Partition], common_fraction: float) -> dict[str, float]:
    """``content_share`` and ``agreement`` (see the module docstring) of the candidates in fused ``order``
    (best first), with each candidate's rank per list ``ranks`` and the question's content ``words``."""
    share = content_share(words, (rows[i] for i in order[:SHARE_DEPTH]), partitions, common_fraction)
    both = sum(1 for i in order[:AGREEMENT_TOP]
               if ranks.get(i, {}).get("semantic", AGREEMENT_DEPTH + 1) <= AGREEMENT_DEPTH
               and ranks.get(i, {}).get("keyword", AGREEMENT_DEPTH + 1) <= AGREEMENT_DEPTH)
    return {"content_share": share, "agreement": float(both)}


def verdict_features(mode: str, evidence: Evidence, ids: Sequence[int], novelty: float,
                     names: Collection[str] | None = None,
                     ranked: Mapping[str, float] | None = None) -> dict[str, float]:
    """The values of the verdict features ``names`` (default :data:`VERDICT_FEATURES` of ``mode``; those
    ``mode`` cannot compute are left out) for the scored candidates ``ids``. The :data:`RANKING_FEATURES`
    come from ``ranked`` (:func:`ranking_features`); without it they are left out."""
    wanted = MODE_FEATURES[mode] & set(VERDICT_FEATURES[mode] if names is None else names)
    values = {"evidence": evidence.value[evidence.best(ids)]}
    if ranked is not None:
        values.update({name: float(ranked[name]) for name in wanted & RANKING_FEATURES})
    if "novelty" in wanted:
        values["novelty"] = novelty
    if wanted & {"margin", "crowd"}:
        near = sorted((evidence.semantic[i] for i in ids if i in evidence.semantic), reverse=True)
        if "margin" in wanted:
            values["margin"] = margin(near)
        if "crowd" in wanted:
            close = [c for c in near[1:MARGIN_NEIGHBOURS] if c >= near[0] - CROWD_COSINE]
            values["crowd"] = float(len(close))
    return values


def grounding_statistic(mode: str, evidence: Evidence, ids: Sequence[int], novelty: float) -> tuple[float, str]:
    """The fixed verdict statistic of a gate stored without a model, and its description.

    Hybrid ``best keyword + GROUNDING_SEMANTIC_WEIGHT * best path``, keyword
    mode the best keyword evidence, associative mode the best path; modes that
    read keywords subtract ``GROUNDING_NOVELTY_WEIGHT * novelty``.
    """
    best_ev = evidence.value[evidence.best(ids)]
    if mode == "hybrid":
        best_kw = max(evidence.keyword.values())
        best_path = evidence.best_path(ids)
        statistic = best_kw + GROUNDING_SEMANTIC_WEIGHT * best_path
        what = f"grounding {best_kw:.3f} + {GROUNDING_SEMANTIC_WEIGHT:.2f} x {best_path:.3f}"
    else:
        statistic = best_ev
        what = f"best evidence {best_ev:.3f}"
    if mode in ("hybrid", "keyword"):
        statistic -= GROUNDING_NOVELTY_WEIGHT * novelty
        if novelty > 0.005:
            what += f" - novelty {GROUNDING_NOVELTY_WEIGHT:.2f} x {novelty:.2f}"
    return statistic, what


@dataclass(frozen=True)
class Verdict:
    """The verdict statistic of one recall, its inputs and description, and what follows from it."""

    statistic: float
    what: str
    passes: bool
    best_evidence: float
    floor: float
    features: dict[str, float]
    path_floor: float | None = None


def decide(mode: str, config: RecallSettings, gate: Gate, model: VerdictModel | None, evidence: Evidence,
           ids: Sequence[int], novelty: float, ranked: Mapping[str, float] | None = None) -> Verdict:
    """Is anything relevant remembered? The verdict on the scored candidates ``ids`` (``model`` None: the
    grounding statistic; ``ranked``: the :func:`ranking_features`). The selection's features are the
    mode's :data:`VERDICT_FEATURES` and :data:`CALIBRATED_FEATURES` plus those the model reads."""
    best_ev = evidence.value[evidence.best(ids)]
    names = {*VERDICT_FEATURES[mode], *CALIBRATED_FEATURES[mode], *(model.features if model is not None else ())}
    features = verdict_features(mode, evidence, ids, novelty, names, ranked)
    if model is None:
        statistic, what = grounding_statistic(mode, evidence, ids, novelty)
    else:
        statistic = model.log_odds(features)
        what = "log-odds from " + ", ".join(f"{name} {features[name]:.3f}" for name in model.features)
    # hybrid mode also admits on the semantic path alone (see admit)
    path_floor = config.floor_ratio * evidence.best_path(ids) if mode == "hybrid" else None
    return Verdict(statistic=statistic, what=f"statistic {statistic:.3f} ({what})", passes=statistic >= gate.tau,
                   best_evidence=best_ev, floor=config.floor_ratio * best_ev,
                   features={k: round(v, 6) for k, v in features.items()}, path_floor=path_floor)


def admit(ids: Sequence[int], evidence: Evidence, verdict: Verdict, band_gate: Gate, exact: Mapping[int, list[str]],
          in_window: Collection[int], admit_all: bool) -> dict[int, str]:
    """The admitted candidates and what admitted each (``admit_all``: every candidate, for ranking alone)."""
    ev = evidence.value
    admitted: dict[int, str] = {}
    for i in ids:
        if exact.get(i):
            admitted[i] = "exact token"
        elif verdict.passes and ev[i] >= band_gate.tau:
            admitted[i] = "gate"
        elif verdict.passes and ev[i] >= verdict.floor:
            admitted[i] = "weak evidence in an admitted recall"
        elif verdict.passes and verdict.path_floor is not None and evidence.path(i) >= verdict.path_floor > 0.0:
            admitted[i] = "semantic evidence in an admitted recall"
        elif i in in_window and ev[i] >= 0.0:
            admitted[i] = "time window"
        elif admit_all:
            admitted[i] = "nothing (ranking without the gate)"
    return admitted


def admit_parts(admitted: dict[int, str], ids: Sequence[int], part_evidence: Sequence[Evidence],
                floor_ratio: float) -> None:
    """After a yes verdict on a multi-part question: each part admits its own best candidates.

    A candidate with ``evidence >= floor_ratio * best evidence`` for some part
    (its evidence against that part alone) is admitted, as the whole question
    admits on its own best evidence.
    """
    for n, pe in enumerate(part_evidence, start=1):
        ev = pe.value
        best = max((ev[i] for i in ids), default=0.0)
        if best <= 0.0:
            continue
        for i in ids:
            if i not in admitted and ev[i] >= floor_ratio * best:
                admitted[i] = f"evidence for part {n} of the question"


def abstention_reason(verdict: Verdict, gate: Gate, config: RecallSettings) -> str:
    """Why nothing was admitted: below the gate, or too close to call."""
    if verdict.statistic >= gate.tau - config.close_margin:
        return (f"too close to call: {verdict.what} is within {config.close_margin:.2f} "
                f"below tau {gate.tau:.3f}")
    return f"below the gate: {verdict.what} < tau {gate.tau:.3f}"


def admission_reason(verdict: Verdict, gate: Gate, top_admitted_by: str) -> str:
    """Why hits were returned: the verdict passed, or the top hit's own admission."""
    if verdict.passes:
        return f"admitted: {verdict.what} >= tau {gate.tau:.3f}"
    return f"admitted by {top_admitted_by} ({verdict.what} < tau {gate.tau:.3f})"


def fit_logistic(X: np.ndarray, y: np.ndarray, *, l2: float | np.ndarray = 1.0,
                 sample_weight: np.ndarray | None = None, iterations: int = 100) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression by Newton's method (the intercept unpenalised): weights and
    intercept minimising ``sum(sample_weight * logloss) + 0.5 * l2 * |w|^2``. Deterministic."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    s = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if X.ndim != 2 or len(X) != len(y) or len(s) != len(y) or not len(y):
        raise InvalidInput("fit_logistic: expected X (n, d), y (n,) and sample_weight (n,), n >= 1")
    Z = np.hstack([X, np.ones((len(y), 1))])
    penalty = np.zeros(Z.shape[1])
    penalty[:-1] = l2
    w = np.zeros(Z.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(Z @ w, -500, 500)))
        gradient = Z.T @ (s * (p - y)) + penalty * w
        hessian = Z.T @ (Z * (s * p * (1.0 - p))[:, None])
        hessian[np.diag_indices_from(hessian)] += penalty + 1e-9
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w[:-1], float(w[-1])
