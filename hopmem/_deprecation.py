"""Deprecation helpers: old names keep working for one release, with a warning.

Every renamed keyword, class, function or constant goes through these helpers,
so the warnings read alike and one place says when the old names go away.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

#: The release in which the names deprecated in 0.2 are removed.
REMOVED_IN = "0.3"


def warn_deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new``.

    ``stacklevel`` counts from the caller of this function (3 points at the
    user's line when called from a public function's body).
    """
    warnings.warn(f"{old} is deprecated and will be removed in hopmem {REMOVED_IN}; use {new}",
                  DeprecationWarning, stacklevel=stacklevel)


def rename_keywords(where: str, kwargs: dict[str, Any], renames: Mapping[str, str], *,
                    stacklevel: int = 4) -> dict[str, Any]:
    """Return ``kwargs`` with deprecated keyword names replaced by their new names.

    ``where`` names the function for the message (``"Collection.resolve"``).
    Passing both an old name and its new name is a ``TypeError``, as Python
    raises for any keyword given twice.
    """
    out = dict(kwargs)
    for old, new in renames.items():
        if old in out:
            if new in out:
                raise TypeError(f"{where}() got both {old!r} (deprecated) and {new!r}")
            warn_deprecated(f"{where}({old}=...)", f"{where}({new}=...)", stacklevel=stacklevel)
            out[new] = out.pop(old)
    return out


def positional_to_keywords(where: str, args: tuple[Any, ...], names: tuple[str, ...], kwargs: dict[str, Any], *,
                           stacklevel: int = 4) -> dict[str, Any]:
    """Map extra positional arguments that used to be allowed onto their keyword names, with a warning.

    For a signature that became keyword-only after some point: the function
    takes ``*args`` there and passes them here with the names they had.
    """
    if not args:
        return kwargs
    if len(args) > len(names):
        raise TypeError(f"{where}() takes at most {len(names)} extra positional arguments "
                        f"({', '.join(names)}), got {len(args)}")
    out = dict(kwargs)
    for name, value in zip(names, args):
        if name in out:
            raise TypeError(f"{where}() got multiple values for argument {name!r}")
        out[name] = value
    given = ", ".join(names[: len(args)])
    warnings.warn(f"passing {given} to {where}() by position is deprecated and will be an error in hopmem "
                  f"{REMOVED_IN}; pass {given} by keyword", DeprecationWarning, stacklevel=stacklevel - 1)
    return out


def module_aliases(module: str, aliases: Mapping[str, tuple[str, Callable[[], Any]]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that serves deprecated names.

    ``aliases`` maps an old name to ``(new name, a function returning the object)``::

        __getattr__ = module_aliases(__name__, {"Hit": ("RecallHit", lambda: RecallHit)})
    """

    def __getattr__(name: str) -> Any:
        if name in aliases:
            new, get = aliases[name]
            warn_deprecated(f"{module}.{name}", f"{module}.{new}", stacklevel=3)
            return get()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
