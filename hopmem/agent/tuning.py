"""The tuning record: the constants the agent memory's fitted defaults depend on, shipped with them as data.

``hopmem/data/tuning/default.json`` holds, with its provenance (the fit command, the commit, a hash of
the data fitted on, per part):

* ``models``, ``gates``, ``band_gates``: the uncalibrated verdict models and their thresholds
  (:data:`hopmem.agent.verdict.DEFAULT_MODELS`, ``DEFAULT_GATES``, ``DEFAULT_BAND_GATES``);
* ``settings``: the :class:`~hopmem.agent.RecallConfig` values they were fitted under (the fields'
  defaults are read from here);
* ``constants``: the module constants chosen with them (how many neighbours the verdict's margin reads,
  BM25's ``k1`` and ``b``, how far the conversational context reaches, ...).

:func:`unfitted_settings` names the settings of a configuration that differ from the record's; opening a
memory with such a configuration warns (:class:`UnfittedSettings`), since the default verdict then reads
features on another scale than it was fitted on (``calibrate()`` fits a verdict to the memory at hand).
See ``docs/tuning.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["TUNING_FILE", "UnfittedSettings", "record", "constant", "setting", "unfitted_settings"]

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
    """One of the record's ``settings`` (a :class:`~hopmem.agent.RecallConfig` field's default)."""
    value = record()["settings"][name]
    return dict(value) if isinstance(value, dict) else value


def unfitted_settings(config: Any) -> dict[str, tuple[Any, Any]]:
    """The record's settings that ``config`` (a :class:`~hopmem.agent.RecallConfig`) changes:
    ``{name: (fitted, given)}``."""
    out = {}
    for name, fitted in record()["settings"].items():
        given = getattr(config, name)
        if (dict(given) if isinstance(fitted, dict) else given) != fitted:
            out[name] = (fitted, given)
    return out
