"""What a write does with a statement that resembles one already stored: :class:`WritePolicy`.

A policy of the memory, like :class:`~hopmem.agent.ForgettingPolicy` and
:class:`~hopmem.agent.KindPolicy`: pass it to :meth:`AgentMemory.open
<hopmem.agent.AgentMemory.open>` as ``write_policy``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidInput

__all__ = ["DEFAULT_UPDATE_CUES", "WritePolicy"]

#: Words that phrase a statement as a change of an earlier one. A new statement
#: containing one supersedes its most similar current statement (same kind and
#: scope, cosine >= ``supersede_cosine``). English only; replace or disable
#: (``update_cues=None``: every similar statement supersedes) in :class:`WritePolicy`.
DEFAULT_UPDATE_CUES = (
    r"\b(now|new|newer|moved|moves|switched|changed|replaced|instead|no longer|increased|decreased|dropped|"
    r"raised|lowered|grown|improved|slipped|again|down to|up to|cut down|latest|retired|refinanced|migrated|"
    r"finished|upgraded|downgraded|rescheduled|postponed|reduced|updated|anymore|any more|stopped|started|"
    r"promoted|renamed|left|quit|became|nowadays|currently)\b"
)


@dataclass(frozen=True)
class WritePolicy:
    """When a new statement is merged into a stored one, and when it supersedes one.

    Attributes
    ----------
    dedup_cosine : float
        A new statement of the same kind whose cosine with an existing one
        reaches this (and with the same value tokens: numbers, identifiers),
        made within an hour of it, is merged into it instead of stored twice.
        Lower it when restatements pile up as separate entries; raise it when
        distinct statements are merged. Above 1 disables merging (the same
        text in the same scope is always merged).
    supersede_cosine : float
        A new statement phrased as a change (``update_cues``) supersedes its
        most similar current statement of the same kind and scope when their
        cosine reaches this; conversation turns (statements whose metadata
        name a ``"speaker"`` or ``"source"``) are left out. Raise it when
        unrelated statements are marked superseded; above 1 disables automatic
        supersession (``remember(..., supersedes=id)`` still works).
    update_cues : str or None
        Regular expression (case-insensitive) of the words that phrase a
        statement as a change (default :data:`DEFAULT_UPDATE_CUES`, English).
        Replace it for another language; None lets every similar statement
        supersede.
    """

    dedup_cosine: float = 0.95
    supersede_cosine: float = 0.5
    update_cues: str | None = DEFAULT_UPDATE_CUES

    def __post_init__(self) -> None:
        for name in ("dedup_cosine", "supersede_cosine"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1.0 <= value <= 1.01:
                raise InvalidInput(f"{name}: expected a cosine in [-1, 1] (above 1 disables), got {value!r}")
        if self.update_cues is not None:
            try:
                object.__setattr__(self, "_cues", re.compile(self.update_cues, re.IGNORECASE))
            except (re.error, TypeError) as exc:
                raise InvalidInput(f"update_cues: expected a regular expression or None: {exc}") from None

    def phrased_as_change(self, text: str) -> bool:
        """Whether ``text`` is phrased as a change of an earlier statement: it matches ``update_cues``
        (always true with ``update_cues=None``). Such a statement may supersede a similar one."""
        cues: re.Pattern[str] | None = getattr(self, "_cues", None)
        return cues is None or cues.search(text) is not None
