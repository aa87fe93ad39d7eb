"""Synthetic unit vectors for the benchmarks: random and clustered directions, exact angles, cosines."""

from __future__ import annotations

import math

import numpy as np

from hopmem.engine.memory import top_k_dot


def unit_rows(X: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (float32, C-contiguous); zero rows stay zero."""
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=-1, keepdims=True)
    return np.ascontiguousarray(X / np.where(norms > 1e-12, norms, 1.0), dtype=np.float32)


def random_patterns(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` independent directions, uniform on the unit sphere of R^dim."""
    return unit_rows(rng.standard_normal((n, dim)))


def clustered_patterns(n: int, dim: int, clusters: int, spread: float,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` unit vectors around ``clusters`` random centers.

    Each point is at angle ``spread`` (radians) from its center, in a random
    direction. Returns ``(points, labels)``.
    """
    centers = random_patterns(clusters, dim, rng)
    labels = rng.integers(0, clusters, n)
    return perturb(centers[labels], spread, rng), labels


def perturb(X: np.ndarray, angle: float, rng: np.random.Generator) -> np.ndarray:
    """Each unit row of ``X`` rotated by exactly ``angle`` radians, in a random direction.

    ``q = cos(angle) x + sin(angle) u`` with ``u`` a random unit vector
    orthogonal to ``x``, so ``cos(q, x) = cos(angle)`` exactly (up to float32).
    """
    X = unit_rows(X).astype(np.float64)
    U = rng.standard_normal(X.shape)
    U -= np.sum(U * X, axis=1, keepdims=True) * X
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    return unit_rows(math.cos(angle) * X + math.sin(angle) * U)


def nearest_rows(stored_unit: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Row of the stored (unit) pattern nearest in cosine to each vector (exact scan)."""
    rows, _ = top_k_dot(stored_unit, unit_rows(vectors), 1)
    return rows[:, 0]


def cosines(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (n, d) arrays."""
    return np.sum(unit_rows(A).astype(np.float64) * unit_rows(B), axis=1)
