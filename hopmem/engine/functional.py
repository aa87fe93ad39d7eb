"""The modern Hopfield update as a function on your own arrays.

:func:`hopfield` runs the retrieval update of a modern (continuous) Hopfield
network, Ramsauer et al. (2020), "Hopfield Networks is All You Need"::

    xi <- X^T softmax(beta X xi)

for stored patterns ``X`` (one per row) and one or more states ``xi``, with the
kernel that serves a full-activation :class:`~hopmem.Memory` read: one pass
over the patterns a step (scores, softmax and read-out in the same stream, an
online softmax), no copy of the patterns and nothing the size of ``X``
allocated. It is what the ten lines of NumPy compute::

    def update(X, xi, beta, steps=1):
        for _ in range(steps):
            s = beta * (X @ xi)
            p = np.exp(s - s.max())
            xi = X.T @ (p / p.sum())
        return xi

Unlike a :class:`~hopmem.Memory` read (which works on the unit sphere: unit
queries, cosine scores, a normalized state), this is the textbook update on
the raw vectors: nothing is normalized.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import InvalidInput
from .memory import as_vectors

__all__ = ["hopfield"]


def _native() -> Any:
    """The compiled kernel, imported on first use (``import hopmem`` works without it)."""
    global _KERNEL
    if _KERNEL is None:
        from . import _kernel as kernel
        _KERNEL = kernel
    return _KERNEL


_KERNEL: Any = None


def _patterns(value: Any) -> np.ndarray:
    if (type(value) is np.ndarray and value.dtype == np.float32 and value.ndim == 2
            and value.flags.c_contiguous and value.flags.aligned
            and value.dtype.isnative and value.shape[0] > 0 and value.shape[1] > 0):
        return value  # the caller's array, read in place
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(
                f"patterns: expected an array of numbers, got {type(value).__name__}") from exc
    if arr.dtype.kind not in "fiub":
        what = "complex" if arr.dtype.kind == "c" else f"dtype {arr.dtype}"
        raise InvalidInput(f"patterns: expected real numbers, got {what}")
    if arr.ndim != 2:
        raise InvalidInput(f"patterns: expected shape (n, d), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InvalidInput(f"patterns: expected at least one row of at least one value, "
                           f"got shape {arr.shape}")
    with np.errstate(over="ignore"):  # too large for float32: reported after the update
        return np.ascontiguousarray(arr, dtype=np.float32)


def _real(name: str, value: Any, minimum: float, strict: bool) -> float:
    if type(value) is float and math.isfinite(value) and value > minimum:
        return value  # the common argument, checked in one line
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidInput(f"{name}: expected a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < minimum or (strict and v == minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise InvalidInput(f"{name}: expected a finite number {bound}, got {value!r}")
    return v


def hopfield(patterns: Any, queries: Any, beta: float, *, steps: int = 1,
             epsilon: float = 0.0) -> npt.NDArray[np.float32]:
    r"""The modern Hopfield update ``xi <- X^T softmax(beta X xi)`` on your arrays.

    Parameters
    ----------
    patterns:
        The stored patterns ``X``, shape ``(n, d)``, one per row. A C-contiguous
        float32 array is read in place (never copied, never written); anything
        else (another dtype, a transposed or strided view, a list) is first
        converted to one, which copies it.
    queries:
        The initial states ``xi``: one ``(d,)`` or a batch ``(m, d)``, finite.
        Never written to.
    beta:
        The inverse temperature, a finite number > 0.
    steps:
        Updates to run at most (>= 1). One step is the usual retrieval (for
        well-separated patterns it already lands on the fixed point).
    epsilon:
        Stop a query early once an update moves it by at most ``epsilon`` times
        its size, ``|xi' - xi| <= epsilon |xi'|`` (0: always run ``steps``).

    Returns
    -------
    The states after the update, float32, shaped like ``queries``.

    Each step is

    .. math:: \xi \leftarrow X^\top \operatorname{softmax}(\beta X \xi)

    computed in one pass over ``X``: the scores ``X xi`` are float32 dot
    products (the state rounded to float32, as float32 NumPy computes them);
    each tile of 16 rows, while in cache, raises the running maximum logit
    and adds its weighted rows (float32 products summed over the tile) to a
    float64 sum, rescaled whenever the maximum rises (an online softmax);
    blocks of 128 rows are merged in order. The result does not
    depend on the number of threads (:func:`hopmem.set_threads`); four queries
    of a batch share each pass. ``docs/hopfield.md`` states the error bound
    against a float64 evaluation, which the tests enforce.

    Raises
    ------
    InvalidInput
        A bad argument, named in the message (``"name: expected ..., got
        ..."``), or non-finite values: a NaN or infinity in the patterns, or
        dot products beyond float32's range (scale the inputs).
    DimensionMismatch
        The queries' dimension differs from the patterns'.
    """
    kernel = _native()
    X = _patterns(patterns)
    if (type(queries) is np.ndarray and queries.ndim == 2 and queries.dtype == np.float32
            and queries.shape[1] == X.shape[1] and queries.shape[0] > 0
            and queries.flags.c_contiguous and queries.flags.aligned
            and queries.dtype.isnative and kernel.all_finite(queries.reshape(-1))):
        Q, single = queries, False  # a batch as the kernel takes it: nothing to convert
    else:
        Q, single = as_vectors(queries, X.shape[1], "queries")
    b = _real("beta", beta, 0.0, strict=True)
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise InvalidInput(f"steps: expected an integer >= 1, got {steps!r}")
    eps = _real("epsilon", epsilon, 0.0, strict=False)
    out, _ = kernel.hopfield(X, Q, b, int(steps), eps)
    if not kernel.all_finite(out.reshape(-1)):
        # Non-finite patterns always make the update non-finite, so their check
        # waits until here: a finite update costs no pass over X for it.
        flat = X.reshape(-1)
        if not kernel.all_finite(flat):
            r, c = np.argwhere(~np.isfinite(X))[0]
            raise InvalidInput(
                f"patterns[{r}, {c}]: expected a finite float32 value, got {X[r, c]!r}")
        raise InvalidInput("queries: expected dot products with the patterns within float32 "
                           "range, got an overflow (scale the patterns or the queries)")
    return out[0] if single else out
