"""Selections and feedback: report how the work that used a selection went, or set an entry's value.

:meth:`FeedbackMixin.complete` consumes a recall's receipt and spreads the
centred score over the selected entries in one transaction (a second call
changes nothing); :meth:`FeedbackMixin.feedback` sets, replaces or clears an
entry's manual value. Utility (:func:`hopmem.agent.retention.utility`) reorders
hits and stretches half-lives only with ``reinforcement=True``.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInput
from .core import MemoryCore
from .results import Entry

__all__ = ["FeedbackMixin"]


class FeedbackMixin(MemoryCore):
    """:meth:`complete` and :meth:`feedback`."""

    def complete(self, selection_id: str, score: float) -> bool:
        """Report how well the work that used a selection went (``score`` in [0, 1]).

        The centred score ``2 * (score - 0.5)`` is spread over the selected
        entries with weight ``1 / n`` each. Consuming the receipt and updating
        the aggregates is one transaction: a second call (or a call after the
        receipt expired) changes nothing and returns False.
        """
        self._check_open()
        if not isinstance(selection_id, str) or not selection_id:
            raise InvalidInput(f"selection_id: expected a non-empty str, got {selection_id!r}")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
            raise InvalidInput(f"score: expected a number in [0, 1], got {score!r}")
        with self._lock:
            self._sync()
            now = self._now()
            centred = 2.0 * (float(score) - 0.5)
            with self._store.transaction():
                ids = self._store.take_receipt(selection_id, self.namespace, now)
                updated = []
                if ids:
                    weight = 1.0 / len(ids)
                    for entry_id in ids:
                        row = self._rows.get(entry_id)
                        if row is None:
                            continue
                        values = {"eval_sum": row.eval_sum + weight * centred,
                                  "eval_weight": row.eval_weight + weight, "updated_at": now}
                        if self.reinforcement and centred > 0:
                            values["reinforced_at"] = now
                        self._store.update_entry(entry_id, self.namespace, **values)
                        updated.append((row, values))
            self._data_version = self._store.data_version()
            for row, values in updated:
                row.eval_sum = values["eval_sum"]
                row.eval_weight = values["eval_weight"]
                row.updated_at = now
                if "reinforced_at" in values:
                    row.reinforced_at = now
        if ids is None:
            return False
        self._emit("completed", None, now, selection_id=selection_id, score=float(score),
                   entry_ids=[r.id for r, _ in updated])
        return True

    def feedback(self, entry_id: int, value: float | None) -> Entry:
        """Set, replace (a number in [-1, 1]) or clear (None) an entry's manual value."""
        self._check_open()
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not -1.0 <= value <= 1.0):
            raise InvalidInput(f"value: expected a number in [-1, 1] or None, got {value!r}")
        with self._lock:
            self._sync()
            row = self._row(entry_id)
            now = self._now()
            values: dict[str, Any] = {"manual_feedback": None if value is None else float(value), "updated_at": now}
            if self.reinforcement and value is not None and value > 0:
                values["reinforced_at"] = now
            with self._store.transaction():
                self._store.update_entry(row.id, self.namespace, **values)
            self._data_version = self._store.data_version()
            row.manual_feedback = values["manual_feedback"]
            row.updated_at = now
            if "reinforced_at" in values:
                row.reinforced_at = now
            entry = self._entry(row, now)
        self._emit("feedback", row.session_id, now, id=row.id, value=value)
        return entry
