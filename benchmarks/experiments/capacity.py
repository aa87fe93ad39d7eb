"""Capacity: recall of stored patterns against the number stored.

Random unit patterns are written one after another; at each checkpoint a
sample of the stored patterns is queried with noise (each query is its
pattern rotated by a fixed angle in a random direction). A read succeeds when
the stored pattern nearest (cosine) to the reconstruction is the queried one.
The ceiling is brute-force nearest neighbour of the query itself. Swept over
dimension, mode (plain, competitive), beta and read strategy; the capacity at
90% recall is where the recall curve first falls below 0.9 (interpolated in
log N).

Writes do not depend on beta, so one memory per (d, mode) is written and read
through copies that differ only in beta.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from hopmem import Memory

from . import _common as C

FULL = dict(dims=(64, 128, 384, 1024), betas=(5.0, 10.0, 30.0, 100.0),
            sizes=tuple(2 ** i for i in range(3, 14)), queries=200, angles_deg=(30.0, 60.0))
QUICK = dict(dims=(64, 128, 384, 1024), betas=(5.0, 10.0, 30.0, 100.0),
             sizes=tuple(2 ** i for i in range(3, 11)), queries=40, angles_deg=(30.0, 60.0))
TINY = dict(dims=(64,), betas=(5.0, 100.0), sizes=(8, 32, 128), queries=32, angles_deg=(30.0,))


def recall_curves(
    dims: Sequence[int] = FULL["dims"],
    modes: Sequence[str] = ("plain", "competitive"),
    betas: Sequence[float] = FULL["betas"],
    sizes: Sequence[int] = FULL["sizes"],
    queries: int = 200,
    angles_deg: Sequence[float] = (30.0,),
    strategies: Sequence[str] = ("iterative", "fast"),
    k: int = 20,
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Recall (and the NN ceiling) at each number stored; one row per configuration."""
    sizes = sorted(int(n) for n in sizes)
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(dims) * len(modes) * len(sizes), desc="capacity", disable=not progress)
    for d in dims:
        for mode in modes:
            rng = np.random.default_rng([seed, d, 0 if mode == "plain" else 1])
            X = C.random_patterns(sizes[-1], d, rng)
            mem = Memory(d, mode=mode, k=k, beta=float(betas[0]), seed=seed)
            written = 0
            for n in sizes:
                mem.write(X[written:n])
                written = n
                idx = rng.choice(n, size=min(n, queries), replace=False)
                snap = mem.snapshot()
                readers = [Memory.from_config(dataclasses.replace(mem.config, beta=float(b)), snap)
                           for b in betas]
                for angle_deg in angles_deg:
                    Q = C.perturb(X[idx], math.radians(angle_deg), rng)
                    nn = float(np.mean(C.nearest_rows(X[:n], Q) == idx))
                    for beta, reader in zip(betas, readers):
                        for strategy in strategies:
                            R = reader.read(Q, strategy)
                            rows.append(dict(
                                d=d, mode=mode, beta=float(beta), strategy=strategy,
                                angle_deg=float(angle_deg), n_stored=n, locations=len(mem),
                                queries=len(idx),
                                recall=float(np.mean(C.nearest_rows(X[:n], R) == idx)),
                                nn_recall=nn,
                                mean_cos_target=float(np.mean(C.cosines(R, X[idx]))),
                            ))
                bar.update()
    bar.close()
    return rows


def capacity_table(rows: Sequence[dict[str, Any]], threshold: float = 0.9) -> list[dict[str, Any]]:
    """Capacity at ``threshold`` recall per (d, mode, beta, strategy), with the NN ceiling's.

    ``capacity`` is ``inf`` when recall never fell below the threshold in the
    grid (reported as ``>N_max``) and ``nan`` when already the smallest load
    was below. Competitive curves are not monotone (recall can be low at small
    loads and recover), so ``max_n_at_90`` also gives the largest load in the
    grid at which recall is at or above the threshold, whatever came before,
    and ``min_n_from_90`` the smallest load from which it stays there up to
    N_max ("none" if it does not end there). ``worst_ratio_to_nn`` is min over
    loads of recall / NN recall.
    """
    def key(r):
        return (r["angle_deg"], r["d"], r["mode"], r["beta"], r["strategy"])

    keys = sorted({key(r) for r in rows}, key=lambda t: (t[0], t[1], t[2] != "plain", t[3], t[4]))
    out = []
    for angle_deg, d, mode, beta, strategy in keys:
        sel = sorted((r for r in rows if key(r) == (angle_deg, d, mode, beta, strategy)),
                     key=lambda r: r["n_stored"])
        ns = [r["n_stored"] for r in sel]
        cap = C.last_above(ns, [r["recall"] for r in sel], threshold, log=True)
        nn_cap = C.last_above(ns, [r["nn_recall"] for r in sel], threshold, log=True)
        ratio = min(r["recall"] / r["nn_recall"] if r["nn_recall"] else 1.0 for r in sel)
        good = [r["recall"] >= threshold for r in sel]
        max_at = max((n for n, g in zip(ns, good) if g), default=None)
        from_at = None
        for n, g in zip(reversed(ns), reversed(good)):
            if not g:
                break
            from_at = n
        out.append(dict(
            angle_deg=angle_deg, d=d, mode=mode, beta=beta, strategy=strategy,
            capacity=cap, capacity_str=C.fmt_capacity(cap, ns[-1], ns[0]),
            nn_capacity=nn_cap, nn_capacity_str=C.fmt_capacity(nn_cap, ns[-1], ns[0]),
            recall_at_max=sel[-1]["recall"], nn_recall_at_max=sel[-1]["nn_recall"],
            max_n_at_90=max_at if max_at is not None else "none",
            min_n_from_90=from_at if from_at is not None else "none",
            worst_ratio_to_nn=ratio, n_max=ns[-1],
            classical_0138d=round(C.CLASSICAL_HOPFIELD * d, 1), pool_d_over_32=d / 32,
        ))
    return out


def capacity_at_90(d: int = 64, mode: str = "competitive", beta: float = 30.0,
                   strategy: str = "iterative", sizes: Sequence[int] = (8, 16, 32, 64, 128, 256, 512),
                   queries: int = 64, angle_deg: float = 30.0, seed: int = 0) -> float:
    """One capacity number (items stored at 90% recall); ``max(sizes)`` if never below."""
    rows = recall_curves(dims=(d,), modes=(mode,), betas=(beta,), sizes=sizes, queries=queries,
                         angles_deg=(angle_deg,), strategies=(strategy,), seed=seed, progress=False)
    cap = capacity_table(rows)[0]["capacity"]
    if math.isinf(cap):
        return float(max(sizes))
    return 0.0 if math.isnan(cap) else cap


def plot(rows: Sequence[dict[str, Any]], title: str = ""):
    """Recall against number stored: one column per d, one row per read strategy.

    ``rows`` should hold one query angle (filter first).
    """
    import matplotlib.pyplot as plt

    dims = sorted({r["d"] for r in rows})
    strategies = [s for s in ("iterative", "fast") if any(r["strategy"] == s for r in rows)]
    betas = sorted({r["beta"] for r in rows})
    modes = [m for m in ("plain", "competitive") if any(r["mode"] == m for r in rows)]
    colors = dict(zip(betas, plt.cm.viridis(np.linspace(0, 0.9, len(betas)))))
    styles = {"plain": "-", "competitive": "--"}
    fig, axes = plt.subplots(len(strategies), len(dims), figsize=(3.3 * len(dims), 2.8 * len(strategies)),
                             squeeze=False, sharey=True)
    for i, strategy in enumerate(strategies):
        for j, d in enumerate(dims):
            ax = axes[i][j]
            sub = [r for r in rows if r["d"] == d and r["strategy"] == strategy]
            for mode in modes:
                for beta in betas:
                    sel = sorted((r for r in sub if r["mode"] == mode and r["beta"] == beta),
                                 key=lambda r: r["n_stored"])
                    if sel:
                        ax.plot([r["n_stored"] for r in sel], [r["recall"] for r in sel],
                                styles[mode], color=colors[beta], marker=".", lw=1.2,
                                label=f"{mode} β={beta:g}")
            ceil = {}
            for r in sub:
                ceil[r["n_stored"]] = r["nn_recall"]
            ns = sorted(ceil)
            ax.plot(ns, [ceil[n] for n in ns], ":", color="k", lw=2, label="NN ceiling")
            ax.axvline(C.CLASSICAL_HOPFIELD * d, color="grey", lw=0.8, ls="-.")
            ax.axvline(d / 32, color="tab:red", lw=0.8, ls=":")
            if d == 1024:
                ax.plot([C.HEATHERDB_BETA5_D1024], [0.9], "rv", ms=7, label="HeatherDB β=5 (doc)")
            ax.axhline(0.9, color="grey", lw=0.5)
            ax.set_xscale("log", base=2)
            ax.set_ylim(-0.02, 1.05)
            ax.set_title(f"d={d}, {strategy}", fontsize=9)
            if i == len(strategies) - 1:
                ax.set_xlabel("patterns stored")
            if j == 0:
                ax.set_ylabel("recall")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    fig.suptitle(title or "Capacity (grey: 0.138 d classical; red dotted: d/32 per pool)", fontsize=10)
    fig.tight_layout()
    return fig


def compact_table(table: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (angle, d, mode, strategy), one column per beta.

    A cell is the capacity at 90% recall (first fall below 90%), then in
    brackets the load from which recall stays at or above 90% up to the
    largest load, when that differs; e.g. ``<8 (64+)``: below 90% at 8
    patterns, at or above from 64 patterns on; ``none``: never back above.
    """
    betas = sorted({t["beta"] for t in table})
    keys = list(dict.fromkeys((t["angle_deg"], t["d"], t["mode"], t["strategy"]) for t in table))
    out = []
    for angle, d, mode, strategy in keys:
        row: dict[str, Any] = {"query angle": f"{angle:g}°", "d": d, "mode": mode, "read": strategy}
        sel = {t["beta"]: t for t in table
               if (t["angle_deg"], t["d"], t["mode"], t["strategy"]) == (angle, d, mode, strategy)}
        for beta in betas:
            t = sel.get(beta)
            if t is None:
                row[f"β={beta:g}"] = ""
                continue
            cell = t["capacity_str"]
            if not math.isinf(t["capacity"]):
                cell += f" ({t['min_n_from_90']}+)" if t["min_n_from_90"] != "none" else " (none)"
            row[f"β={beta:g}"] = cell
        row["NN ceiling"] = next(iter(sel.values()))["nn_capacity_str"]
        out.append(row)
    return out


TABLE_COLUMNS = ["angle_deg", "d", "mode", "beta", "strategy", "capacity_str", "nn_capacity_str",
                 "min_n_from_90", "max_n_at_90", "recall_at_max", "nn_recall_at_max",
                 "worst_ratio_to_nn"]


def _main(args) -> None:
    cfg = QUICK if args.quick else FULL
    rows = recall_curves(**cfg, seed=args.seed, progress=not args.no_progress)
    table = capacity_table(rows)
    C.write_csv(args.out / "capacity.csv", rows)
    C.write_csv(args.out / "capacity_90.csv", table)
    written = ["capacity.csv", "capacity_90.csv"]
    for angle in cfg["angles_deg"]:
        sub = [r for r in rows if r["angle_deg"] == angle]
        fig = plot(sub, f"Capacity: recall vs patterns stored; query {angle:g}° from its pattern "
                        f"(cos {math.cos(math.radians(angle)):.2f}); grey: 0.138 d, red: d/32")
        name = f"capacity_{angle:g}deg.png"
        C.save_figure(fig, args.out / name)
        written.append(name)
    print("Capacity at 90% recall; in brackets: the load from which recall stays >= 90%\n")
    print(C.markdown_table(compact_table(table)))
    print()
    print(C.markdown_table(table, TABLE_COLUMNS))
    print(f"\nwrote into {args.out}: " + ", ".join(written))


def main(argv: Sequence[str] | None = None) -> None:
    C.run_main("capacity", __doc__, argv, _main)


if __name__ == "__main__":
    main()
