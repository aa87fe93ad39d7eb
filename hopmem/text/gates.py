"""Calibrated abstention: a threshold on a recall score, and confidence bands.

A memory always returns something; whether to use it is the application's
call. :func:`calibrate` derives that call from data: scores measured on
queries whose recall was relevant, and on queries whose recall was not. It
returns a :class:`Gate` holding the threshold ``tau``, the figures that justify
it, and :class:`Bands` that label an admitted score "vivid", "clear" or
"vague". Abstaining is a value (``gate.admits(score)`` is ``False``), never an
exception.

A gate is valid only at the load it was calibrated at: interference grows as
a memory fills, so :meth:`Gate.is_stale` says when to calibrate again.

The rule, precisely
-------------------
``auc``
    The Mann-Whitney statistic on all the scores: the probability that a
    relevant score exceeds an irrelevant one, ties counting one half.
Separated groups (every relevant score above every irrelevant one)
    ``tau`` is the middle of the empty band between the highest irrelevant and
    the lowest relevant score; coverage is 1, error 0, and the held-out figures
    repeat those full-data figures (no split is needed to trust them).
Otherwise
    Each group is shuffled with ``numpy.random.default_rng(seed)`` (relevant
    first, then irrelevant) and ``round(n * holdout)`` of it (at least
    one, and leaving at least one) is held out. On the fitting part, with ``m``
    irrelevant scores, at most ``k = floor(error_budget * m)`` of them may reach
    ``tau``. Every ``tau`` above the ``(k+1)``-th highest irrelevant score
    ``s`` respects the budget; the lowest of them admit every relevant score
    above ``s``, which is the most coverage the budget allows. All thresholds in
    ``(s, r]``, ``r`` the lowest relevant score above ``s``, share that
    coverage; ``tau`` is the middle of that interval, which keeps a margin on
    both sides (the same rule as the separated case, where ``k = 0``). If no
    relevant score is above ``s``, ``tau`` is the next float above ``s`` and
    coverage is 0. ``coverage`` and ``error_rate`` are measured on the fitting
    part (so ``error_rate <= error_budget``); ``holdout_coverage`` and
    ``holdout_error_rate`` on the held-out part, which had no say in ``tau``.
    ``holdout=0`` fits on everything and reports ``None`` held out.
Bands
    ``clear = tau``: anything the gate admits is at least clear.
    ``vivid`` is the median of the fitting relevant scores that reach ``tau``:
    a vivid recall is stronger than the typical admitted true recall, so about
    half of the admitted relevant recalls are vivid. With none admitted,
    ``vivid = tau``. The cut points come from the data, never from constants.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from hopmem._arguments import deprecated_arguments
from hopmem.errors import InvalidInput

__all__ = ["Bands", "Gate", "auc", "calibrate", "roc_curve"]

_FORMAT = "hopmem.gate"
_VERSION = 1

# Names a stats object may use for each load, first match wins.
_WRITES_KEYS = ("writes", "total_writes")
_LOCATIONS_KEYS = ("num_locations", "locations")


# ----------------------------------------------------------------- validation


def _real(value: Any, name: str) -> float:
    if type(value) is float:  # the common case, before the slower checks of other numeric types
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidInput(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    return float(value)


def _finite(value: Any, name: str) -> float:
    number = _real(value, name)
    if not math.isfinite(number):
        raise InvalidInput(f"{name}: expected a finite number, got {number!r}")
    return number


def _fraction(value: Any, name: str) -> float:
    number = _finite(value, name)
    if not 0.0 <= number <= 1.0:
        raise InvalidInput(f"{name}: expected a number in [0, 1], got {number!r}")
    return number


def _count(value: Any, name: str, *, allow_none: bool) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        expected = "an int >= 0 or None" if allow_none else "an int >= 0"
        raise InvalidInput(f"{name}: expected {expected}, got {value!r}")
    return int(value)


def _scores(values: ArrayLike, name: str, min_size: int) -> np.ndarray:
    """Validate a group of scores: 1-D, real, finite, at least ``min_size``."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{name}: expected a 1-D array of numbers, got {type(values).__name__} ({exc})") from None
    if array.dtype.kind not in "biuf":
        raise InvalidInput(f"{name}: expected real numbers, got dtype {array.dtype}")
    if array.ndim != 1:
        raise InvalidInput(f"{name}: expected a 1-D array, got shape {array.shape}")
    if array.size < min_size:
        raise InvalidInput(f"{name}: expected at least {min_size} scores, got {array.size}")
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        raise InvalidInput(f"{name}: expected finite scores, got NaN or infinity")
    return array


# ---------------------------------------------------------------------- bands


@dataclass(frozen=True)
class Bands:
    """Cut points that label a score.

    Parameters
    ----------
    vivid : float
        Scores at or above it are "vivid".
    clear : float
        Scores at or above it (and below ``vivid``) are "clear"; below, "vague".
        Must not exceed ``vivid``.
    """

    vivid: float
    clear: float

    def __post_init__(self) -> None:
        vivid = _finite(self.vivid, "vivid")
        clear = _finite(self.clear, "clear")
        if vivid < clear:
            raise InvalidInput(f"vivid: expected a number >= clear ({clear!r}), got {vivid!r}")
        object.__setattr__(self, "vivid", vivid)
        object.__setattr__(self, "clear", clear)

    def band(self, score: float) -> str:
        """The label of ``score``: "vivid", "clear" or "vague"."""
        value = _real(score, "score")
        if value >= self.vivid:
            return "vivid"
        if value >= self.clear:
            return "clear"
        return "vague"

    def to_dict(self) -> dict[str, float]:
        """``{"vivid": ..., "clear": ...}``."""
        return {"vivid": self.vivid, "clear": self.clear}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Bands:
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, Mapping):
            raise InvalidInput(f"bands: expected a dict with 'vivid' and 'clear', got {data!r:.80}")
        try:
            return cls(vivid=data["vivid"], clear=data["clear"])
        except KeyError as exc:
            raise InvalidInput(f"bands: expected the key {exc.args[0]!r}, got a dict without it") from None


# ----------------------------------------------------------------------- gate


@dataclass(frozen=True)
class Gate:
    """A calibrated abstention threshold and the evidence for it.

    Build one with :func:`calibrate`. Attributes are documented in the module
    docstring ("The rule, precisely").

    Attributes
    ----------
    tau : float
        Admit a score when ``score >= tau``.
    coverage : float
        Fraction of (fitting) relevant scores ``>= tau``.
    error_rate : float
        Fraction of (fitting) irrelevant scores ``>= tau``.
    auc : float
        Mann-Whitney AUC on all the scores.
    n_relevant, n_irrelevant : int
        How many scores of each group were given.
    calibrated_writes, calibrated_locations : int or None
        The memory's load when the scores were measured, if given.
    bands : Bands
        Cut points for :meth:`band`.
    separated : bool
        Whether every relevant score exceeded every irrelevant one.
    holdout_coverage, holdout_error_rate : float or None
        The same figures measured on the held-out part; ``None`` when nothing
        was held out.
    """

    tau: float
    coverage: float
    error_rate: float
    auc: float
    n_relevant: int
    n_irrelevant: int
    calibrated_writes: int | None
    calibrated_locations: int | None
    bands: Bands
    separated: bool
    holdout_coverage: float | None
    holdout_error_rate: float | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tau", _finite(self.tau, "tau"))
        for name in ("coverage", "error_rate", "auc"):
            object.__setattr__(self, name, _fraction(getattr(self, name), name))
        for name in ("holdout_coverage", "holdout_error_rate"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _fraction(getattr(self, name), name))
        for name in ("n_relevant", "n_irrelevant"):
            object.__setattr__(self, name, _count(getattr(self, name), name, allow_none=False))
        for name in ("calibrated_writes", "calibrated_locations"):
            object.__setattr__(self, name, _count(getattr(self, name), name, allow_none=True))
        if not isinstance(self.bands, Bands):
            raise InvalidInput(f"bands: expected a Bands, got {type(self.bands).__name__}")
        if not isinstance(self.separated, (bool, np.bool_)):
            raise InvalidInput(f"separated: expected a bool, got {self.separated!r}")
        object.__setattr__(self, "separated", bool(self.separated))

    def admits(self, score: float) -> bool:
        """Whether ``score >= tau``: use the recall, or abstain."""
        return _real(score, "score") >= self.tau

    def band(self, score: float) -> str:
        """The label of ``score`` under :attr:`bands`: "vivid", "clear" or "vague"."""
        return self.bands.band(score)

    def is_stale(self, stats: Any, growth: float = 2.0) -> bool:
        """Whether the memory has outgrown the load this gate was calibrated at.

        Parameters
        ----------
        stats : object or Mapping
            The memory's current load: ``writes`` (or ``total_writes``) and
            ``num_locations`` (or ``locations``), as attributes or keys.
        growth : float, optional
            Stale once a load exceeds ``growth`` times its calibrated value.

        Returns
        -------
        bool
            ``True`` when any load the gate recorded has grown past ``growth``
            times its calibrated value; ``False`` when the gate records none.

        Raises
        ------
        InvalidInput
            If ``growth < 1``, or ``stats`` lacks a load the gate recorded.
        """
        factor = _finite(growth, "growth")
        if factor < 1.0:
            raise InvalidInput(f"growth: expected a number >= 1, got {factor!r}")
        checks = ((self.calibrated_writes, _WRITES_KEYS), (self.calibrated_locations, _LOCATIONS_KEYS))
        stale = False
        for calibrated, keys in checks:
            if calibrated is None:
                continue
            current = _finite(_lookup(stats, keys), f"stats.{keys[0]}")
            stale = stale or current > factor * calibrated
        return stale

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe description that :meth:`from_dict` restores exactly."""
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "tau": self.tau,
            "coverage": self.coverage,
            "error_rate": self.error_rate,
            "auc": self.auc,
            "n_relevant": self.n_relevant,
            "n_irrelevant": self.n_irrelevant,
            "calibrated_writes": self.calibrated_writes,
            "calibrated_locations": self.calibrated_locations,
            "bands": self.bands.to_dict(),
            "separated": self.separated,
            "holdout_coverage": self.holdout_coverage,
            "holdout_error_rate": self.holdout_error_rate,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Gate:
        """Rebuild a gate from :meth:`to_dict` output.

        Raises
        ------
        InvalidInput
            If ``data`` is not such a description.
        """
        if not isinstance(data, Mapping) or data.get("format") != _FORMAT:
            raise InvalidInput(f"data: expected a dict from Gate.to_dict() (format {_FORMAT!r}), got {data!r:.80}")
        if data.get("version") != _VERSION:
            raise InvalidInput(f"data['version']: expected {_VERSION}, got {data.get('version')!r}")
        try:
            return cls(
                tau=data["tau"],
                coverage=data["coverage"],
                error_rate=data["error_rate"],
                auc=data["auc"],
                n_relevant=data["n_relevant"],
                n_irrelevant=data["n_irrelevant"],
                calibrated_writes=data["calibrated_writes"],
                calibrated_locations=data["calibrated_locations"],
                bands=Bands.from_dict(data["bands"]),
                separated=data["separated"],
                holdout_coverage=data["holdout_coverage"],
                holdout_error_rate=data["holdout_error_rate"],
            )
        except KeyError as exc:
            raise InvalidInput(f"data: expected the key {exc.args[0]!r}, got a dict without it") from None


def _lookup(stats: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if isinstance(stats, Mapping):
            if key in stats:
                return stats[key]
        elif hasattr(stats, key):
            return getattr(stats, key)
    raise InvalidInput(f"stats: expected {' or '.join(repr(k) for k in keys)}, got {type(stats).__name__} "
                       "without it")


# ---------------------------------------------------------------- statistics


def _count_at_least(sorted_values: np.ndarray, thresholds: np.ndarray | float) -> np.ndarray:
    """How many of ``sorted_values`` are ``>= t``, for each threshold."""
    return sorted_values.size - np.searchsorted(sorted_values, thresholds, side="left")


def _auc(relevant: np.ndarray, irrelevant: np.ndarray) -> float:
    ordered = np.sort(irrelevant)
    below = np.searchsorted(ordered, relevant, side="left")  # irrelevant < r
    at_or_below = np.searchsorted(ordered, relevant, side="right")  # irrelevant <= r
    # Twice the Mann-Whitney U, in integers: each win counts 2, each tie 1.
    twice_u = int(below.sum()) + int(at_or_below.sum())
    return twice_u / (2.0 * relevant.size * irrelevant.size)


def auc(relevant: ArrayLike, irrelevant: ArrayLike) -> float:
    """The Mann-Whitney AUC: P(relevant score > irrelevant score), ties 1/2.

    Parameters
    ----------
    relevant, irrelevant : array_like, 1-D
        Finite scores, at least one in each group.

    Returns
    -------
    float
        In ``[0, 1]``; 1 when the groups separate, 0.5 for indistinguishable ones.
    """
    return _auc(_scores(relevant, "relevant", 1), _scores(irrelevant, "irrelevant", 1))


def roc_curve(relevant: ArrayLike, irrelevant: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ROC curve of the rule ``score >= threshold``.

    Parameters
    ----------
    relevant, irrelevant : array_like, 1-D
        Finite scores, at least one in each group.

    Returns
    -------
    fpr, tpr, thresholds : numpy.ndarray
        ``thresholds`` is ``+inf`` followed by the distinct scores, descending;
        ``fpr[i]`` and ``tpr[i]`` are the fractions of irrelevant and relevant
        scores ``>= thresholds[i]``. Both run from 0 to 1, and the trapezoid
        area under ``(fpr, tpr)`` equals :func:`auc`.
    """
    rel = np.sort(_scores(relevant, "relevant", 1))
    irr = np.sort(_scores(irrelevant, "irrelevant", 1))
    thresholds = np.concatenate(([np.inf], np.unique(np.concatenate((rel, irr)))[::-1]))
    tpr = _count_at_least(rel, thresholds) / rel.size
    fpr = _count_at_least(irr, thresholds) / irr.size
    return fpr.astype(np.float64), tpr.astype(np.float64), thresholds


def _between(low: float, high: float) -> float:
    """A threshold in ``(low, high]``, the middle when floats allow; ``low < high``."""
    middle = low + (high - low) / 2.0
    return float(middle if low < middle <= high else high)


def _split(values: np.ndarray, holdout: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Shuffle, then return ``(fitting, held_out)``; both non-empty if ``holdout > 0``."""
    order = rng.permutation(values.size)
    n_held = 0
    if holdout > 0.0:
        n_held = min(values.size - 1, max(1, round(values.size * holdout)))
    return values[order[n_held:]], values[order[:n_held]]


def _fit_threshold(relevant: np.ndarray, irrelevant: np.ndarray, error_budget: float) -> float:
    """The rule of the module docstring, on one fitting part."""
    tolerated = min(irrelevant.size - 1, math.floor(error_budget * irrelevant.size + 1e-9))
    barrier = float(np.sort(irrelevant)[::-1][tolerated])  # tau must exceed it
    above = relevant[relevant > barrier]
    if above.size == 0:
        return float(np.nextafter(barrier, np.inf))
    return _between(barrier, float(above.min()))


def _coverage_cap(relevant: np.ndarray, irrelevant: np.ndarray, tau: float, min_coverage: float) -> float:
    """``tau``, lowered if needed so that at least ``min_coverage`` of ``relevant`` reach it.

    The lowered ``tau`` sits in the middle between the lowest relevant score it
    must admit and the next score of either group below that one.
    """
    need = math.ceil(min_coverage * relevant.size - 1e-9)
    if need <= 0 or np.sum(relevant >= tau) >= need:
        return tau
    lowest = float(np.sort(relevant)[::-1][need - 1])
    below = np.concatenate([relevant, irrelevant])
    below = below[below < lowest]
    return _between(float(below.max()), lowest) if below.size else lowest


def _bands(relevant: np.ndarray, tau: float) -> Bands:
    admitted = relevant[relevant >= tau]
    vivid = float(np.median(admitted)) if admitted.size else tau
    return Bands(vivid=max(vivid, tau), clear=tau)


class _GateCommon(TypedDict):
    """The :class:`Gate` fields :func:`calibrate` sets the same way whether or not the scores separate."""

    auc: float
    n_relevant: int
    n_irrelevant: int
    calibrated_writes: int | None
    calibrated_locations: int | None


@deprecated_arguments("hopmem.text.gates.calibrate", {"relevant_scores": "related", "irrelevant_scores": "unrelated",
                                                "holdout_fraction": "holdout"},
                      positional=("error_budget",))
def calibrate(
    related: ArrayLike,
    unrelated: ArrayLike,
    *,
    error_budget: float = 0.0,
    holdout: float = 0.3,
    seed: int = 0,
    min_coverage: float = 0.0,
    writes: int | None = None,
    locations: int | None = None,
) -> Gate:
    """Derive a gate from scores on related and unrelated queries.

    Parameters
    ----------
    related : array_like, 1-D
        Scores (e.g. fidelity) of queries whose recall should be used (the
        relevant group); at least 2.
    unrelated : array_like, 1-D
        Scores of queries the memory should abstain on (the irrelevant
        group); at least 2.
    error_budget : float, optional
        The largest tolerated fraction of irrelevant scores admitted, in
        ``[0, 1)``. 0 (the default) admits none on the fitting part.
    holdout : float, optional
        Fraction of each group held out to measure the gate, in ``[0, 1)``.
    seed : int, optional
        Seeds the split; the same inputs and seed give the same gate.
    min_coverage : float, optional
        The smallest fraction of relevant scores ``tau`` must admit on the
        fitting part, in ``[0, 1]``; it wins over ``error_budget`` where the
        two conflict (scores that separate poorly), so the gate never refuses
        more than ``1 - min_coverage`` of the relevant queries to keep its
        budget. 0 (the default) leaves ``tau`` to the budget alone.
    writes, locations : int or None, optional
        The memory's load when the scores were measured, for :meth:`Gate.is_stale`.

    Returns
    -------
    Gate
        See the module docstring for exactly how each figure is derived.

    Raises
    ------
    InvalidInput
        On scores that are not 1-D finite numbers, a group of fewer than two,
        or an argument out of range.

    Notes
    -----
    The names of the previous signature (``relevant_scores``,
    ``irrelevant_scores``, ``holdout_fraction``, and ``error_budget`` by
    position) still work, with a ``DeprecationWarning``, until hopmem 0.3.

    Examples
    --------
    >>> gate = calibrate([0.8, 0.9, 0.7], [0.1, 0.3])
    >>> gate.separated, gate.tau, gate.auc
    (True, 0.5, 1.0)
    """
    relevant = _scores(related, "related", 2)
    irrelevant = _scores(unrelated, "unrelated", 2)
    budget = _finite(error_budget, "error_budget")
    if not 0.0 <= budget < 1.0:
        raise InvalidInput(f"error_budget: expected a number in [0, 1), got {budget!r}")
    floor = _finite(min_coverage, "min_coverage")
    if not 0.0 <= floor <= 1.0:
        raise InvalidInput(f"min_coverage: expected a number in [0, 1], got {floor!r}")
    fraction = _finite(holdout, "holdout")
    if not 0.0 <= fraction < 1.0:
        raise InvalidInput(f"holdout: expected a number in [0, 1), got {fraction!r}")
    seed_value = _count(seed, "seed", allow_none=False)
    calibrated_writes = _count(writes, "writes", allow_none=True)
    calibrated_locations = _count(locations, "locations", allow_none=True)

    area = _auc(relevant, irrelevant)
    common = _GateCommon(
        auc=area,
        n_relevant=relevant.size,
        n_irrelevant=irrelevant.size,
        calibrated_writes=calibrated_writes,
        calibrated_locations=calibrated_locations,
    )

    if relevant.min() > irrelevant.max():
        tau = _between(float(irrelevant.max()), float(relevant.min()))
        return Gate(
            tau=tau,
            coverage=1.0,
            error_rate=0.0,
            bands=_bands(relevant, tau),
            separated=True,
            holdout_coverage=1.0,
            holdout_error_rate=0.0,
            **common,
        )

    rng = np.random.default_rng(seed_value)
    relevant_fit, relevant_held = _split(relevant, fraction, rng)
    irrelevant_fit, irrelevant_held = _split(irrelevant, fraction, rng)
    tau = _coverage_cap(relevant_fit, irrelevant_fit, _fit_threshold(relevant_fit, irrelevant_fit, budget), floor)
    held_out = relevant_held.size > 0
    return Gate(
        tau=tau,
        coverage=float(np.mean(relevant_fit >= tau)),
        error_rate=float(np.mean(irrelevant_fit >= tau)),
        bands=_bands(relevant_fit, tau),
        separated=False,
        holdout_coverage=float(np.mean(relevant_held >= tau)) if held_out else None,
        holdout_error_rate=float(np.mean(irrelevant_held >= tau)) if held_out else None,
        **common,
    )
