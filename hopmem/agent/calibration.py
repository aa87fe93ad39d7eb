"""Calibration: fit and store the verdict model, the verdict gate and the band gate from held-out queries.

For each mode, queries the memory can answer (``related``) and cannot
(``unrelated``) are recalled without receipts. A
:class:`~hopmem.agent.verdict.VerdictModel` is fitted on their verdict
features and the verdict gate on the model's log-odds. The band gate
is fitted on the best hit's evidence. Each gate admits at most
``error_budget`` of the unrelated queries (:func:`hopmem.text.gates.calibrate`);
the verdict gate also admits at least ``min_coverage`` of the related ones
(default :data:`DEFAULT_MIN_COVERAGE`), which wins where the two conflict.
Queries decided without the gate (an exact rare token or a time window
matched) are left out. Gates and models are stored in the file per namespace
and mode.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .._deprecation import rename_keywords
from ..errors import InvalidInput
from ..text.gates import Gate, auc
from ..text.gates import calibrate as calibrate_scores
from .config import RECALL_MODES
from .recall import RecallMixin
from .results import Selection
from .tuning import constant
from .verdict import (
    CALIBRATED_FEATURES,
    DEFAULT_MODELS,
    MODE_FEATURES,
    VerdictModel,
    cross_fitted_log_odds,
    fit_model,
    select_gates,
)

__all__ = ["CalibrationMixin", "DEFAULT_MIN_COVERAGE"]

#: The share of related calibration queries a verdict gate must admit, whatever its error budget (chosen on
#: the evaluation's conversations: ``docs/agent-eval.md``).
DEFAULT_MIN_COVERAGE: float = constant("DEFAULT_MIN_COVERAGE")
#: The statistic given to a query with no candidates at all (below any real one).
NO_CANDIDATES = {"grounding": -1.0, "model": -1000.0}


def _split(items: list, fraction: float, rng: np.random.Generator) -> tuple[list, list]:
    """``(fitting, held_out)`` as :func:`hopmem.text.gates.calibrate` splits: shuffled, ``round(n * fraction)``
    held out (at least one, leaving at least one) when ``fraction > 0``."""
    order = rng.permutation(len(items))
    held = 0
    if fraction > 0.0 and items:
        held = min(len(items) - 1, max(1, round(len(items) * fraction)))
    return [items[i] for i in order[held:]], [items[i] for i in order[:held]]


class CalibrationMixin(RecallMixin):
    """:meth:`calibrate`, :meth:`set_gates`, :meth:`gate_statistics` and the stored gates and models."""

    def _measure(self, texts: Sequence[str], session_id: str | None, mode: str) -> list[Selection]:
        if mode not in RECALL_MODES:
            raise InvalidInput(f"mode: expected one of {RECALL_MODES}, got {mode!r}")
        if isinstance(texts, str):
            raise InvalidInput("texts: expected a list of str, got a single str")
        texts = [t.strip() if isinstance(t, str) else t for t in texts]
        if not all(isinstance(t, str) and t for t in texts):
            raise InvalidInput("texts: expected non-empty strings")
        vectors = self._encode(texts)
        with self._lock:
            self._sync()
            now = self._now()
            return [self._retrieve(text, vec, session_id=session_id, wanted={}, kind_set=None, limit=5, mode=mode,
                                   since=None, until=None, query_labels={}, now=now)[0]
                    for text, vec in zip(texts, vectors)]

    def gate_statistics(self, texts: Sequence[str], *, session_id: str | None = None,
                        mode: str = "hybrid") -> list[float | None]:
        """The verdict statistic each query would get now (no receipts, no events).

        None for a query the gate does not decide: one with an exact rare
        token or a time window that matches entries (admitted regardless), and
        -1 (grounding statistic) or -1000 (a model's log-odds) for one with no
        candidates at all. The inputs of a model's statistic are in each
        selection's ``features`` (see :meth:`recall`).
        """
        _, _, model, _ = select_gates(self._gates, self._band_gates, self._models, mode)
        unscored = NO_CANDIDATES["grounding" if model is None else "model"]
        return [None if sel.override is not None else (unscored if sel.statistic is None else sel.statistic)
                for sel in self._measure(texts, session_id, mode)]

    def calibrate(self, related: Sequence[str], unrelated: Sequence[str], *, error_budget: float = 0.25,
                  holdout: float = 0.0, seed: int = 0, session_id: str | None = None,
                  min_coverage: float = DEFAULT_MIN_COVERAGE, modes: Iterable[str] = RECALL_MODES,
                  **deprecated: Any) -> dict[str, Gate]:
        """Derive and store the abstention gates (and verdict models) from held-out queries.

        ``related`` are queries this memory holds an answer to, ``unrelated``
        queries it does not; neither should be queries you will evaluate on.
        For each mode, a logistic :class:`~hopmem.agent.verdict.VerdictModel`
        is fitted on the queries' verdict features (on the fitting part); then
        two gates are fitted with :func:`hopmem.text.gates.calibrate` (at most
        ``error_budget`` of the unrelated queries pass, on the fitting part,
        and for the verdict gate at least ``min_coverage`` of the related ones,
        which wins where the two conflict: a verdict that cannot separate the
        queries would otherwise keep its budget by abstaining on most
        answerable ones): the verdict gate on the model's log-odds (does the
        memory hold anything relevant?) and the band gate on the best hit's
        evidence (how strong is a hit: "vague" below its ``tau``, "vivid" from
        its median relevant value). Queries the gate does not decide (an exact
        rare token or a time window matched) are left out; if no query with
        candidates is left on one side, the mode keeps the default model.
        ``holdout`` holds out that share of each group (seeded by ``seed``) to
        measure the gates. Gates and models are stored in the file and used by
        every later recall of this namespace. Returns the verdict gates.

        The defaults differ from :func:`hopmem.text.gates.calibrate`'s
        (``error_budget=0.0``, ``holdout=0.3``) on purpose. The verdict gate
        is fitted on out-of-fold log-odds: each query is scored by a model
        fitted without it, so the gate's figures already estimate new
        queries, and a holdout (which only measures the gates) would take
        queries away from the few, hand-written ones an agent calibrates on.
        And some unanswerable questions always look answerable to a memory
        (a detail never stated about a remembered thing): a budget of 0 would
        then abstain on most answerable ones. 0.25, with the ``min_coverage``
        floor, was the smallest budget within half a point of the best
        recall with an abstention F1 of at least 0.8 on the evaluation's
        development conversations (docs/agent-eval.md): a starting point.

        ``holdout_fraction`` is the deprecated name of ``holdout``.
        """
        if deprecated:
            unknown = sorted(set(deprecated) - {"holdout_fraction"})
            if unknown:
                raise TypeError(f"AgentMemory.calibrate() got an unexpected keyword argument {unknown[0]!r}")
            if holdout != 0.0:
                raise TypeError("AgentMemory.calibrate() got both 'holdout_fraction' (deprecated) and 'holdout'")
            holdout = rename_keywords("AgentMemory.calibrate", deprecated, {"holdout_fraction": "holdout"})["holdout"]
        gates: dict[str, Gate] = {}
        bands: dict[str, Gate] = {}
        models: dict[str, VerdictModel | None] = {}
        for mode in modes:
            rel = [sel for sel in self._measure(related, session_id, mode) if sel.override is None]
            unrel = [sel for sel in self._measure(unrelated, session_id, mode) if sel.override is None]
            n = len(self._rows)
            models[mode], gates[mode] = self._fit_verdict(mode, rel, unrel, error_budget, min_coverage, holdout,
                                                          seed, n)
            bands[mode] = calibrate_scores([-1.0 if s.evidence is None else s.evidence for s in rel],
                                           [-1.0 if s.evidence is None else s.evidence for s in unrel],
                                           error_budget=error_budget, holdout=holdout, seed=seed,
                                           writes=n, locations=n)
        self.set_gates(gates, bands, models)
        return gates

    @staticmethod
    def _fit_verdict(mode: str, rel: list[Selection], unrel: list[Selection], error_budget: float,
                     min_coverage: float, holdout: float, seed: int, n: int) -> tuple[VerdictModel, Gate]:
        """The verdict model, fitted on the fitting part, and the gate on that part's out-of-fold log-odds."""
        rng = np.random.default_rng(seed)
        rel_fit, rel_held = _split(rel, holdout, rng)
        unrel_fit, unrel_held = _split(unrel, holdout, rng)
        rel_features = [s.features for s in rel_fit if s.features]
        unrel_features = [s.features for s in unrel_fit if s.features]
        rel_scores: Iterable[float]
        unrel_scores: Iterable[float]
        if rel_features and unrel_features:
            features = CALIBRATED_FEATURES[mode]
            model = fit_model(features, rel_features, unrel_features)
            rel_scores, unrel_scores = cross_fitted_log_odds(features, rel_features, unrel_features, seed=seed)
        else:  # nothing to fit: the default model never saw these queries, so its log-odds are fair
            model = DEFAULT_MODELS[mode]
            rel_scores = [model.log_odds(f) for f in rel_features]
            unrel_scores = [model.log_odds(f) for f in unrel_features]

        def in_place(sels: list[Selection], scores: Iterable[float]) -> np.ndarray:
            """``scores`` (one per query with features, in order) with NO_CANDIDATES for the queries without."""
            values = iter(scores)
            return np.array([next(values) if s.features else NO_CANDIDATES["model"] for s in sels])

        def log_odds(sels: list[Selection]) -> np.ndarray:
            return in_place(sels, [model.log_odds(s.features) for s in sels if s.features])

        rel_fit_scores, unrel_fit_scores = in_place(rel_fit, rel_scores), in_place(unrel_fit, unrel_scores)
        gate = calibrate_scores(rel_fit_scores, unrel_fit_scores, error_budget=error_budget, min_coverage=min_coverage,
                                holdout=0.0, seed=seed, writes=n, locations=n)
        if rel_held and unrel_held:
            # as hopmem.text.gates.calibrate reports them: counts and AUC over every score, figures held out
            rel_held_scores, unrel_held_scores = log_odds(rel_held), log_odds(unrel_held)
            gate = replace(gate, n_relevant=len(rel), n_irrelevant=len(unrel),
                           auc=auc(np.concatenate([rel_fit_scores, rel_held_scores]),
                                   np.concatenate([unrel_fit_scores, unrel_held_scores])),
                           holdout_coverage=float(np.mean(rel_held_scores >= gate.tau)),
                           holdout_error_rate=float(np.mean(unrel_held_scores >= gate.tau)))
        return model, gate

    def set_gates(self, gates: Mapping[str, Gate | None], band_gates: Mapping[str, Gate] | None = None,
                  models: Mapping[str, VerdictModel | None] | None = None) -> None:
        """Store verdict gates (``None`` removes one, back to the default), and optionally band gates and
        verdict models.

        A mode given a verdict gate but no band gate bands its hits with the
        verdict gate's cut points. A verdict gate applies to its mode's model's
        log-odds when ``models`` gives one, otherwise to the fixed grounding
        statistic (:func:`~hopmem.agent.verdict.grounding_statistic`), which is
        also what gates stored before verdict models existed apply to.
        """
        self._check_open()
        band_gates = dict(band_gates or {})
        models = dict(models or {})
        with self._lock:
            with self._store.transaction():
                for mode, gate in gates.items():
                    if mode not in RECALL_MODES:
                        raise InvalidInput(f"gates: unknown mode {mode!r}; expected one of {RECALL_MODES}")
                    key, band_key = f"gate:{self.namespace}:{mode}", f"bands:{self.namespace}:{mode}"
                    model_key = f"verdict:{self.namespace}:{mode}"
                    band = band_gates.get(mode)
                    model = models.get(mode)
                    for name, value, kind in (("gate", gate, Gate), ("band gate", band, Gate),
                                              ("verdict model", model, VerdictModel)):
                        if value is not None and not isinstance(value, kind):
                            raise InvalidInput(f"{name} of {mode!r}: expected a {kind.__name__}, "
                                               f"got {type(value).__name__}")
                    if model is not None and not set(model.features) <= MODE_FEATURES[mode]:
                        raise InvalidInput(f"verdict model of {mode!r}: expected features among "
                                           f"{sorted(MODE_FEATURES[mode])}, got {model.features}")
                    if gate is None:
                        self._store.delete_meta(key)
                        self._store.delete_meta(band_key)
                        self._store.delete_meta(model_key)
                        self._gates.pop(mode, None)
                        self._band_gates.pop(mode, None)
                        self._models.pop(mode, None)
                        continue
                    self._store.set_json(key, gate.to_dict())
                    self._gates[mode] = gate
                    if band is None:
                        self._store.delete_meta(band_key)
                        self._band_gates.pop(mode, None)
                    else:
                        self._store.set_json(band_key, band.to_dict())
                        self._band_gates[mode] = band
                    if model is None:
                        self._store.delete_meta(model_key)
                        self._models.pop(mode, None)
                    else:
                        self._store.set_json(model_key, model.to_dict())
                        self._models[mode] = model
            self._data_version = self._store.data_version()

    @property
    def gates(self) -> dict[str, Gate]:
        """The calibrated verdict gates (modes without one use :data:`DEFAULT_GATES`)."""
        return dict(self._gates)

    @property
    def band_gates(self) -> dict[str, Gate]:
        """The calibrated band gates (hits are banded by the verdict gate where none is set)."""
        return dict(self._band_gates)

    @property
    def verdict_models(self) -> dict[str, VerdictModel]:
        """The verdict models stored with the calibrated gates (a gate without one is on the grounding
        statistic; modes without a gate use :data:`~hopmem.agent.verdict.DEFAULT_MODELS`)."""
        return dict(self._models)
