"""Shared helpers: synthetic patterns, noisy queries, recall, CSV/PNG output, CLI."""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hopmem.memory import top_k_dot

DEFAULT_OUT = Path("results/experiments")

#: HeatherDB's documentation (the reference system): at d = 1024, beta = 5
#: keeps 90% recall only up to ~16 items; beta = 30 reaches the NN ceiling;
#: about d/32 items per pool (its overload threshold).
HEATHERDB_BETA5_D1024 = 16
CLASSICAL_HOPFIELD = 0.138  # capacity ~0.138 d of the classical (binary, Hebbian) network


# -- data ---------------------------------------------------------------------------------

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
    """``n`` unit vectors around ``clusters`` random centres.

    Each point is at angle ``spread`` (radians) from its centre, in a random
    direction. Returns ``(points, labels)``.
    """
    centres = random_patterns(clusters, dim, rng)
    labels = rng.integers(0, clusters, n)
    return perturb(centres[labels], spread, rng), labels


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


# -- summaries ------------------------------------------------------------------------------

def last_above(xs: Sequence[float], ys: Sequence[float], threshold: float,
               log: bool = False) -> float:
    """The x where ``y`` first falls below ``threshold``, interpolated.

    Walks ``xs`` in increasing order: returns the interpolated crossing between
    the last point at or above the threshold and the first below it (in log x
    when ``log``), ``inf`` when it never falls below, and ``nan`` when already
    the first point is below.
    """
    order = np.argsort(xs)
    xs = np.asarray(xs, dtype=float)[order]
    ys = np.asarray(ys, dtype=float)[order]
    if ys[0] < threshold:
        return float("nan")
    for i in range(1, len(xs)):
        if ys[i] < threshold:
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            t = (y0 - threshold) / (y0 - y1) if y0 != y1 else 0.0
            if log:
                return float(math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0))))
            return float(x0 + t * (x1 - x0))
    return float("inf")


def fmt_capacity(value: float, grid_max: float, grid_min: float | None = None) -> str:
    if math.isinf(value):
        return f">{grid_max:g}"
    if math.isnan(value):
        return f"<{grid_min:g}" if grid_min is not None else "n/a"
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


# -- output ---------------------------------------------------------------------------------

def write_csv(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    rows = list(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    return path


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows written by :func:`write_csv`, numbers parsed back (ints, then floats)."""
    def parse(v: str) -> Any:
        for kind in (int, float):
            try:
                return kind(v)
            except ValueError:
                pass
        return {"True": True, "False": False}.get(v, v)

    with open(path, newline="") as fh:
        return [{k: parse(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}" if math.isfinite(v) else str(v)
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def save_figure(fig: Any, path: Path, close: bool = True) -> Path:
    """Save as PNG (small: 80 dpi) and, by default, close the figure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80, bbox_inches="tight")
    if close:
        import matplotlib.pyplot as plt
        plt.close(fig)
    return path


def machine() -> str:
    """CPU model, logical cores and load average, in one line."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        load = "load average n/a"
    return (f"{model}, {os.cpu_count()} logical cores, {load}, "
            f"Python {platform.python_version()}, NumPy {np.__version__}")


# -- command line -------------------------------------------------------------------------

def cli(name: str, doc: str, argv: Sequence[str] | None,
        configure: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.experiments.{name}",
                                     description=doc.strip().splitlines()[0])
    if configure is not None:  # an experiment's own options
        configure(parser)
    parser.add_argument("--quick", action="store_true",
                        help="small configuration (under a minute on a laptop)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"output folder for CSV and PNG (default {DEFAULT_OUT}/)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser.parse_args(argv)


def run_main(name: str, doc: str, argv: Sequence[str] | None,
             body: Callable[[argparse.Namespace], None],
             configure: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    """Parse the CLI, pin BLAS to one thread, use the Agg backend, time the run."""
    args = cli(name, doc, argv, configure)
    import matplotlib
    matplotlib.use("Agg")
    from threadpoolctl import threadpool_limits

    start = time.perf_counter()
    with threadpool_limits(1):
        body(args)
    print(f"\n{name}: done in {time.perf_counter() - start:.1f} s on {machine()}", file=sys.stderr)
