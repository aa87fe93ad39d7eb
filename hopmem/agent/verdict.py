"""The verdict of a recall (is anything relevant remembered?) and which candidates it admits.

Two questions, two gates (:class:`hopmem.gates.Gate`):

1. **The verdict** compares one statistic with the verdict gate's ``tau``. By
   default (``RecallConfig.verdict = "model"``) the statistic is the log-odds
   of a small logistic model (:class:`VerdictModel`) over the mode's verdict
   features (:data:`VERDICT_FEATURES`):

   * ``evidence``: the best candidate's evidence (hybrid ``path + 0.5 *
     keyword``, associative ``path``, keyword ``keyword``);
   * ``novelty``: the share of the query's word weight in words no visible
     entry contains, a word weighing more the rarer it is in English
     (``RecallConfig.novelty_ceiling``; modes that read keywords);
   * ``margin``: how far the nearest entry's cosine stands above the mean of
     the ten nearest (modes that read vectors): a question about something
     remembered has one clear nearest statement, an unanswerable one a flat
     neighbourhood (``RecallConfig.margin_feature`` selects a variant from
     :data:`~hopmem.agent.config.MARGIN_FEATURES`; the default is this one);
   * ``crowd``: how many of the next nine nearest entries are within
     :data:`CROWD_COSINE` (0.05) of the nearest one (modes that read vectors;
     ``RecallConfig.crowd_feature``, on by default): a question answered by
     several statements together (a history, a list) has several entries
     about as close as the best, which shrinks its margin; the model learns
     how much such a plateau says instead.

   :meth:`~hopmem.agent.AgentMemory.calibrate` fits the model (L2-regularised
   logistic regression on standardised features) on held-out queries, and the
   gate's ``tau`` on those queries' out-of-fold log-odds
   (:func:`cross_fitted_log_odds`), so that the error budget holds for new
   queries. Until then the
   :data:`DEFAULT_MODELS` (fitted on the development conversations,
   ``benchmarks/agent_eval/dev_conversations.json``, with all-MiniLM-L6-v2) and
   the strict :data:`DEFAULT_GATES` apply. With ``verdict = "grounding"`` (and
   for gates stored without a model, such as files calibrated before models
   existed) the statistic is the fixed formula of :func:`grounding_statistic`.
2. **Which hits**: once the verdict is yes, a candidate needs ``evidence >=
   floor_ratio * best evidence``; the band gate labels it. Independently of
   the verdict, a rare exact token or the query's time window admits an entry.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidInput
from ..gates import Bands, Gate
from .config import MARGIN_FEATURES, RecallConfig
from .evidence import Evidence

__all__ = ["DEFAULT_GATES", "DEFAULT_BAND_GATES", "DEFAULT_MODELS", "GROUNDING_DEFAULT_GATES", "OTHER_DEFAULTS",
           "VERDICT_FEATURES", "CROWD_COSINE", "MARGIN_NEIGHBOURS",
           "MODE_FEATURES", "CROSS_FIT_FOLDS", "WEAK_GATE_AUC", "VerdictModel", "Verdict", "default_model",
           "features_for", "fit_model", "cross_fitted_log_odds", "margin",
           "verdict_features", "grounding_statistic", "select_gates",
           "gate_note", "decide", "admit", "abstention_reason", "admission_reason"]

#: Entries whose cosines define a semantic margin: the nearest one(s) against the mean of this many.
MARGIN_NEIGHBOURS = 10
#: ``crowd`` counts the next :data:`MARGIN_NEIGHBOURS` - 1 nearest entries within this cosine of the nearest.
CROWD_COSINE = 0.05
#: Below this calibrated AUC a reason warns that the gate barely separates related from unrelated queries.
WEAK_GATE_AUC = 0.65
#: Folds for the out-of-fold log-odds that :meth:`~hopmem.agent.AgentMemory.calibrate` fits a gate on.
CROSS_FIT_FOLDS = 5
#: Which verdict features each mode can compute.
MODE_FEATURES: Mapping[str, frozenset[str]] = {
    "hybrid": frozenset({"evidence", "novelty", "crowd", *MARGIN_FEATURES}),
    "associative": frozenset({"evidence", "crowd", *MARGIN_FEATURES}),
    "keyword": frozenset({"evidence", "novelty"}),
}


def features_for(mode: str, config: RecallConfig) -> tuple[str, ...]:
    """The features ``mode``'s verdict model reads under ``config`` (what :meth:`calibrate` fits)."""
    if mode == "keyword":
        return ("evidence", "novelty")
    vector = (config.margin_feature, *(("crowd",) if config.crowd_feature else ()))
    return ("evidence", "novelty", *vector) if mode == "hybrid" else ("evidence", *vector)


#: The features each mode's verdict model reads with the default :class:`RecallConfig` (see the module
#: docstring).
VERDICT_FEATURES: Mapping[str, tuple[str, ...]] = {mode: features_for(mode, RecallConfig())
                                                   for mode in ("hybrid", "associative", "keyword")}
#: L2 penalty of the logistic regression, on standardised features (chosen on the development set).
MODEL_L2 = 1.0


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
            raise InvalidInput(f"VerdictModel: weights and intercept must be finite numbers, got {values!r}")

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
    Z = np.hstack([(X - mean) / scale, np.ones((len(y), 1))])
    penalty = np.eye(Z.shape[1]) * l2
    penalty[-1, -1] = 0.0
    w = np.zeros(Z.shape[1])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(Z @ w, -500, 500)))
        gradient = Z.T @ (p - y) + penalty @ w
        hessian = Z.T @ (Z * (p * (1.0 - p))[:, None]) + penalty + 1e-9 * np.eye(Z.shape[1])
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    weights = w[:-1] / scale
    intercept = float(w[-1] - np.sum(w[:-1] * mean / scale))
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
                bands=Bands(vivid=tau + 0.15, clear=tau), separated=False,
                holdout_coverage=None, holdout_error_rate=None)


#: The uncalibrated verdict models: fitted with :func:`fit_model` on every gate-decided question of the
#: development conversations (``python -m benchmarks.agent_eval.run --data dev --fit-defaults``).
DEFAULT_MODELS: Mapping[str, VerdictModel] = {
    "hybrid": VerdictModel(("evidence", "novelty", "margin", "crowd"), (1.387, -3.081, 14.278, 0.372), -2.037),
    "associative": VerdictModel(("evidence", "margin", "crowd"), (4.111, 13.730, 0.162), -3.190),
    "keyword": VerdictModel(("evidence", "novelty"), (7.207, -4.582), -1.666),
}
#: Used with the :data:`DEFAULT_MODELS` until :meth:`AgentMemory.calibrate` is called: deliberately
#: strict (the development set's gates at error budget 0.1; a calibrated gate usually abstains less),
#: and every selection's ``reason`` says the gate is uncalibrated. Thresholds on log-odds.
DEFAULT_GATES: Mapping[str, Gate] = {
    "hybrid": _default_gate(1.64),
    "associative": _default_gate(1.62),
    "keyword": _default_gate(2.49),
}
#: Uncalibrated models and gates for other feature sets (``RecallConfig.margin_feature``,
#: ``crowd_feature``), fitted the same way: here the models without ``crowd`` (``crowd_feature=False``,
#: the defaults before it). A feature set without an entry uses its mode's :data:`DEFAULT_MODELS` and
#: :data:`DEFAULT_GATES` entries (a model's features are computed by name whatever the configuration).
OTHER_DEFAULTS: Mapping[tuple[str, ...], tuple[VerdictModel, Gate]] = {
    ("evidence", "novelty", "margin"): (
        VerdictModel(("evidence", "novelty", "margin"), (1.532, -3.111, 10.531), -1.036), _default_gate(2.00)),
    ("evidence", "margin"): (VerdictModel(("evidence", "margin"), (4.317, 11.942), -2.824), _default_gate(1.68)),
}


def default_model(mode: str, config: RecallConfig) -> VerdictModel:
    """The uncalibrated verdict model of ``mode`` under ``config``."""
    return _defaults(mode, config)[0]


def _defaults(mode: str, config: RecallConfig) -> tuple[VerdictModel, Gate]:
    features = features_for(mode, config)
    if DEFAULT_MODELS[mode].features != features and features in OTHER_DEFAULTS:
        return OTHER_DEFAULTS[features]
    return DEFAULT_MODELS[mode], DEFAULT_GATES[mode]


#: The uncalibrated gates of ``RecallConfig.verdict = "grounding"`` (thresholds on that statistic).
GROUNDING_DEFAULT_GATES: Mapping[str, Gate] = {
    "hybrid": _default_gate(0.6),
    "associative": _default_gate(0.5),
    "keyword": _default_gate(0.75),
}
#: Cut points for a hit's band (on its evidence) until calibrated.
DEFAULT_BAND_GATES: Mapping[str, Gate] = {
    "hybrid": _default_gate(0.6),
    "associative": _default_gate(0.5),
    "keyword": _default_gate(0.5),
}


def select_gates(gates: Mapping[str, Gate], band_gates: Mapping[str, Gate], models: Mapping[str, VerdictModel],
                 mode: str, config: RecallConfig) -> tuple[Gate, Gate, VerdictModel | None, bool]:
    """The verdict gate, the band gate, the verdict model (None: the grounding statistic) and whether
    the gates are calibrated, for ``mode``.

    A stored gate keeps the statistic it was calibrated on: its stored model,
    or the grounding statistic when none was stored with it.
    """
    gate = gates.get(mode)
    if gate is not None:
        return gate, band_gates.get(mode, gate), models.get(mode), True
    if config.verdict == "model":
        model, default_gate = _defaults(mode, config)
        return default_gate, DEFAULT_BAND_GATES[mode], model, False
    return GROUNDING_DEFAULT_GATES[mode], DEFAULT_BAND_GATES[mode], None, False


def gate_note(gate: Gate, calibrated: bool, entries: int) -> str:
    """What a reason adds about the gate: uncalibrated, calibrated at a much smaller size, or weak."""
    if not calibrated:
        return f"; gate not calibrated: conservative default tau={gate.tau:.2f} (call calibrate())"
    if gate.calibrated_writes and gate.is_stale({"writes": entries, "num_locations": entries}):
        return f"; gate calibrated at {gate.calibrated_writes} entries, now {entries}: recalibrate"
    if gate.n_relevant and gate.n_irrelevant and gate.auc < WEAK_GATE_AUC:
        return (f"; weak gate: calibration separated related from unrelated queries with AUC {gate.auc:.2f} "
                f"(0.5 is chance), so this verdict is little better than a guess: consider rank() or a "
                f"higher error_budget")
    return ""


def margin(near: Sequence[float], head: int, skip: int) -> float:
    """Mean of the ``head`` first of the descending cosines ``near`` minus the mean of the
    :data:`MARGIN_NEIGHBOURS` after the ``skip`` first (the last one if there are no more); 0 if empty."""
    if not near:
        return 0.0
    top = near[:head]
    rest = near[skip:skip + MARGIN_NEIGHBOURS] or near[-1:]
    return sum(top) / len(top) - sum(rest) / len(rest)


def verdict_features(mode: str, evidence: Evidence, ids: Sequence[int], novelty: float,
                     names: Collection[str] | None = None) -> dict[str, float]:
    """The values of the verdict features ``names`` (default :data:`VERDICT_FEATURES` of ``mode``; those
    ``mode`` cannot compute are left out) for the scored candidates ``ids``."""
    wanted = MODE_FEATURES[mode] & set(VERDICT_FEATURES[mode] if names is None else names)
    values = {"evidence": evidence.value[evidence.best(ids)]}
    if "novelty" in wanted:
        values["novelty"] = novelty
    vector = wanted & (set(MARGIN_FEATURES) | {"crowd"})
    if vector:
        near = sorted((evidence.semantic[i] for i in ids if i in evidence.semantic), reverse=True)
        for name in [m for m in MARGIN_FEATURES if m in vector]:
            values[name] = margin(near, *MARGIN_FEATURES[name])
        if "crowd" in vector:
            close = [c for c in near[1:MARGIN_NEIGHBOURS] if c >= near[0] - CROWD_COSINE]
            values["crowd"] = float(len(close))
    return values


def grounding_statistic(mode: str, config: RecallConfig, evidence: Evidence, ids: Sequence[int],
                        first_contact: float | None, novelty: float) -> tuple[float, str]:
    """The fixed verdict statistic of ``verdict="grounding"`` and its description.

    Hybrid ``best keyword + grounding_semantic_weight * best path``, keyword mode
    the best keyword evidence, associative mode the best path (or, with
    ``associative_statistic="first_contact"``, the read's first contact); modes
    that read keywords subtract ``novelty_weight * novelty``.
    """
    cfg = config
    best_ev = evidence.value[evidence.best(ids)]
    if mode == "hybrid":
        best_kw = max(evidence.keyword.values())
        best_path = max(evidence.path(i) for i in ids)
        statistic = best_kw + cfg.grounding_semantic_weight * best_path
        what = f"grounding {best_kw:.3f} + {cfg.grounding_semantic_weight:.2f} x {best_path:.3f}"
    elif mode == "associative" and cfg.associative_statistic == "first_contact" and first_contact is not None:
        statistic = first_contact
        what = f"first contact {statistic:.3f}"
    else:
        statistic = best_ev
        what = f"best evidence {best_ev:.3f}"
    if mode in ("hybrid", "keyword"):
        statistic -= cfg.novelty_weight * novelty
        if novelty > 0.005:
            what += f" - novelty {cfg.novelty_weight:.2f} x {novelty:.2f}"
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


def decide(mode: str, config: RecallConfig, gate: Gate, model: VerdictModel | None, evidence: Evidence,
           ids: Sequence[int], first_contact: float | None, novelty: float) -> Verdict:
    """Is anything relevant remembered? The verdict on the scored candidates ``ids``."""
    best_ev = evidence.value[evidence.best(ids)]
    names = {*features_for(mode, config), *(model.features if model is not None else ())}
    features = verdict_features(mode, evidence, ids, novelty, names)
    if model is None:
        statistic, what = grounding_statistic(mode, config, evidence, ids, first_contact, novelty)
    else:
        statistic = model.log_odds(features)
        what = "log-odds from " + ", ".join(f"{name} {features[name]:.3f}" for name in model.features)
    path_floor = None
    if mode == "hybrid" and config.path_floor:
        path_floor = config.floor_ratio * max(evidence.path(i) for i in ids)
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


def abstention_reason(verdict: Verdict, gate: Gate, config: RecallConfig) -> str:
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
