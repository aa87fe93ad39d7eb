"""Provenance for the fitted files hopmem ships, shared by the build tools that write and check them.

A fitted file carries, beside what was fitted, where it came from: the
``command`` that refits it, the ``commit`` it was fitted at, and ``data``, a
SHA-256 over the files it was fitted on. ``--check`` compares a refit with
the shipped file except the commit: the refit is rendered with the shipped
commit (:func:`check_text`), so a check at a later commit still passes while
nothing else changed.

Equal means the same text, or (:func:`compare`) the same keys, strings and
list lengths with every number within the tolerance of the floats a text
encoder produces: torch's and onnxruntime's last bits depend on the CPU's
kernels and on how texts were batched, so a byte-for-byte check would pass or
fail by machine. A number that both files write with at most four decimals
was rounded and may differ by one unit of its last decimal (alone); any
other by a relative 1e-3 of itself or, in a list of numbers, of the list's
largest magnitude (a fitted weight near zero moves by more than 1e-3 of
itself when the encoder's last bits do, but not by 1e-3 of the vector it
belongs to), or by an absolute 1e-5. A stale fit moves its numbers by far
more. A ``--write`` whose refit is equal keeps the shipped file as it is
(:func:`refit_text`), so the commit names where the fit was made.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from collections.abc import Callable, Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

__all__ = ["check_text", "compare", "data_hash", "head_commit", "refit_text"]

#: A number written with more decimals than this was not rounded by the fit.
ROUNDED_DECIMALS = 4
REL_TOL = 1e-3
ABS_TOL = 1e-5


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


def refit_text(render: Callable[[str], str], shipped: str | None, shipped_commit: str | None, *,
               decode: Callable[[str], str] | None = None) -> str:
    """The file a refit writes: the shipped file when the refit equals it (:func:`compare`, with ``decode``),
    else ``render(commit)`` at the checkout's commit."""
    if (shipped is not None and shipped_commit is not None
            and compare(shipped, render(shipped_commit), decode=decode)[0]):
        return shipped
    return render(head_commit())


def check_text(render: Callable[[str], str], shipped_commit: str | None) -> str:
    """The refit as ``--check`` compares it with the shipped file: rendered with the shipped commit."""
    return render(shipped_commit or "")


def compare(shipped: str, refit: str, *, decode: Callable[[str], str] | None = None) -> tuple[bool, str]:
    """Whether ``refit`` equals ``shipped`` (see the module's docstring), and how: ``"byte for byte"``,
    ``"within tolerance (largest difference ... at ...)"`` or where they first differ.

    ``decode`` turns a file's text into the JSON compared when the two are not the same bytes: a file that
    stores numbers as bytes (base64) decodes them into lists, and leaves out what hashes those bytes.
    """
    if refit == shipped:
        return True, "byte for byte"
    if decode is not None:
        shipped, refit = decode(shipped), decode(refit)
    worst = [0.0, ""]

    def number(x: Any) -> bool:
        return isinstance(x, (Decimal, int)) and type(x) is not bool

    def walk(a: Any, b: Any, at: str, scale: float = 0.0) -> str | None:
        if isinstance(a, dict) and isinstance(b, dict):
            if list(a) != list(b):
                return f"{at or 'the top'}: keys {sorted(a)} against {sorted(b)}"
            return next((d for k in a if (d := walk(a[k], b[k], f"{at}.{k}"))), None)
        if isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                return f"{at}: {len(a)} items against {len(b)}"
            # the shipped list's scale: its numbers are compared at it (0.0 for a list that holds other things)
            scale = max((abs(float(x)) for x in a), default=0.0) if all(map(number, a)) else 0.0
            return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := walk(x, y, f"{at}[{i}]", scale))),
                        None)
        if number(a) and number(b):
            # both written short: rounded by the fit, to the finer of the two (4.22 is 4.220 rounded)
            decimals = max(-n.as_tuple().exponent if isinstance(n, Decimal) else 0 for n in (a, b))
            unit = 10.0 ** -decimals if 0 < decimals <= ROUNDED_DECIMALS else 0.0
            x, y = float(a), float(b)
            close = (abs(x - y) <= unit * 1.0001 if unit
                     else math.isclose(x, y, rel_tol=REL_TOL, abs_tol=max(ABS_TOL, REL_TOL * scale)))
            if not close:
                return f"{at}: {a} shipped, {b} refit"
            if abs(x - y) > worst[0]:
                worst[:] = [abs(x - y), at]
            return None
        return None if a == b and type(a) is type(b) else f"{at}: {a!r} shipped, {b!r} refit"

    parse = {"parse_float": Decimal}
    differs = walk(json.loads(shipped, **parse), json.loads(refit, **parse), "")
    if differs:
        return False, f"differs at {differs}"
    if not worst[1]:
        return True, "equal but for formatting"
    return True, f"within tolerance (largest difference {worst[0]:.2g} at {worst[1]})"
