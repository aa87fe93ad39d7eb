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

Where it breaks (``--grid theory``): the engine's grid above never sees plain
mode fail. The second grid goes to small dimensions (16, 32, 64) and loads up
to 2^17 patterns, with every pattern activated (``k`` = all: the modern
Hopfield update ``xi <- X^T softmax(beta X xi)``, streamed by the kernel)
beside the engine's top-20 activation, queries at 0 and 30 degrees from their
pattern, and sets the measured capacity beside the storage capacity of modern
Hopfield networks (Ramsauer et al. 2020, Theorem 3: ``theorem_capacity``) and
the classical 0.138 d. docs/hopfield.md shows the table and the plot.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hopmem import Memory

from . import _common as C

FULL = dict(dims=(64, 128, 384, 1024), betas=(5.0, 10.0, 30.0, 100.0),
            sizes=tuple(2 ** i for i in range(3, 14)), queries=200, angles_deg=(30.0, 60.0))
QUICK = dict(dims=(64, 128, 384, 1024), betas=(5.0, 10.0, 30.0, 100.0),
             sizes=tuple(2 ** i for i in range(3, 11)), queries=40, angles_deg=(30.0, 60.0))
TINY = dict(dims=(64,), betas=(5.0, 100.0), sizes=(8, 32, 128), queries=32, angles_deg=(30.0,))

# Where plain mode breaks: small d, large loads, full activation (k = ALL) and top-20.
ALL = 0  # k = 0 in a grid: every pattern activated (k = the largest load)
# "Retrieved": the reconstruction lies within cos 0.99 (8.1 degrees) of its pattern,
# the theorem's sense of a pattern stored (a fixed point near it), stricter than
# recall (the nearest stored pattern is the right one).
RETRIEVED = 0.99
THEORY_FULL = dict(dims=(16, 32, 64), betas=(5.0, 10.0, 30.0, 100.0, 1000.0),
                   sizes=tuple(2 ** i for i in range(3, 18)), queries=200,
                   angles_deg=(0.0, 30.0), ks=(ALL, 20), modes=("plain",))
THEORY_QUICK = dict(dims=(16, 32), betas=(10.0, 100.0, 1000.0),
                    sizes=tuple(2 ** i for i in range(3, 13)), queries=48,
                    angles_deg=(0.0, 30.0), ks=(ALL, 20), modes=("plain",))
THEORY_TINY = dict(dims=(16,), betas=(10.0, 1000.0), sizes=(8, 64, 512, 2048), queries=24,
                   angles_deg=(0.0,), ks=(ALL,), modes=("plain",))


def theorem_capacity(d: int, beta: float, p: float = 0.001) -> float:
    """Patterns a modern Hopfield network stores by Ramsauer et al. (2020), Theorem 3.

    The theorem: for N random patterns on the sphere of radius M = K sqrt(d - 1)
    and failure probability p, with a = 2 / (d - 1) (1 + ln(2 beta K^2 p (d - 1))),
    b = 2 K^2 beta / 5 and c = b / W0(exp(a + ln b)) (W0: the upper branch of
    Lambert's W), provided c >= (2 / sqrt(p))^(4 / (d - 1)), with probability
    1 - p every pattern has a fixed point near it, and N >= sqrt(p) c^((d - 1) / 4)
    of them can be stored: exponential in d.

    Here patterns are unit vectors and scores are cosines times ``beta``, which
    is the theorem's update with beta_theorem K^2 (d - 1) = beta, so
    K^2 beta_theorem = beta / (d - 1). Returns the bound, or ``nan`` where the
    theorem's condition on c fails (it then says nothing).
    """
    from scipy.special import lambertw

    k2b = beta / (d - 1)
    a = 2.0 / (d - 1) * (1.0 + math.log(2.0 * k2b * p * (d - 1)))
    b = 2.0 * k2b / 5.0
    c = b / float(lambertw(math.exp(a + math.log(b))).real)
    if c < (2.0 / math.sqrt(p)) ** (4.0 / (d - 1)):
        return float("nan")
    return math.sqrt(p) * c ** ((d - 1) / 4.0)


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
    ks: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """Recall (and the NN ceiling) at each number stored; one row per configuration.

    ``ks``: activation sizes to read with (``ALL``: every pattern; default
    ``(k,)``). Competitive memories are read with top-k activation only.
    """
    sizes = sorted(int(n) for n in sizes)
    ks = tuple(ks) if ks is not None else (k,)
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(dims) * len(modes) * len(sizes), desc="capacity", disable=not progress)
    for d in dims:
        for mode in modes:
            rng = np.random.default_rng([seed, d, 0 if mode == "plain" else 1])
            X = C.random_patterns(sizes[-1], d, rng)
            mode_ks = [kk for kk in ks if kk != ALL or mode == "plain"] or [k]
            mem = Memory(d, mode=mode, k=mode_ks[0] or sizes[-1], beta=float(betas[0]),
                         seed=seed)
            written = 0
            for n in sizes:
                mem.write(X[written:n])
                written = n
                idx = rng.choice(n, size=min(n, queries), replace=False)
                snap = mem.snapshot()
                readers = [(kk, Memory.from_config(
                    dataclasses.replace(mem.config, beta=float(b), k=kk or sizes[-1]), snap))
                    for b in betas for kk in mode_ks]
                for angle_deg in angles_deg:
                    Q = C.perturb(X[idx], math.radians(angle_deg), rng)
                    nn = float(np.mean(C.nearest_rows(X[:n], Q) == idx))
                    for (kk, reader) in readers:
                        beta = reader.config.beta
                        for strategy in strategies:
                            R = reader.read(Q, strategy)
                            rows.append(dict(
                                d=d, mode=mode, k="all" if kk == ALL else kk,
                                beta=float(beta), strategy=strategy,
                                angle_deg=float(angle_deg), n_stored=n, locations=len(mem),
                                queries=len(idx),
                                recall=float(np.mean(C.nearest_rows(X[:n], R) == idx)),
                                retrieval=float(np.mean(C.cosines(R, X[idx]) >= RETRIEVED)),
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
        return (r["angle_deg"], r["d"], r["mode"], r.get("k", 20), r["beta"], r["strategy"])

    keys = sorted({key(r) for r in rows},
                  key=lambda t: (t[0], t[1], t[2] != "plain", str(t[3]), t[4], t[5]))
    out = []
    for angle_deg, d, mode, kk, beta, strategy in keys:
        sel = sorted((r for r in rows if key(r) == (angle_deg, d, mode, kk, beta, strategy)),
                     key=lambda r: r["n_stored"])
        ns = [r["n_stored"] for r in sel]
        cap = C.last_above(ns, [r["recall"] for r in sel], threshold, log=True)
        ret = (C.last_above(ns, [r["retrieval"] for r in sel], threshold, log=True)
               if all("retrieval" in r for r in sel) else float("nan"))
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
            angle_deg=angle_deg, d=d, mode=mode, k=kk, beta=beta, strategy=strategy,
            capacity=cap, capacity_str=C.fmt_capacity(cap, ns[-1], ns[0]),
            retrieval_capacity=ret, retrieval_capacity_str=C.fmt_capacity(ret, ns[-1], ns[0]),
            nn_capacity=nn_cap, nn_capacity_str=C.fmt_capacity(nn_cap, ns[-1], ns[0]),
            recall_at_max=sel[-1]["recall"], nn_recall_at_max=sel[-1]["nn_recall"],
            max_n_at_90=max_at if max_at is not None else "none",
            min_n_from_90=from_at if from_at is not None else "none",
            worst_ratio_to_nn=ratio, n_max=ns[-1],
            classical_0138d=round(C.CLASSICAL_HOPFIELD * d, 1), pool_d_over_32=d / 32,
            theorem=theorem_capacity(d, beta),
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
    def key(t):
        return (t["angle_deg"], t["d"], t["mode"], t.get("k", 20), t["strategy"])

    keys = list(dict.fromkeys(key(t) for t in table))
    out = []
    for angle, d, mode, kk, strategy in keys:
        row: dict[str, Any] = {"query angle": f"{angle:g}°", "d": d, "mode": mode, "k": kk,
                               "read": strategy}
        sel = {t["beta"]: t for t in table if key(t) == (angle, d, mode, kk, strategy)}
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


TABLE_COLUMNS = ["angle_deg", "d", "mode", "k", "beta", "strategy", "capacity_str", "nn_capacity_str",
                 "min_n_from_90", "max_n_at_90", "recall_at_max", "nn_recall_at_max",
                 "worst_ratio_to_nn"]


def crosstalk_estimate(d: int, beta: float) -> float:
    """Loads below which a pattern read from itself outweighs all the others, e^(beta - beta^2/2d).

    A back-of-envelope estimate (not a theorem): a pattern scores 1 against
    itself and its softmax weight is e^beta; N random unit patterns score about
    N(0, 1/d) against it, and their weights add up to about N e^(beta^2 / 2d)
    (the Gaussian's moment generating function). The pattern keeps most of the
    weight, so an iteration stays near it, while N < e^(beta - beta^2 / 2d).
    For beta >= d it is no longer meaningful (the maximum over N patterns, not
    their sum, decides).
    """
    return math.exp(beta - beta * beta / (2.0 * d)) if beta < d else float("nan")


def _fmt(value: float) -> str:
    return "vacuous" if math.isnan(value) else f"{value:.3g}"


def theory_table(table: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Measured capacity (plain mode) beside the theorem's and the classical 0.138 d.

    One row per (d, beta): the load up to which 90% of the patterns are
    retrieved (read from the pattern itself, 0°, the reconstruction within
    cos 0.99 of it: the theorem's sense), with every pattern activated (k =
    all) and with top-20; the load up to which 90% of queries 30° away are
    recalled (the nearest stored pattern to the reconstruction is theirs) and
    the nearest-neighbour ceiling of that; Theorem 3's bound (p = 0.001) and
    0.138 d.
    """
    def cap(angle: float, d: int, kk: Any, beta: float, strategy: str, field: str = "capacity_str"):
        for t in table:
            if (t["angle_deg"], t["d"], t["mode"], t["k"], t["beta"], t["strategy"]) == (
                    angle, d, "plain", kk, beta, strategy):
                return t[field]
        return ""

    ret = "retrieval_capacity_str"
    out = []
    for d, beta in sorted({(t["d"], t["beta"]) for t in table if t["mode"] == "plain"}):
        out.append({
            "d": d, "β": f"{beta:g}",
            "retrieved, k=all, 0°, iterative": cap(0.0, d, "all", beta, "iterative", ret),
            "retrieved, k=all, 0°, fast": cap(0.0, d, "all", beta, "fast", ret),
            "retrieved, k=20, 0°, iterative": cap(0.0, d, 20, beta, "iterative", ret),
            "recall, k=all, 30°, iterative": cap(30.0, d, "all", beta, "iterative"),
            "recall, k=20, 30°, iterative": cap(30.0, d, 20, beta, "iterative"),
            "NN ceiling, 30°": cap(30.0, d, "all", beta, "iterative", "nn_capacity_str"),
            "Theorem 3 (p=0.001)": _fmt(theorem_capacity(d, beta)),
            "e^(β−β²/2d)": _fmt(crosstalk_estimate(d, beta)).replace("vacuous", "β ≥ d"),
            "0.138 d": f"{C.CLASSICAL_HOPFIELD * d:.1f}",
        })
    return out


def plot_theory(table: Sequence[dict[str, Any]]):
    """Capacity against d: measured (retrieval, k = all, 0°, iterative) and Theorem 3, per beta."""
    import matplotlib.pyplot as plt

    plain = [t for t in table if t["mode"] == "plain" and t["k"] == "all"
             and t["angle_deg"] == 0.0 and t["strategy"] == "iterative"]
    betas = sorted({t["beta"] for t in plain})
    dims = sorted({t["d"] for t in plain})
    colors = dict(zip(betas, plt.cm.viridis(np.linspace(0, 0.9, len(betas)))))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for beta in betas:
        sel = sorted((t for t in plain if t["beta"] == beta), key=lambda t: t["d"])
        xs, ys, open_x, open_y = [], [], [], []
        for t in sel:
            v = t["retrieval_capacity"]
            if math.isinf(v):  # never failed: at least the largest load
                open_x.append(t["d"])
                open_y.append(t["n_max"])
            elif not math.isnan(v):
                xs.append(t["d"])
                ys.append(v)
        ax.plot(xs, ys, "o-", color=colors[beta], label=f"measured β={beta:g}")
        ax.plot(open_x, open_y, "^", color=colors[beta], ms=9, mfc="none")
        est = [(d, crosstalk_estimate(d, beta)) for d in dims]
        est = [(d, v) for d, v in est if not math.isnan(v)]
        if est:
            ax.plot([d for d, _ in est], [v for _, v in est], ":", color=colors[beta], lw=1,
                    label=f"e^(β−β²/2d) β={beta:g}")
        th = [(d, theorem_capacity(d, beta)) for d in dims]
        th = [(d, v) for d, v in th if not math.isnan(v)]
        if th:
            ax.plot([d for d, _ in th], [v for _, v in th], "--", color=colors[beta],
                    label=f"Theorem 3 β={beta:g}")
    ax.plot(dims, [C.CLASSICAL_HOPFIELD * d for d in dims], ":", color="grey", lw=2,
            label="classical 0.138 d")
    ax.set_yscale("log", base=2)
    ax.set_xscale("log", base=2)
    ax.set_xticks(dims, [str(d) for d in dims])
    ax.set_xlabel("dimension d")
    ax.set_ylabel("patterns stored, 90% retrieved")
    ax.set_title("Plain memory, every pattern activated, read from the patterns; retrieved:\n"
                 "within cos 0.99 (open triangles: never failed up to the largest load)",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def _theory(args) -> None:
    cfg = THEORY_QUICK if args.quick else THEORY_FULL
    if args.from_csv:  # redraw the table and the plot from an earlier run's rows
        rows = C.read_csv(args.from_csv)
    else:
        rows = recall_curves(**cfg, seed=args.seed, progress=not args.no_progress)
    table = capacity_table(rows)
    C.write_csv(args.out / "capacity_theory.csv", rows)
    C.write_csv(args.out / "capacity_theory_90.csv", table)
    C.save_figure(plot_theory(table), args.out / "capacity_theory.png")
    print("Measured capacity (90% recall) beside Ramsauer et al. (2020), Theorem 3, and 0.138 d\n")
    print(C.markdown_table(theory_table(table)))
    print()
    print(C.markdown_table(compact_table(table)))
    print(f"\nwrote into {args.out}: capacity_theory.csv, capacity_theory_90.csv, "
          "capacity_theory.png")


def _main(args) -> None:
    if args.grid in ("theory", "all"):
        _theory(args)
    if args.grid == "theory":
        return
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


def _options(parser) -> None:
    parser.add_argument("--grid", choices=("engine", "theory", "all"), default="engine",
                        help="engine: d 64-1024, top-20 (default); theory: small d, loads to "
                             "2^17, every pattern activated, against Theorem 3; all: both")
    parser.add_argument("--from-csv", type=Path,
                        help="theory grid: redraw from this capacity_theory.csv, not rerun")


def main(argv: Sequence[str] | None = None) -> None:
    C.run_main("capacity", __doc__, argv, _main, _options)


if __name__ == "__main__":
    main()
