"""The tuning record: the constants the agent memory's fitted defaults depend on, shipped with them as data.

``hopmem/data/tuning/default.json`` holds, with its provenance (the fit command, the commit, a hash of
the data fitted on, per part):

* ``models``, ``gates``, ``band_gates``: the uncalibrated verdict models and their thresholds
  (:data:`hopmem.agent.verdict.DEFAULT_MODELS`, ``DEFAULT_GATES``, ``DEFAULT_BAND_GATES``);
* ``settings``: the values of recall's constants they were fitted under (``beta``, ``rrf_k``, ...);
* ``conversation``: the values of the conversation steps (:attr:`RecallConfig.conversation`), chosen on
  conversations;
* ``constants``: the module constants chosen with them (how many neighbours the verdict's margin reads,
  BM25's ``k1`` and ``b``, how far the conversational context reaches, ...).

:class:`Tuning` holds the ``settings`` and ``conversation`` values a memory runs with (by default the
record's). A research run may change them (``AgentMemory.open(..., tuning=Tuning(beta=20.0))``); opening a
memory with settings other than the record's warns (:class:`UnfittedSettings`), naming them, since the
default verdict then reads features on another scale than it was fitted on (``calibrate()`` fits a
verdict to the memory at hand). See ``docs/tuning.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import InvalidInput

__all__ = ["TUNING_FILE", "Tuning", "UnfittedSettings", "record", "constant", "setting", "conversation_setting",
           "unfitted_settings"]

#: The shipped tuning record.
TUNING_FILE = Path(__file__).resolve().parents[1] / "data" / "tuning" / "default.json"


class UnfittedSettings(UserWarning):
    """A memory opened with settings the shipped verdict models were not fitted under."""


@lru_cache(maxsize=1)
def record() -> Mapping[str, Any]:
    """The shipped tuning record (parsed once)."""
    data = json.loads(TUNING_FILE.read_text(encoding="utf-8"))
    if data.get("format") != "hopmem.tuning":
        raise ValueError(f"{TUNING_FILE}: not a hopmem tuning record")
    return data


def constant(name: str) -> Any:
    """One of the record's ``constants``."""
    return record()["constants"][name]


def setting(name: str) -> Any:
    """One of the record's ``settings`` (a :class:`Tuning` field's default)."""
    value = record()["settings"][name]
    return dict(value) if isinstance(value, dict) else value


def conversation_setting(name: str) -> Any:
    """One of the record's ``conversation`` values (a :class:`Tuning` field's default)."""
    return record()["conversation"][name]


def _number(name: str, value: Any, low: float, high: float, *, low_open: bool = False) -> None:
    ok = (not isinstance(value, bool) and isinstance(value, (int, float))
          and (low < value if low_open else low <= value) and value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]" if high != float("inf") else f"> {low:g}"
        raise InvalidInput(f"{name}: expected a number {'in ' if high != float('inf') else ''}{interval}, "
                           f"got {value!r}")


@dataclass(frozen=True)
class Tuning:
    """The constants recall's fitted defaults depend on, and the conversation steps' values.

    Every default comes from the tuning record (``hopmem/data/tuning/default.json``, docs/tuning.md): the
    shipped verdict models, gates and reranker were fitted under the first eight, and the conversation
    steps' five were chosen on conversations. They are not knobs: a memory opened with other ``settings``
    than the record's warns (:class:`UnfittedSettings`) until ``calibrate()`` fits a verdict under them.
    Change them for research, and measure.

    Attributes
    ----------
    beta : float
        Inverse temperature of the engine's reads (> 0): how sharply a read concentrates on the nearest
        entries.
    rrf_k : float
        The constant of reciprocal rank fusion, ``weight / (rrf_k + rank)`` (> 0).
    bm25_half : float
        The BM25 score at which keyword evidence reaches 0.5 (> 0).
    novelty_ceiling : float
        How the query's novelty weighs its words (in (0, 10]): ``max(0, novelty_ceiling - zipf)``, ``zipf``
        being the word's Zipf frequency in English (see :func:`hopmem.agent.evidence.novelty`).
    common_fraction : float
        Query words found in more than this share of the visible entries (in [0, 1]) are left out of the
        FTS5 query of a memory of 200 entries or more.
    close_margin : float
        An abstention within this distance below ``tau`` is reported as "too close to call" (wording only).
    rebuild_dead_fraction : float
        A partition's engine memory is rebuilt once its deleted entries outnumber both 16 and this share of
        its live ones (in [0, 1]).
    rrf_weights : mapping of str to float
        Weight of each ranked list (``semantic``, ``associative``, ``keyword``, ``exact``, ``time``) in the
        fusion. The engine's reconstruction list weighs 0: on conversations it moved near ties the wrong
        way; its score still counts in every candidate's evidence and in the verdict.
    aggregation_k : int
        Conversation step: entries each engine read activates for a question that asks for several things
        of one kind ("What activities does X do?", :func:`hopmem.agent.parts.asks_for_several`), in place of
        ``RecallConfig.assoc_k`` (>= 1).
    context_weight : float
        Conversation step: weight (in [0, 1]) of the turns stored just before and after the first three
        hits, fused into hybrid mode's order (a reply is found through the turn it answers).
    subject_boost : float
        Conversation step (in [0, 1]): when the question names exactly one speaker among the hits, that
        speaker's turns move up (:func:`hopmem.agent.ranking.prefer_subject`).
    date_boost : float
        Conversation step (in [0, 1]): a hit whose text names a date relative to its own time ("last
        Saturday") scores ``1 + date_boost`` times more for a question asking when.
    part_weight : float
        Conversation step (in [0, 1]): weight of a multi-part question's per-part lists in the fusion,
        relative to the whole question's (:mod:`hopmem.agent.parts`).
    """

    beta: float = field(default_factory=lambda: setting("beta"))
    rrf_k: float = field(default_factory=lambda: setting("rrf_k"))
    bm25_half: float = field(default_factory=lambda: setting("bm25_half"))
    novelty_ceiling: float = field(default_factory=lambda: setting("novelty_ceiling"))
    common_fraction: float = field(default_factory=lambda: setting("common_fraction"))
    close_margin: float = field(default_factory=lambda: setting("close_margin"))
    rebuild_dead_fraction: float = field(default_factory=lambda: setting("rebuild_dead_fraction"))
    rrf_weights: Mapping[str, float] = field(default_factory=lambda: setting("rrf_weights"))
    aggregation_k: int = field(default_factory=lambda: conversation_setting("aggregation_k"))
    context_weight: float = field(default_factory=lambda: conversation_setting("context_weight"))
    subject_boost: float = field(default_factory=lambda: conversation_setting("subject_boost"))
    date_boost: float = field(default_factory=lambda: conversation_setting("date_boost"))
    part_weight: float = field(default_factory=lambda: conversation_setting("part_weight"))

    def __post_init__(self) -> None:
        for name in ("beta", "rrf_k", "bm25_half"):
            _number(name, getattr(self, name), 0.0, float("inf"), low_open=True)
        _number("novelty_ceiling", self.novelty_ceiling, 0.0, 10.0, low_open=True)
        _number("close_margin", self.close_margin, 0.0, float("inf"))
        for name in ("common_fraction", "rebuild_dead_fraction", "context_weight", "subject_boost", "date_boost",
                     "part_weight"):
            _number(name, getattr(self, name), 0.0, 1.0)
        if (isinstance(self.aggregation_k, bool) or not isinstance(self.aggregation_k, int)
                or self.aggregation_k < 1):
            raise InvalidInput(f"aggregation_k: expected an int >= 1, got {self.aggregation_k!r}")
        if not isinstance(self.rrf_weights, Mapping) or not all(
                isinstance(k, str) and not isinstance(v, bool) and isinstance(v, (int, float)) and v >= 0
                for k, v in self.rrf_weights.items()):
            raise InvalidInput(f"rrf_weights: expected a mapping of list name to a weight >= 0, "
                               f"got {self.rrf_weights!r}")
        object.__setattr__(self, "rrf_weights", dict(self.rrf_weights))

    def to_dict(self) -> dict[str, Any]:
        """The values, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def unfitted_settings(tuning: Tuning) -> dict[str, tuple[Any, Any]]:
    """The record's settings that ``tuning`` changes: ``{name: (fitted, given)}``."""
    out = {}
    for name, fitted in record()["settings"].items():
        given = getattr(tuning, name)
        if (dict(given) if isinstance(fitted, dict) else given) != fitted:
            out[name] = (fitted, given)
    return out
