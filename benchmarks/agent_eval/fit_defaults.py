"""The associative and keyword modes' uncalibrated verdict models and gates, fitted on the development set.

Run through :mod:`benchmarks.agent_eval.run`::

    python -m benchmarks.agent_eval.run --data dev --fit-defaults [--write | --check]

One memory holds the set's turns (library defaults, all-MiniLM-L6-v2 on
torch), and ``calibrate`` fits every mode's verdict on all of its questions
at error budget 0.1 with no coverage floor. The associative and keyword
models (weights and intercept to 3 decimals) and their gates (``tau`` to 2)
are what the tuning record ``hopmem/data/tuning/default.json`` ships; hybrid
mode's come from :mod:`benchmarks.locomo.fit_defaults` instead. ``--write``
puts them into the record with their provenance (this command, the commit,
a SHA-256 of the set); ``--check`` exits 1 unless the record it would write
equals the shipped file byte for byte, the commit aside
(:mod:`benchmarks.provenance`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.provenance import check_text, compare, data_hash, refit_text

#: The modes this fit ships (hybrid's model is fitted by benchmarks.locomo.fit_defaults).
MODES = ("associative", "keyword")
#: The tuning record's provenance key for them.
PART = ", ".join(MODES)
COMMAND = "python -m benchmarks.agent_eval.run --data dev --fit-defaults --write"
ENCODER = "all-MiniLM-L6-v2 (sentence-transformers, torch)"


def fit(encoder: Any, data: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """Every mode's model and gate fitted on all of ``data``'s questions (printed as well)."""
    from benchmarks.agent_eval.run import build_memory

    questions = data["questions"]
    with tempfile.TemporaryDirectory() as tmp:
        mem, _, _ = build_memory(os.path.join(tmp, "defaults.db"), encoder, data, options)
        try:
            gates = mem.calibrate([q["question"] for q in questions if q["answers"]],
                                  [q["question"] for q in questions if not q["answers"]], error_budget=0.1,
                                  min_coverage=0.0)  # strict: the budget alone, no coverage floor
            models = dict(mem.verdict_models)
        finally:
            mem.close()
    for mode, model in models.items():
        weights = ", ".join(f"{w:.3f}" for w in model.weights)
        print(f'    "{mode}": VerdictModel({model.features!r}, ({weights}), {model.intercept:.3f}),')
    for mode, gate in gates.items():
        print(f'    "{mode}": _default_gate({gate.tau:.2f}),')
    return {"models": models, "gates": {mode: gate.tau for mode, gate in gates.items()}}


def tuning_record(shipped: str, fitted: dict[str, Any], data: str, commit: str) -> str:
    """The shipped tuning record's text with the associative and keyword models, gates and provenance replaced."""
    record = json.loads(shipped)
    for mode in MODES:
        model = fitted["models"][mode]
        record["models"][mode] = {"features": list(model.features), "weights": [round(w, 3) for w in model.weights],
                                  "intercept": round(model.intercept, 3)}
        record["gates"][mode] = round(fitted["gates"][mode], 2)
    record["provenance"][PART] = {"command": COMMAND, "encoder": ENCODER, "commit": commit, "data": data}
    return json.dumps(record, indent=1) + "\n"


def main(encoder: Any, data: dict[str, Any], data_path: Path, options: dict[str, Any], action: str | None) -> int:
    """Fit and print; with ``action`` ``"write"`` or ``"check"``, write or check the tuning record."""
    from hopmem.agent.tuning import TUNING_FILE

    fitted = fit(encoder, data, options)
    if action is None:
        return 0
    shipped = TUNING_FILE.read_text(encoding="utf-8")
    commit = json.loads(shipped)["provenance"].get(PART, {}).get("commit")
    digest = data_hash([data_path])

    def render(at: str) -> str:
        return tuning_record(shipped, fitted, digest, at)

    if action == "write":
        TUNING_FILE.write_text(refit_text(render, shipped, commit), encoding="utf-8")
        print(f"wrote {TUNING_FILE}")
        return 0
    text = check_text(render, commit)
    same, how = compare(shipped, text)
    if same:
        print(f"{TUNING_FILE}: the refit equals the shipped record, {how}")
        return 0
    import difflib

    sys.stdout.writelines(difflib.unified_diff(shipped.splitlines(True), text.splitlines(True), "shipped", "refit"))
    print(f"{TUNING_FILE}: the refit {how}")
    return 1
