"""Quantisation: the competitive location matrix against spherical k-means.

The same data is written into a competitive memory and clustered by
spherical k-means (k-means++ seeding, Lloyd iterations on the unit sphere)
with as many centroids as the memory ended with locations. Quality:

* quantisation error = mean over the data of 1 - max_j cos(x, centre_j),
  for the memory's addresses, its unit patterns, and the k-means centroids;
* unused locations = centers that are the nearest one to no data point.

When the memory ends with more than n/2 locations, k-means is skipped (nan,
unused -1): with a center for every other point it is trivially near zero.

Data (see :data:`DATASETS`): clustered points at a fixed angle around random
centers (tight and wide), and directions uniform on the sphere of a low
dimension (in high dimension uniform points are all mutually novel and each
spawns its own location, which leaves nothing to quantise). Swept over
tau_split, which sets how readily the memory spawns a location, and over
max_locations (unbounded, or a budget of twice the number of clusters, kept by
merging the closest pair).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hopmem import Memory
from hopmem.engine.memory import top_k_dot

from . import _common as C

#: name -> (dimension, clusters (0: uniform), angle of a point from its center in degrees)
DATASETS: dict[str, tuple[int, int, float]] = {
    "clustered-tight": (64, 32, 30.0),
    "clustered-wide": (64, 32, 50.0),
    "uniform-d8": (8, 0, float("nan")),
}

FULL = dict(n=10000, tau_splits=(0.3, 0.5, 0.7), bounds=(None, 64), datasets=tuple(DATASETS),
            kmeans_iters=30)
QUICK = dict(n=3000, tau_splits=(0.3, 0.5), bounds=(None, 64), datasets=tuple(DATASETS),
             kmeans_iters=15)
TINY = dict(n=400, tau_splits=(0.5,), bounds=(None,), datasets=("clustered-tight",), kmeans_iters=8)


def assign(centers: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest center (cosine; centers normalized here) and that cosine, for each row of X."""
    rows, scores = top_k_dot(C.unit_rows(centers), C.unit_rows(X), 1)
    return rows[:, 0], scores[:, 0].astype(np.float64)


def quantisation(centers: np.ndarray, X: np.ndarray) -> tuple[float, int]:
    """(mean 1 - max cos, number of centers nearest to no point)."""
    nearest, best = assign(centers, X)
    unused = len(centers) - len(np.unique(nearest))
    return float(np.mean(1.0 - best)), int(unused)


def spherical_kmeans(X: np.ndarray, k: int, iters: int = 30, seed: int = 0) -> np.ndarray:
    """Spherical k-means: greedy k-means++ seeding, Lloyd steps, unit centroids.

    Seeding is scikit-learn's greedy k-means++ on the squared chord distance
    2 (1 - cos): each step draws ``2 + ln k`` candidates and keeps the one that
    lowers the potential most. An empty cluster is re-seeded at the point
    worst served by the current centroids.
    """
    rng = np.random.default_rng(seed)
    X = C.unit_rows(X)
    n = len(X)
    k = min(k, n)
    trials = 2 + int(math.log(k)) if k > 1 else 1
    centers = np.empty((k, X.shape[1]), np.float32)
    centers[0] = X[rng.integers(n)]
    dist = np.clip(1.0 - X @ centers[0], 0, None).astype(np.float64)
    for j in range(1, k):
        total = dist.sum()
        if total <= 0:
            cand = rng.integers(n, size=1)
        else:
            cand = np.searchsorted(np.cumsum(dist), rng.random(trials) * total)
            cand = np.minimum(cand, n - 1)
        cand_dist = np.minimum(dist[None, :], np.clip(1.0 - X[cand] @ X.T, 0, None))
        best = int(np.argmin(cand_dist.sum(axis=1)))
        centers[j] = X[cand[best]]
        dist = cand_dist[best]
    for _ in range(iters):
        labels, best = assign(centers, X)
        sums = np.zeros((k, X.shape[1]), np.float64)
        np.add.at(sums, labels, X)
        counts = np.bincount(labels, minlength=k)
        order = np.argsort(best)  # worst-served points first, for empty clusters
        taken = 0
        for j in np.flatnonzero(counts == 0):
            sums[j] = X[order[taken]]
            taken += 1
        new = C.unit_rows(sums)
        if np.array_equal(new, centers):
            break
        centers = new
    return centers


def make_dataset(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if name not in DATASETS:
        raise ValueError(f"dataset: expected one of {tuple(DATASETS)}, got {name!r}")
    d, clusters, spread = DATASETS[name]
    if clusters:
        return C.clustered_patterns(n, d, clusters, math.radians(spread), rng)[0]
    return C.random_patterns(n, d, rng)


def compare(
    n: int = 10000,
    tau_splits: Sequence[float] = (0.3, 0.5, 0.7),
    bounds: Sequence[int | None] = (None, 64),
    datasets: Sequence[str] = tuple(DATASETS),
    kmeans_iters: int = 30,
    k: int = 20,
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """One row per (dataset, tau_split, bound): the memory's and k-means' quantisation."""
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(datasets) * len(tau_splits) * len(bounds), desc="quantization",
               disable=not progress)
    for dataset in datasets:
        rng = np.random.default_rng([seed, 11])
        X = make_dataset(dataset, n, rng)
        d, clusters, spread_deg = DATASETS[dataset]
        for tau_split, bound in ((t, b) for t in tau_splits for b in bounds):
            mem = Memory(d, mode="competitive", k=k, tau_split=tau_split,
                         tau_merge=max(0.95, tau_split + 0.01), max_locations=bound, seed=seed)
            mem.write(X)
            L = len(mem)
            qe_addr, unused_addr = quantisation(mem.addresses, X)
            qe_pat, unused_pat = quantisation(mem.patterns, X)
            if L <= n // 2:
                centers = spherical_kmeans(X, L, kmeans_iters, seed)
                qe_km, unused_km = quantisation(centers, X)
            else:  # as many centers as points: k-means is trivially ~0, nothing to compare
                qe_km, unused_km = float("nan"), -1
            rows.append(dict(
                dataset=dataset, d=d, n=n, clusters=clusters, spread_deg=spread_deg,
                tau_split=tau_split, max_locations=bound or "none", locations=L,
                points_per_location=n / L, writes=mem.stats().writes,
                qe_addresses=qe_addr, qe_patterns=qe_pat, qe_kmeans=qe_km,
                unused_addresses=unused_addr, unused_patterns=unused_pat, unused_kmeans=unused_km,
                qe_ratio_addresses_to_kmeans=qe_addr / qe_km if qe_km > 0 else float("nan"),
            ))
            bar.update()
    bar.close()
    return rows


def plot(rows: Sequence[dict[str, Any]], title: str = ""):
    """Quantisation error (bars) and unused fraction, per dataset and tau_split."""
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.0 * len(datasets), 3.6), squeeze=False)
    for j, dataset in enumerate(datasets):
        ax = axes[0][j]
        sel = [r for r in rows if r["dataset"] == dataset]
        x = np.arange(len(sel))
        w = 0.27
        for i, (key, label) in enumerate((("qe_addresses", "memory addresses"),
                                          ("qe_patterns", "memory unit patterns"),
                                          ("qe_kmeans", "spherical k-means"))):
            ax.bar(x + (i - 1) * w, [r[key] for r in sel], w, label=label)
        for xi, r in zip(x, sel):
            km = "skipped" if r["unused_kmeans"] < 0 else r["unused_kmeans"]
            ax.annotate(f"unused {r['unused_addresses']}/{r['locations']}\nk-means {km}",
                        (xi, max(r["qe_addresses"], r["qe_patterns"], r["qe_kmeans"])),
                        ha="center", va="bottom", fontsize=6)
        ax.set_xticks(x, [f"τ={r['tau_split']:g}\nmax={r['max_locations']}\nL={r['locations']}"
                          for r in sel], fontsize=6)
        ax.set_ylabel("mean 1 - max cos")
        ax.set_title(f"{dataset} (d={sel[0]['d']}, n={sel[0]['n']})", fontsize=9)
        ax.set_yscale("log")
        ax.margins(y=0.4)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title or "Quantisation: competitive locations vs spherical k-means (same L)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def _main(args) -> None:
    cfg = QUICK if args.quick else FULL
    rows = compare(**cfg, seed=args.seed, progress=not args.no_progress)
    C.write_csv(args.out / "quantization.csv", rows)
    C.save_figure(plot(rows), args.out / "quantization.png")
    print(C.markdown_table(rows, ["dataset", "tau_split", "max_locations", "locations",
                                  "points_per_location", "qe_addresses", "qe_patterns",
                                  "qe_kmeans", "qe_ratio_addresses_to_kmeans", "unused_addresses",
                                  "unused_patterns", "unused_kmeans"]))
    print(f"\nwrote into {args.out}: quantization.csv, quantization.png")


def main(argv: Sequence[str] | None = None) -> None:
    C.run_main("quantization", __doc__, argv, _main)


if __name__ == "__main__":
    main()
