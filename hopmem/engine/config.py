"""The memory's configuration: one frozen dataclass, validated on creation."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._deprecation import module_aliases
from ..errors import InvalidConfig

__all__ = ["MemoryConfig", "MEMORY_MODES"]

#: The memory modes :attr:`MemoryConfig.mode` takes (``MODES`` before 0.2).
MEMORY_MODES = ("competitive", "plain")
ACTIVATIONS = ("exact", "compact", "approximate")
#: Groups of the location index an approximate read probes unless told otherwise.
DEFAULT_PROBE = 8


@dataclass(frozen=True)
class MemoryConfig:
    """Every parameter of one memory, validated when the config is made.

    ``activation="compact"`` makes reads scan a float16 copy of the addresses
    first, then re-score exactly, in float32, every location whose float16
    score lies within the proven error bound of the k-th best: faster on
    large memories, and the activated set is always the exact one (ties
    included), so reads answer bit for bit as with ``"exact"``. Writes always
    activate exactly, so the state never depends on it.

    ``activation="approximate"`` makes reads activate the exact top k of the
    locations in the ``probe`` groups of the location index whose centroids
    score highest (an inverted-file probe; see docs/approximate.md): reads
    stay fast at millions of locations, and the activated set may miss
    locations of unprobed groups (its recall is measured by
    ``benchmarks/ann.py``). ``probe`` at or above the index's number of groups
    gives the exact set. Writes always activate exactly.

    ``tau_overload=None`` resolves to ``max(dim / 32, 8)``; the resolved value is
    what is stored, so a saved config reproduces the same memory.
    """

    dim: int
    mode: Literal["competitive", "plain"] = "competitive"
    k: int = 20
    beta: float = 5.0
    t_max: int = 10
    epsilon: float = 1e-6
    eta0: float = 0.01
    eta_decay: float = 0.9999
    eta_min: float = 0.001
    tau_split: float = 0.3
    tau_merge: float = 0.95
    tau_overload: float | None = None
    gamma: float = 1.0
    tau_damp: float = 10.0
    max_locations: int | None = None
    seed: int = 0
    activation: Literal["exact", "compact", "approximate"] = "exact"
    probe: int = DEFAULT_PROBE

    def __post_init__(self) -> None:
        def fail(field: str, expected: str, got: Any) -> None:
            raise InvalidConfig(f"config field {field!r}: expected {expected}, got {got!r}")

        def integer(field: str, value: Any, minimum: int) -> int:
            if isinstance(value, bool) or not isinstance(value, (int,)) and not (
                hasattr(value, "__index__")
            ):
                fail(field, f"an integer >= {minimum}", value)
            value = int(value)
            if value < minimum:
                fail(field, f"an integer >= {minimum}", value)
            return value

        def real(field: str, value: Any) -> float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(
                value, "__float__"
            ):
                fail(field, "a finite number", value)
            value = float(value)
            if not math.isfinite(value):
                fail(field, "a finite number", value)
            return value

        set_ = object.__setattr__
        set_(self, "dim", integer("dim", self.dim, 1))
        if self.mode not in MEMORY_MODES:
            fail("mode", "'competitive' or 'plain'", self.mode)
        if self.activation not in ACTIVATIONS:
            fail("activation", "'exact', 'compact' or 'approximate'", self.activation)
        set_(self, "k", integer("k", self.k, 1))
        set_(self, "t_max", integer("t_max", self.t_max, 1))
        set_(self, "seed", integer("seed", self.seed, 0))
        set_(self, "probe", integer("probe", self.probe, 1))
        if self.seed >= 2**64:
            fail("seed", "an integer below 2**64", self.seed)
        for name in ("beta", "epsilon", "eta0", "eta_decay", "eta_min", "tau_split",
                     "tau_merge", "gamma", "tau_damp"):
            set_(self, name, real(name, getattr(self, name)))
        if self.beta <= 0:
            fail("beta", "a number > 0", self.beta)
        if not 0 <= self.epsilon < 1:
            fail("epsilon", "a number in [0, 1)", self.epsilon)
        if self.eta0 <= 0:
            fail("eta0", "a number in (0, 1]", self.eta0)
        if not 0 < self.eta_min <= self.eta0:
            fail("eta_min", f"0 < eta_min <= eta0 (eta0={self.eta0})", self.eta_min)
        if self.eta0 > 1:
            fail("eta0", "a number in (0, 1]", self.eta0)
        if not 0 < self.eta_decay <= 1:
            fail("eta_decay", "a number in (0, 1]", self.eta_decay)
        if not 0 <= self.tau_split < self.tau_merge <= 1:
            fail("tau_split/tau_merge", "0 <= tau_split < tau_merge <= 1",
                 (self.tau_split, self.tau_merge))
        if self.gamma < 0:
            fail("gamma", "a number >= 0", self.gamma)
        if self.tau_damp <= 0:
            fail("tau_damp", "a number > 0", self.tau_damp)
        if self.tau_overload is None:
            set_(self, "tau_overload", max(self.dim / 32.0, 8.0))
        else:
            value = real("tau_overload", self.tau_overload)
            if value <= 0:
                fail("tau_overload", "a number > 0", value)
            set_(self, "tau_overload", value)
        if self.max_locations is not None:
            set_(self, "max_locations", integer("max_locations", self.max_locations, 1))

    @property
    def competitive(self) -> bool:
        return self.mode == "competitive"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict that :meth:`from_dict` turns back into an equal config."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidConfig(f"config: expected known fields, got unknown field(s) {', '.join(unknown)}")
        if "dim" not in data:
            raise InvalidConfig("config field 'dim': expected an integer >= 1, got nothing")
        return cls(**dict(data))

    def differences(self, other: MemoryConfig) -> list[str]:
        """Names of the fields whose values differ (for clear mismatch errors)."""
        return [f.name for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(other, f.name)]


#: Names deprecated in 0.2 (removed in 0.3), served with a ``DeprecationWarning``.
__getattr__ = module_aliases(__name__, {"MODES": ("MEMORY_MODES", lambda: MEMORY_MODES)})
