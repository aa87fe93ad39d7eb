"""Deprecation helpers: old names keep working for one release, with a warning.

Every renamed keyword, class, function or constant goes through these helpers,
so the warnings read alike and one place says when the old names go away.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import sys
import types
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


#: Modules moved in 0.2 (the layers: :mod:`hopmem.engine`, :mod:`hopmem.text`), by their 0.1 paths.
MOVED_MODULES: dict[str, str] = {
    "hopmem.memory": "hopmem.engine.memory",
    "hopmem.config": "hopmem.engine.config",
    "hopmem.functional": "hopmem.engine.functional",
    "hopmem.threads": "hopmem.engine.threads",
    "hopmem.encoders": "hopmem.text.encoders",
    "hopmem.onnx_export": "hopmem.text.onnx_export",
    "hopmem.centering": "hopmem.text.centering",
    "hopmem.gates": "hopmem.text.gates",
    "hopmem.recall": "hopmem.text.recall",
    "hopmem.model_files": "hopmem.text.model_files",
    "hopmem.resolution": "hopmem.store.resolution",
    "hopmem.mcp_server": "hopmem.server.mcp",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a moved module under its old path (the same module object), with a ``DeprecationWarning``."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        new = MOVED_MODULES[spec.name]
        warn_deprecated(f"module {spec.name}", new, stacklevel=_importer_stacklevel())
        return importlib.import_module(new)

    def exec_module(self, module: types.ModuleType) -> None:
        """The module was executed under its new name."""


_IMPORT_MACHINERY = (importlib.__file__.rsplit("/", 1)[0], __file__, __file__.rsplit("/", 1)[0] + "/__init__.py")


def _importer_stacklevel() -> int:
    """The ``stacklevel`` (for :func:`warn_deprecated`, called from the caller of this function) of the first
    frame outside the import machinery: the user's ``import`` statement or attribute access. Frames of
    importlib's bootstrap are not counted (:func:`warnings.warn` skips them itself)."""
    here = inspect.currentframe()
    frame, level = here.f_back.f_back if here and here.f_back else None, 3  # the caller of our caller
    while frame is not None and frame.f_code.co_filename.startswith(("<frozen importlib", *_IMPORT_MACHINERY)):
        if not ("importlib" in frame.f_code.co_filename and "_bootstrap" in frame.f_code.co_filename):
            level += 1
        frame = frame.f_back
    return level


def install_moved_modules() -> None:
    """Let ``import hopmem.memory`` (and the other 0.2 paths) keep working until 0.3."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())


def moved_module(package: str, name: str) -> types.ModuleType | None:
    """The moved module ``package.name`` for a package's ``__getattr__`` (``hopmem.memory`` as an attribute)."""
    old = f"{package}.{name}"
    return importlib.import_module(old) if old in MOVED_MODULES else None
