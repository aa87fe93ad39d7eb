"""A decorator that keeps a function's previous calls working while its signature moves on.

It wraps :func:`hopmem._deprecation.rename_keywords` and
:func:`hopmem._deprecation.positional_to_keywords` around a function whose
signature already is the new one, so ``inspect.signature``, the docs and type
checkers see only the new names, and old calls still run, with a
``DeprecationWarning`` pointing at the caller's line.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ._deprecation import positional_to_keywords, rename_keywords

__all__ = ["deprecated_arguments"]

_F = TypeVar("_F", bound=Callable[..., Any])


def deprecated_arguments(where: str, renames: Mapping[str, str] | None = None, *,
                         positional: tuple[str, ...] = ()) -> Callable[[_F], _F]:
    """Accept the previous calls of the decorated function, with a warning.

    ``renames`` maps old keyword names to the new ones. ``positional`` names,
    in order, arguments that used to be accepted by position after the
    function's positional parameters and are now keyword-only.
    """
    renamed = dict(renames or {})

    def decorate(func: _F) -> _F:
        takes = sum(1 for p in inspect.signature(func).parameters.values()
                    if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                  inspect.Parameter.POSITIONAL_OR_KEYWORD))

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if positional and len(args) > takes:
                kwargs = positional_to_keywords(where, args[takes:], positional, kwargs)
                args = args[:takes]
            if renamed and not renamed.keys().isdisjoint(kwargs):
                kwargs = rename_keywords(where, kwargs, renamed)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
