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
from .core import MemoryState
from .recall import Recall
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

__all__ = ["Calibration", "DEFAULT_MIN_COVERAGE"]

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


class Calibration:
    """:meth:`calibrate`, :meth:`set_gates`, :meth:`gate_statistics` and the stored gates and models of
    :class:`~hopmem.agent.AgentMemory`, over its state; it measures queries with its :class:`Recall`."""

    def __init__(self, state: MemoryState, recall: Recall) -> None:
        self._state = state
        self._recall = recall

    def _measure(self, texts: Sequence[str], session_id: str | None, mode: str) -> list[Selection]:
        state = self._state
        if mode not in RECALL_MODES:
            raise InvalidInput(f"mode: expected one of {RECALL_MODES}, got {mode!r}")
        if isinstance(texts, str):
            raise InvalidInput("texts: expected a list of str, got a single str")
        texts = [t.strip() if isinstance(t, str) else t for t in texts]
        if not all(isinstance(t, str) and t for t in texts):
            raise InvalidInput("texts: expected non-empty strings")
        vectors = state.encode(texts)
        with state.lock:
            state.sync()
            now = state.now()
            return [self._recall.retrieve(text, vec, session_id=session_id, wanted={}, kind_set=None, limit=5,
                                          mode=mode, since=None, until=None, query_labels={}, now=now)[0]
                    for text, vec in zip(texts, vectors)]

    def gate_statistics(self, texts: Sequence[str], *, session_id: str | None = None,
                        mode: str = "hybrid") -> list[float | None]:
        """See :meth:`hopmem.agent.AgentMemory.gate_statistics`."""
        state = self._state
        _, _, model, _ = select_gates(state.gates, state.band_gates, state.models, mode)
        unscored = NO_CANDIDATES["grounding" if model is None else "model"]
        return [None if sel.override is not None else (unscored if sel.statistic is None else sel.statistic)
                for sel in self._measure(texts, session_id, mode)]

    def calibrate(self, related: Sequence[str], unrelated: Sequence[str], *, error_budget: float = 0.25,
                  holdout: float = 0.0, seed: int = 0, session_id: str | None = None,
                  min_coverage: float = DEFAULT_MIN_COVERAGE, modes: Iterable[str] = RECALL_MODES,
                  **deprecated: Any) -> dict[str, Gate]:
        """See :meth:`hopmem.agent.AgentMemory.calibrate`."""
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
            n = len(self._state.rows)
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
        """See :meth:`hopmem.agent.AgentMemory.set_gates`."""
        state = self._state
        state.check_open()
        band_gates = dict(band_gates or {})
        models = dict(models or {})
        with state.lock:
            with state.store.transaction():
                for mode, gate in gates.items():
                    if mode not in RECALL_MODES:
                        raise InvalidInput(f"gates: unknown mode {mode!r}; expected one of {RECALL_MODES}")
                    key, band_key = f"gate:{state.namespace}:{mode}", f"bands:{state.namespace}:{mode}"
                    model_key = f"verdict:{state.namespace}:{mode}"
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
                        state.store.delete_meta(key)
                        state.store.delete_meta(band_key)
                        state.store.delete_meta(model_key)
                        state.gates.pop(mode, None)
                        state.band_gates.pop(mode, None)
                        state.models.pop(mode, None)
                        continue
                    state.store.set_json(key, gate.to_dict())
                    state.gates[mode] = gate
                    if band is None:
                        state.store.delete_meta(band_key)
                        state.band_gates.pop(mode, None)
                    else:
                        state.store.set_json(band_key, band.to_dict())
                        state.band_gates[mode] = band
                    if model is None:
                        state.store.delete_meta(model_key)
                        state.models.pop(mode, None)
                    else:
                        state.store.set_json(model_key, model.to_dict())
                        state.models[mode] = model
            state.mark_synced()

    @property
    def gates(self) -> dict[str, Gate]:
        """See :attr:`hopmem.agent.AgentMemory.gates`."""
        return dict(self._state.gates)

    @property
    def band_gates(self) -> dict[str, Gate]:
        """See :attr:`hopmem.agent.AgentMemory.band_gates`."""
        return dict(self._state.band_gates)

    @property
    def verdict_models(self) -> dict[str, VerdictModel]:
        """See :attr:`hopmem.agent.AgentMemory.verdict_models`."""
        return dict(self._state.models)
