"""Corpus-mean centering.

Sentence embeddings share a large common component: uncentered, every text
scores near 1.0 against every other and a similarity stops carrying signal.
:class:`Centerer` learns the mean of a corpus of vectors and maps each vector
to ``(x - mean) / ||x - mean||``. The mean is kept as an exact running
``count`` and float64 ``sum``, so fitting in chunks gives the mean that fitting
everything at once gives (up to the rounding of a float64 sum).

Vectors prepared under one mean are not comparable with vectors prepared
under another; :attr:`Centerer.fingerprint` names the mean so that a store can
refuse a mix.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from hopmem.errors import DimensionMismatch, InvalidInput

__all__ = ["Centerer"]

_FORMAT = "hopmem.centerer"
_VERSION = 1


def _check_dim(dim: Any, name: str = "dim") -> int | None:
    if dim is None:
        return None
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise InvalidInput(f"{name}: expected a positive int or None, got {dim!r}")
    return int(dim)


def _as_rows(X: ArrayLike, name: str) -> tuple[np.ndarray, bool]:
    """Validate ``X`` as ``(d,)`` or ``(n, d)`` finite real numbers.

    Returns a float32 ``(n, d)`` view or copy (never the caller's buffer to
    write into) and whether the input was one vector.
    """
    try:
        array = np.asarray(X)
    except (TypeError, ValueError) as exc:  # ragged lists and the like
        raise InvalidInput(f"{name}: expected an array of numbers, got {type(X).__name__} ({exc})") from None
    if array.dtype.kind not in "biuf":
        raise InvalidInput(f"{name}: expected real numbers, got dtype {array.dtype}")
    if array.ndim not in (1, 2):
        raise InvalidInput(f"{name}: expected shape (d,) or (n, d), got shape {array.shape}")
    single = array.ndim == 1
    rows = array.reshape(1, -1) if single else array
    if rows.shape[1] == 0:
        raise InvalidInput(f"{name}: expected at least one component per vector, got shape {array.shape}")
    with np.errstate(over="ignore"):  # values beyond float32 become inf, refused below
        rows = rows.astype(np.float32, copy=False)
    if not np.isfinite(rows).all():
        raise InvalidInput(f"{name}: expected values finite as float32, got NaN or infinity")
    return rows, single


class Centerer:
    """Subtract a corpus mean, then scale each vector to unit length.

    scikit-learn style: :meth:`fit` or :meth:`partial_fit`, then
    :meth:`transform`. Once :meth:`freeze` is called the mean is fixed: vectors
    already stored depend on it.

    Parameters
    ----------
    dim : int or None, optional
        The vector dimension. ``None`` takes it from the first data fitted.

    Attributes
    ----------
    mean_ : numpy.ndarray or None
        The float32 mean, shape ``(dim,)``; ``None`` until something is fitted.
    n_samples_seen_ : int
        How many vectors the mean is over.

    Examples
    --------
    >>> import numpy as np
    >>> c = Centerer().fit(np.array([[1.0, 0.0], [3.0, 0.0]]))
    >>> c.mean_.tolist()
    [2.0, 0.0]
    >>> c.transform(np.array([4.0, 0.0])).tolist()
    [1.0, 0.0]
    """

    # mutable; equality compares state. (mypy rejects None for object's __hash__, but this is
    # the documented way to make instances unhashable.)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, dim: int | None = None) -> None:
        self._dim_arg = _check_dim(dim)
        self.dim: int | None = self._dim_arg
        self._sum: np.ndarray | None = None  # float64 accumulator
        self.n_samples_seen_: int = 0
        self.mean_: np.ndarray | None = None
        self._frozen = False

    # ------------------------------------------------------------------ fitting

    @property
    def frozen(self) -> bool:
        """Whether the mean is fixed (see :meth:`freeze`)."""
        return self._frozen

    @property
    def fitted(self) -> bool:
        """Whether a mean has been learned."""
        return self.mean_ is not None

    def freeze(self) -> Centerer:
        """Fix the mean: later :meth:`fit` and :meth:`partial_fit` raise.

        Returns
        -------
        Centerer
            ``self``.

        Raises
        ------
        InvalidInput
            If nothing has been fitted yet.
        """
        if not self.fitted:
            raise InvalidInput("freeze(): expected a fitted Centerer, got an unfitted one (fit it first)")
        self._frozen = True
        return self

    def _refuse_if_frozen(self, method: str) -> None:
        if self._frozen:
            raise InvalidInput(
                f"{method}(): expected an unfrozen Centerer, got a frozen one: its mean is fixed "
                "because stored vectors were prepared with it; create a new Centerer to learn another"
            )

    def _check_width(self, rows: np.ndarray, name: str) -> None:
        if self.dim is not None and rows.shape[1] != self.dim:
            raise DimensionMismatch(self.dim, rows.shape[1], name)

    def fit(self, X: ArrayLike) -> Centerer:
        """Learn the mean of ``X``, discarding anything learned before.

        Parameters
        ----------
        X : array_like, shape (n, d) or (d,)
            At least one finite vector; a 1-D array is one vector.

        Returns
        -------
        Centerer
            ``self``.

        Raises
        ------
        InvalidInput
            On a frozen centerer, empty or non-finite ``X``, or a dimension
            other than ``dim``.
        """
        self._refuse_if_frozen("fit")
        rows, _ = _as_rows(X, "X")
        if rows.shape[0] == 0:
            raise InvalidInput(f"X: expected at least one vector, got shape {rows.shape}")
        if self._dim_arg is not None and rows.shape[1] != self._dim_arg:
            raise DimensionMismatch(self._dim_arg, rows.shape[1], "X")
        self.dim = rows.shape[1]
        self._sum = None
        self.n_samples_seen_ = 0
        self.mean_ = None
        return self._accumulate(rows)

    def partial_fit(self, X: ArrayLike) -> Centerer:
        """Add the vectors in ``X`` to the running mean.

        Parameters
        ----------
        X : array_like, shape (n, d) or (d,)
            Finite vectors; ``n`` may be 0 (nothing changes).

        Returns
        -------
        Centerer
            ``self``.

        Raises
        ------
        InvalidInput
            On a frozen centerer, non-finite ``X``, or a dimension other than
            the one already fitted.
        """
        self._refuse_if_frozen("partial_fit")
        rows, _ = _as_rows(X, "X")
        self._check_width(rows, "X")
        if rows.shape[0] == 0:
            return self
        self.dim = rows.shape[1]
        return self._accumulate(rows)

    def _accumulate(self, rows: np.ndarray) -> Centerer:
        chunk_sum = rows.sum(axis=0, dtype=np.float64)
        self._sum = chunk_sum if self._sum is None else self._sum + chunk_sum
        self.n_samples_seen_ += rows.shape[0]
        self.mean_ = (self._sum / self.n_samples_seen_).astype(np.float32)
        return self

    # ----------------------------------------------------------------- applying

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Center and L2-normalize vectors.

        Parameters
        ----------
        X : array_like, shape (n, d) or (d,)
            Finite vectors of the fitted dimension. Never modified.

        Returns
        -------
        numpy.ndarray
            float32, C-contiguous, the shape of ``X``. Each row is
            ``(x - mean_) / ||x - mean_||``; a row equal to the mean stays
            all zeros.

        Raises
        ------
        InvalidInput
            If nothing is fitted, ``X`` is not finite, or its dimension differs.
        """
        if self.mean_ is None:
            raise InvalidInput("transform(): expected a fitted Centerer, got an unfitted one (call fit() or "
                               "partial_fit() first)")
        rows, single = _as_rows(X, "X")
        self._check_width(rows, "X")
        centered = rows - self.mean_  # a new array: the input is never written
        norms = np.sqrt(np.einsum("ij,ij->i", centered, centered, dtype=np.float64))
        nonzero = norms > 0.0
        centered[nonzero] /= norms[nonzero, None].astype(np.float32)
        out = np.ascontiguousarray(centered, dtype=np.float32)
        return out[0] if single else out

    def fit_transform(self, X: ArrayLike) -> np.ndarray:
        """:meth:`fit` on ``X``, then :meth:`transform` it."""
        return self.fit(X).transform(X)

    # ------------------------------------------------------------- identity, IO

    @property
    def fingerprint(self) -> str | None:
        """The first 16 hex characters of the sha256 of the mean's float32 bytes.

        ``None`` until fitted. Two centerers with the same fingerprint prepare
        vectors identically.
        """
        if self.mean_ is None:
            return None
        return hashlib.sha256(self.mean_.astype("<f4").tobytes()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe description that :meth:`from_dict` restores exactly.

        The mean (little-endian float32) and the running sum (float64) are
        base64 strings, so the round trip is bit-exact and partial fitting can
        continue after it.
        """

        def b64(array: np.ndarray | None, dtype: str) -> str | None:
            if array is None:
                return None
            return base64.b64encode(array.astype(dtype).tobytes()).decode("ascii")

        return {
            "format": _FORMAT,
            "version": _VERSION,
            "dim": self.dim,
            "fixed_dim": self._dim_arg is not None,
            "n_samples_seen": self.n_samples_seen_,
            "frozen": self._frozen,
            "mean_f32_b64": b64(self.mean_, "<f4"),
            "sum_f64_b64": b64(self._sum, "<f8"),
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Centerer:
        """Rebuild a centerer from :meth:`to_dict` output.

        Raises
        ------
        InvalidInput
            If ``data`` is not such a description or is inconsistent.
        """
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise InvalidInput(f"data: expected a dict from Centerer.to_dict() (format {_FORMAT!r}), got {data!r:.80}")
        if data.get("version") != _VERSION:
            raise InvalidInput(f"data['version']: expected {_VERSION}, got {data.get('version')!r}")
        try:
            dim = _check_dim(data["dim"], "data['dim']")
            count = data["n_samples_seen"]
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise InvalidInput(f"data['n_samples_seen']: expected an int >= 0, got {count!r}")
            centerer = cls(dim if data.get("fixed_dim") else None)
            centerer.dim = dim
            centerer.n_samples_seen_ = count
            if data["mean_f32_b64"] is not None:
                mean = np.frombuffer(base64.b64decode(data["mean_f32_b64"], validate=True), dtype="<f4")
                total = np.frombuffer(base64.b64decode(data["sum_f64_b64"], validate=True), dtype="<f8")
                if mean.shape != (dim,) or total.shape != (dim,) or count == 0:
                    raise InvalidInput(
                        f"data: expected consistent fields, got an inconsistent dict: dim {dim}, mean of "
                        f"{mean.size}, sum of {total.size}, count {count}"
                    )
                centerer.mean_ = mean.astype(np.float32)  # native byte order, writable
                centerer._sum = total.astype(np.float64)
            elif count:
                raise InvalidInput(f"data: expected a mean with n_samples_seen {count}, got none")
            centerer._frozen = bool(data.get("frozen", False))
        except KeyError as exc:
            raise InvalidInput(f"data: expected the key {exc.args[0]!r}, got a dict without it") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InvalidInput):
                raise
            raise InvalidInput(f"data: expected well-formed fields, got a malformed field ({exc})") from None
        expected = data.get("fingerprint")
        if expected is not None and expected != centerer.fingerprint:
            raise InvalidInput(f"data['fingerprint']: expected {centerer.fingerprint!r} (the mean's hash), "
                               f"got {expected!r}")
        return centerer

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Centerer):
            return NotImplemented
        if (self.dim, self.n_samples_seen_, self._frozen) != (other.dim, other.n_samples_seen_, other._frozen):
            return False
        if self.mean_ is None or other.mean_ is None:
            return self.mean_ is None and other.mean_ is None
        return self.mean_.tobytes() == other.mean_.tobytes()

    def __repr__(self) -> str:
        state = "unfitted" if self.mean_ is None else f"n_samples_seen={self.n_samples_seen_}"
        frozen = ", frozen" if self._frozen else ""
        return f"Centerer(dim={self.dim}, {state}{frozen})"
