"""Provenance for the fitted files hopmem ships, shared by the build tools that write and check them.

A fitted file carries, beside what was fitted, where it came from: the
``command`` that refits it, the ``commit`` it was fitted at, and ``data``, a
SHA-256 over the files it was fitted on. ``--check`` compares a refit with
the shipped file byte for byte except the commit: the refit is rendered with
the shipped commit (:func:`check_text`), so a check at a later commit still
passes while nothing else changed; a ``--write`` that changes nothing keeps
the shipped commit too (:func:`refit_text`), so the commit names where the
fit was made.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["check_text", "data_hash", "head_commit", "refit_text"]


def data_hash(paths: Iterable[Path]) -> str:
    """``sha256:`` and the hex digest over each file's name, a NUL byte and its bytes, in the order given."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return "sha256:" + digest.hexdigest()


def head_commit() -> str:
    """The checkout's commit, abbreviated."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def refit_text(render: Callable[[str], str], shipped: str | None, shipped_commit: str | None) -> str:
    """The file a refit writes, ``render(commit)``: with the shipped commit when that reproduces the shipped
    text (the fit did not change), else with the checkout's commit."""
    if shipped is not None and shipped_commit is not None:
        text = render(shipped_commit)
        if text == shipped:
            return text
    return render(head_commit())


def check_text(render: Callable[[str], str], shipped_commit: str | None) -> str:
    """The refit as ``--check`` compares it with the shipped file: rendered with the shipped commit."""
    return render(shipped_commit or "")
