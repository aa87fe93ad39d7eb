"""Argument checks shared by the agent memory's operations: identities, durations, the clock.

Scoping fails closed: a namespace or session id that an operation needs and
does not get raises :class:`MissingIdentity`, never a silent widening of scope.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable
from typing import Any, Literal, overload

from ..errors import HopmemError, InvalidInput

__all__ = ["MissingIdentity", "identity", "statement", "seconds", "now_checked"]


class MissingIdentity(HopmemError, ValueError):
    """A namespace or session id that scoping needs is missing: the call fails closed."""


def now_checked(clock: Callable[[], float]) -> float:
    """The clock's time, refused unless it is finite seconds."""
    value = clock()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"clock: expected a callable returning finite seconds, got {value!r}")
    return float(value)


def seconds(value: Any, name: str) -> float | None:
    """A positive duration in seconds from seconds or a :class:`datetime.timedelta` (None passes)."""
    if value is None:
        return None
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidInput(f"{name}: expected seconds > 0 (or a timedelta), got {value!r}")
    return float(value)


def timestamp(value: Any, name: str) -> float | None:
    """A clock time in finite seconds (None passes)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"{name}: expected finite seconds on the memory's clock, got {value!r}")
    return float(value)


@overload
def identity(value: Any, name: str, *, required: Literal[True]) -> str: ...
@overload
def identity(value: Any, name: str, *, required: bool) -> str | None: ...
def identity(value: Any, name: str, *, required: bool) -> str | None:
    """A namespace or session id: a non-empty string of at most 256 characters, or None when optional."""
    if value is None:
        if required:
            raise MissingIdentity(f"{name} is required: scoping fails closed without it")
        return None
    if not isinstance(value, str) or not value.strip():
        raise MissingIdentity(f"{name}: expected a non-empty string, got {value!r}")
    if len(value) > 256:
        raise InvalidInput(f"{name}: expected at most 256 characters, got {len(value)}")
    return value


def statement(text: Any) -> str:
    """A statement or query: a string with something besides whitespace, returned stripped."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"text: expected a non-empty string, got {text!r:.80}")
    return text.strip()
