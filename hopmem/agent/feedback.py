"""Selections and feedback: report how the work that used a selection went, or set an entry's value.

:meth:`Feedback.complete` consumes a recall's receipt and spreads the
centered score over the selected entries in one transaction (a second call
changes nothing); :meth:`Feedback.feedback` sets, replaces or clears an
entry's manual value. Utility (:func:`hopmem.agent.retention.utility`) reorders
hits and stretches half-lives only with ``reinforcement=True``.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInput
from .core import MemoryState
from .results import Entry

__all__ = ["Feedback"]


class Feedback:
    """:meth:`complete` and :meth:`feedback` of :class:`~hopmem.agent.AgentMemory`, over its state."""

    def __init__(self, state: MemoryState) -> None:
        self._state = state

    def complete(self, selection_id: str, score: float) -> bool:
        """See :meth:`hopmem.agent.AgentMemory.complete`."""
        state = self._state
        state.check_open()
        if not isinstance(selection_id, str) or not selection_id:
            raise InvalidInput(f"selection_id: expected a non-empty str, got {selection_id!r}")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
            raise InvalidInput(f"score: expected a number in [0, 1], got {score!r}")
        with state.lock:
            state.sync()
            now = state.now()
            centered = 2.0 * (float(score) - 0.5)
            with state.store.transaction():
                ids = state.store.take_receipt(selection_id, state.namespace, now)
                updated = []
                if ids:
                    weight = 1.0 / len(ids)
                    for entry_id in ids:
                        row = state.rows.get(entry_id)
                        if row is None:
                            continue
                        values = {"eval_sum": row.eval_sum + weight * centered,
                                  "eval_weight": row.eval_weight + weight, "updated_at": now}
                        if state.reinforcement and centered > 0:
                            values["reinforced_at"] = now
                        state.store.update_entry(entry_id, state.namespace, **values)
                        updated.append((row, values))
            state.mark_synced()
            for row, values in updated:
                row.eval_sum = values["eval_sum"]
                row.eval_weight = values["eval_weight"]
                row.updated_at = now
                if "reinforced_at" in values:
                    row.reinforced_at = now
        if ids is None:
            return False
        state.emit("completed", None, now, selection_id=selection_id, score=float(score),
                   entry_ids=[r.id for r, _ in updated])
        return True

    def feedback(self, entry_id: int, value: float | None) -> Entry:
        """See :meth:`hopmem.agent.AgentMemory.feedback`."""
        state = self._state
        state.check_open()
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not -1.0 <= value <= 1.0):
            raise InvalidInput(f"value: expected a number in [-1, 1] or None, got {value!r}")
        with state.lock:
            state.sync()
            row = state.row(entry_id)
            now = state.now()
            values: dict[str, Any] = {"manual_feedback": None if value is None else float(value), "updated_at": now}
            if state.reinforcement and value is not None and value > 0:
                values["reinforced_at"] = now
            with state.store.transaction():
                state.store.update_entry(row.id, state.namespace, **values)
            state.mark_synced()
            row.manual_feedback = values["manual_feedback"]
            row.updated_at = now
            if "reinforced_at" in values:
                row.reinforced_at = now
            entry = state.entry(row, now)
        state.emit("feedback", row.session_id, now, id=row.id, value=value)
        return entry
