"""Basins of attraction: recall against query noise, iterative vs fast read.

A fixed number of random unit patterns is stored; each query is a stored
pattern rotated by an angle theta in a random direction (cos(query, pattern)
= cos theta exactly). A read succeeds when the stored pattern nearest to the
reconstruction is the queried one; the ceiling is nearest neighbour of the
query itself. The basin radius is the largest angle at which recall stays at
or above 90% (interpolated). Also recorded: the mean cosine between the
reconstruction and its pattern, which shows what the iterative read cleans
up beyond the query.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hopmem import Memory

from . import _common as C

FULL = dict(dims=(128, 384), n_stored=1024, betas=(5.0, 10.0, 30.0, 100.0),
            angles_deg=tuple(range(0, 91, 5)), queries=300)
QUICK = dict(dims=(384,), n_stored=256, betas=(5.0, 30.0),
             angles_deg=tuple(range(0, 91, 10)), queries=60)
TINY = dict(dims=(64,), n_stored=32, betas=(30.0,), angles_deg=(0, 30, 60, 85), queries=32)


def basin_curves(
    dims: Sequence[int] = FULL["dims"],
    n_stored: int = 1024,
    modes: Sequence[str] = ("plain", "competitive"),
    betas: Sequence[float] = FULL["betas"],
    angles_deg: Sequence[float] = FULL["angles_deg"],
    queries: int = 300,
    strategies: Sequence[str] = ("iterative", "fast"),
    k: int = 20,
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Recall and mean cos(result, pattern) at each query angle; one row per configuration."""
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(dims) * len(modes) * len(angles_deg), desc="basins", disable=not progress)
    for d in dims:
        for mode in modes:
            rng = np.random.default_rng([seed, d, 0 if mode == "plain" else 1])
            X = C.random_patterns(n_stored, d, rng)
            mem = Memory(d, mode=mode, k=k, beta=float(betas[0]), seed=seed)
            mem.write(X)
            snap = mem.snapshot()
            readers = [Memory.from_config(dataclasses.replace(mem.config, beta=float(b)), snap)
                       for b in betas]
            idx = rng.choice(n_stored, size=min(n_stored, queries), replace=False)
            for angle in angles_deg:
                Q = C.perturb(X[idx], math.radians(angle), rng)
                nn = float(np.mean(C.nearest_rows(X, Q) == idx))
                for beta, reader in zip(betas, readers):
                    for strategy in strategies:
                        R = reader.read(Q, strategy)
                        rows.append(dict(
                            d=d, mode=mode, beta=float(beta), strategy=strategy,
                            n_stored=n_stored, locations=len(mem), angle_deg=float(angle),
                            query_cos=math.cos(math.radians(angle)), queries=len(idx),
                            recall=float(np.mean(C.nearest_rows(X, R) == idx)), nn_recall=nn,
                            mean_cos_target=float(np.mean(C.cosines(R, X[idx]))),
                        ))
                bar.update()
    bar.close()
    return rows


def radius_table(rows: Sequence[dict[str, Any]], threshold: float = 0.9) -> list[dict[str, Any]]:
    """Basin radius (degrees, and the query cosine there) per configuration, with the NN ceiling's."""
    def key(r):
        return (r["d"], r["mode"], r["beta"], r["strategy"])

    keys = sorted({key(r) for r in rows}, key=lambda t: (t[0], t[1] != "plain", t[2], t[3]))
    out = []
    for k in keys:
        sel = sorted((r for r in rows if key(r) == k), key=lambda r: r["angle_deg"])
        angles = [r["angle_deg"] for r in sel]
        radius = C.last_above(angles, [r["recall"] for r in sel], threshold)
        nn_radius = C.last_above(angles, [r["nn_recall"] for r in sel], threshold)

        def show(a: float) -> str:
            return C.fmt_capacity(a, angles[-1], angles[0]) if not math.isfinite(a) else f"{a:.1f}"

        out.append(dict(
            d=k[0], mode=k[1], beta=k[2], strategy=k[3], n_stored=sel[0]["n_stored"],
            radius_deg=radius, radius_str=show(radius),
            radius_cos=math.cos(math.radians(radius)) if math.isfinite(radius) else float("nan"),
            nn_radius_deg=nn_radius, nn_radius_str=show(nn_radius),
            cos_target_at_30deg=next((r["mean_cos_target"] for r in sel if r["angle_deg"] == 30), float("nan")),
        ))
    return out


def basin_radius(d: int = 128, n_stored: int = 128, mode: str = "plain", beta: float = 30.0,
                 strategy: str = "iterative", angles_deg: Sequence[float] = tuple(range(0, 91, 10)),
                 queries: int = 64, seed: int = 0) -> float:
    """One basin radius in degrees (the largest angle in the grid if recall never fell)."""
    rows = basin_curves(dims=(d,), n_stored=n_stored, modes=(mode,), betas=(beta,),
                        angles_deg=angles_deg, queries=queries, strategies=(strategy,), seed=seed,
                        progress=False)
    r = radius_table(rows)[0]["radius_deg"]
    if math.isinf(r):
        return float(max(angles_deg))
    return 0.0 if math.isnan(r) else r


def plot(rows: Sequence[dict[str, Any]], title: str = ""):
    """Recall (top) and cos(result, pattern) (bottom) against query angle, one column per (d, mode)."""
    import matplotlib.pyplot as plt

    panels = sorted({(r["d"], r["mode"]) for r in rows}, key=lambda t: (t[0], t[1] != "plain"))
    betas = sorted({r["beta"] for r in rows})
    colors = dict(zip(betas, plt.cm.viridis(np.linspace(0, 0.9, len(betas)))))
    styles = {"iterative": "-", "fast": "--"}
    fig, axes = plt.subplots(2, len(panels), figsize=(3.4 * len(panels), 5.4), squeeze=False,
                             sharex=True)
    for j, (d, mode) in enumerate(panels):
        sub = [r for r in rows if r["d"] == d and r["mode"] == mode]
        for beta in betas:
            for strategy in ("iterative", "fast"):
                sel = sorted((r for r in sub if r["beta"] == beta and r["strategy"] == strategy),
                             key=lambda r: r["angle_deg"])
                if not sel:
                    continue
                a = [r["angle_deg"] for r in sel]
                kw = dict(color=colors[beta], ls=styles[strategy], marker=".", lw=1.2,
                          label=f"β={beta:g} {strategy}")
                axes[0][j].plot(a, [r["recall"] for r in sel], **kw)
                axes[1][j].plot(a, [r["mean_cos_target"] for r in sel], **kw)
        ceil = {r["angle_deg"]: r["nn_recall"] for r in sub}
        a = sorted(ceil)
        axes[0][j].plot(a, [ceil[x] for x in a], ":", color="k", lw=2, label="NN ceiling")
        axes[1][j].plot(a, [math.cos(math.radians(x)) for x in a], ":", color="grey", lw=1.5,
                        label="query itself")
        axes[0][j].axhline(0.9, color="grey", lw=0.5)
        axes[0][j].set_title(f"d={d}, {mode}, {sub[0]['n_stored']} stored", fontsize=9)
        axes[1][j].set_xlabel("query angle from its pattern (degrees)")
        axes[0][j].set_ylim(-0.02, 1.05)
        axes[1][j].set_ylim(-0.02, 1.05)
    axes[0][0].set_ylabel("recall")
    axes[1][0].set_ylabel("mean cos(result, pattern)")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    h2, l2 = axes[1][-1].get_legend_handles_labels()
    handles.append(h2[-1])
    labels.append(l2[-1])
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    fig.suptitle(title or "Basins of attraction", fontsize=10)
    fig.tight_layout()
    return fig


def _main(args) -> None:
    cfg = QUICK if args.quick else FULL
    rows = basin_curves(**cfg, seed=args.seed, progress=not args.no_progress)
    table = radius_table(rows)
    C.write_csv(args.out / "basins.csv", rows)
    C.write_csv(args.out / "basins_radius.csv", table)
    C.save_figure(plot(rows, "Basins: recall vs query noise, iterative (solid) vs fast (dashed)"),
                  args.out / "basins.png")
    print(C.markdown_table(table, ["d", "mode", "beta", "strategy", "n_stored", "radius_str",
                                   "radius_cos", "nn_radius_str", "cos_target_at_30deg"]))
    print(f"\nwrote into {args.out}: basins.csv, basins_radius.csv, basins.png")


def main(argv: Sequence[str] | None = None) -> None:
    C.run_main("basins", __doc__, argv, _main)


if __name__ == "__main__":
    main()
