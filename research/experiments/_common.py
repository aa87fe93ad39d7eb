"""Shared helpers of the experiments: summaries, the command line; the data and output helpers they use as ``C.x``.

The synthetic vectors (:mod:`benchmarks.vectors`) and the CSV, table and
figure writers (:mod:`benchmarks.report`) are the benchmarks' own, shared with
``benchmarks/peers.py``; they are imported here so that an experiment reads
``C.perturb`` or ``C.write_csv`` whichever module holds it.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from benchmarks.report import machine, markdown_table, read_csv, save_figure, write_csv  # noqa: F401
from benchmarks.vectors import clustered_patterns, cosines, nearest_rows, perturb, random_patterns, unit_rows  # noqa: F401

DEFAULT_OUT = Path("results/experiments")

#: HeatherDB's documentation (the reference system): at d = 1024, beta = 5
#: keeps 90% recall only up to ~16 items; beta = 30 reaches the NN ceiling;
#: about d/32 items per pool (its overload threshold).
HEATHERDB_BETA5_D1024 = 16
CLASSICAL_HOPFIELD = 0.138  # capacity ~0.138 d of the classical (binary, Hebbian) network


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


# -- command line -------------------------------------------------------------------------

def cli(name: str, doc: str, argv: Sequence[str] | None,
        configure: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m research.experiments.{name}",
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
