"""Interference: recall of early writes against the number of later writes.

``n_early`` random unit patterns are written first; then a stream of later
writes follows, and at checkpoints the early patterns are queried with noise
(rotated by a fixed angle). A read succeeds when the nearest stored pattern
(among everything written so far) to the reconstruction is the queried early
one. Three later streams:

* ``unrelated``: fresh random patterns (the memory fills up);
* ``reinforcing``: each later pattern is a random early one rotated by 60
  degrees in a fresh random direction (cos 0.5, above tau_split): it lands on
  the early pattern's locations, and the mean of such writes is the early
  pattern itself;
* ``drifting``: each early pattern x gets one fixed neighbour y at 45 degrees;
  each later pattern is a random early one's y rotated by 15 degrees. These
  land on x's locations too (cos ~0.7) but pull them consistently towards y:
  this is overwriting, and where the learning rate matters.

Learning-rate schedules (eta0, eta_decay, eta_min) are compared in
competitive mode; plain mode is the no-adaptation reference. The forgetting
half-life is the number of later writes after which early recall has fallen
to half of its value before them (linear interpolation between checkpoints).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hopmem import Memory

from . import _common as C

#: name -> (eta0, eta_decay, eta_min); "default" is the library default.
SCHEDULES: dict[str, tuple[float, float, float]] = {
    "default": (0.01, 0.9999, 0.001),
    "fast-decay": (0.01, 0.99, 0.001),
    "high": (0.1, 0.9999, 0.01),
    "constant-high": (0.1, 1.0, 0.1),
    "constant-low": (0.001, 1.0, 0.001),
}

STREAMS = ("unrelated", "reinforcing", "drifting")

FULL = dict(d=128, n_early=64, later=(0,) + tuple(2 ** i for i in range(3, 15)),
            schedules=tuple(SCHEDULES), streams=STREAMS, beta=30.0)
QUICK = dict(d=128, n_early=48, later=(0,) + tuple(2 ** i for i in range(3, 12)),
             schedules=tuple(SCHEDULES), streams=STREAMS, beta=30.0)
TINY = dict(d=64, n_early=16, later=(0, 16, 64, 256), schedules=("default",),
            streams=("unrelated",), beta=30.0)


def _later_stream(kind: str, X_early: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "unrelated":
        return C.random_patterns(n, X_early.shape[1], rng)
    if kind == "reinforcing":
        base = X_early[rng.integers(0, len(X_early), n)]
        return C.perturb(base, math.radians(60.0), rng)
    if kind == "drifting":
        # A fixed neighbour per early pattern, from its own generator so that it
        # does not depend on n.
        targets = C.perturb(X_early, math.radians(45.0), np.random.default_rng([len(X_early), 45]))
        base = targets[rng.integers(0, len(X_early), n)]
        return C.perturb(base, math.radians(15.0), rng)
    raise ValueError(f"stream: expected one of {STREAMS}, got {kind!r}")


def forgetting_curves(
    d: int = 128,
    n_early: int = 64,
    later: Sequence[int] = FULL["later"],
    schedules: Sequence[str] = tuple(SCHEDULES),
    streams: Sequence[str] = STREAMS,
    beta: float = 30.0,
    strategy: str = "iterative",
    angle_deg: float = 20.0,
    include_plain: bool = True,
    k: int = 20,
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Early recall at each checkpoint of later writes; one row per (stream, variant, checkpoint)."""
    later = sorted(int(n) for n in later)
    variants = [("plain", None)] if include_plain else []
    variants += [("competitive", name) for name in schedules]
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(streams) * len(variants) * len(later), desc="interference",
               disable=not progress)
    for stream in streams:
        rng = np.random.default_rng([seed, d, 7])
        X_early = C.random_patterns(n_early, d, rng)
        X_later = _later_stream(stream, X_early, later[-1], rng)
        Q = C.perturb(X_early, math.radians(angle_deg), rng)  # same queries for every variant
        for mode, name in variants:
            params = {} if name is None else dict(zip(("eta0", "eta_decay", "eta_min"), SCHEDULES[name]))
            mem = Memory(d, mode=mode, k=k, beta=beta, seed=seed, **params)
            mem.write(X_early)
            written = 0
            for n in later:
                if n > written:
                    mem.write(X_later[written:n])
                    written = n
                stored = np.concatenate([X_early, X_later[:n]])
                R = mem.read(Q, strategy)
                truth = np.arange(n_early)
                rows.append(dict(
                    stream=stream, mode=mode, schedule=name or "plain",
                    eta0=params.get("eta0", float("nan")), eta_decay=params.get("eta_decay", float("nan")),
                    eta_min=params.get("eta_min", float("nan")), d=d, n_early=n_early, beta=beta,
                    strategy=strategy, angle_deg=angle_deg, later_writes=n, locations=len(mem),
                    current_eta=mem.stats().current_eta,
                    recall=float(np.mean(C.nearest_rows(stored, R) == truth)),
                    nn_recall=float(np.mean(C.nearest_rows(stored, Q) == truth)),
                    mean_cos_target=float(np.mean(C.cosines(R, X_early))),
                ))
                bar.update()
    bar.close()
    return rows


def half_life(later: Sequence[int], recall: Sequence[float]) -> float:
    """Later writes until recall falls to half its initial value; ``inf`` if it never does."""
    later = list(later)
    recall = list(recall)
    if recall[0] <= 0:
        return float("nan")
    return C.last_above(later, recall, recall[0] / 2.0)


def half_life_table(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    keys: list[tuple[str, str]] = []
    for r in rows:
        if (r["stream"], r["schedule"]) not in keys:
            keys.append((r["stream"], r["schedule"]))
    out = []
    for stream, schedule in keys:
        sel = sorted((r for r in rows if r["stream"] == stream and r["schedule"] == schedule),
                     key=lambda r: r["later_writes"])
        ns = [r["later_writes"] for r in sel]
        hl = half_life(ns, [r["recall"] for r in sel])
        out.append(dict(
            stream=stream, schedule=schedule, mode=sel[0]["mode"],
            eta0=sel[0]["eta0"], eta_decay=sel[0]["eta_decay"], eta_min=sel[0]["eta_min"],
            initial_recall=sel[0]["recall"], final_recall=sel[-1]["recall"],
            final_nn_recall=sel[-1]["nn_recall"], final_locations=sel[-1]["locations"],
            initial_cos=sel[0]["mean_cos_target"], final_cos=sel[-1]["mean_cos_target"],
            half_life=hl, half_life_str=C.fmt_capacity(hl, ns[-1]) if not math.isnan(hl) else "n/a",
        ))
    return out


def forgetting_half_life(stream: str = "drifting", schedule: str = "default", d: int = 64,
                         n_early: int = 16, later: Sequence[int] = (0, 16, 32, 64, 128, 256, 512, 1024),
                         seed: int = 0) -> float:
    """One half-life (later writes); ``max(later)`` if recall never halved."""
    rows = forgetting_curves(d=d, n_early=n_early, later=later, schedules=(schedule,),
                             streams=(stream,), include_plain=False, seed=seed, progress=False)
    hl = half_life_table(rows)[0]["half_life"]
    if math.isinf(hl):
        return float(max(later))
    return 0.0 if math.isnan(hl) else hl


def plot(rows: Sequence[dict[str, Any]], title: str = ""):
    """Early recall against later writes, one panel per stream, one line per schedule."""
    import matplotlib.pyplot as plt

    streams = list(dict.fromkeys(r["stream"] for r in rows))
    schedules = list(dict.fromkeys(r["schedule"] for r in rows))
    colors = dict(zip(schedules, plt.cm.tab10(np.arange(len(schedules)))))
    fig, axes = plt.subplots(1, len(streams), figsize=(4.6 * len(streams), 3.4), squeeze=False,
                             sharey=True)
    for j, stream in enumerate(streams):
        ax = axes[0][j]
        for schedule in schedules:
            sel = sorted((r for r in rows if r["stream"] == stream and r["schedule"] == schedule),
                         key=lambda r: r["later_writes"])
            if not sel:
                continue
            x = [max(r["later_writes"], 1) for r in sel]  # 0 drawn at 1 on the log axis
            label = schedule if schedule == "plain" else (
                f"{schedule} ({sel[0]['eta0']:g}, {sel[0]['eta_decay']:g}, {sel[0]['eta_min']:g})")
            ax.plot(x, [r["recall"] for r in sel], marker=".", color=colors[schedule],
                    ls="-" if schedule != "plain" else ":", label=label)
        sel = sorted((r for r in rows if r["stream"] == stream and r["schedule"] == schedules[0]),
                     key=lambda r: r["later_writes"])
        ax.plot([max(r["later_writes"], 1) for r in sel], [r["nn_recall"] for r in sel], ":",
                color="k", lw=2, label="NN ceiling")
        ax.set_xscale("log", base=2)
        ax.set_ylim(-0.02, 1.05)
        ax.set_xlabel("later writes (0 drawn at 1)")
        ax.set_title(f"{stream} later writes", fontsize=9)
    axes[0][0].set_ylabel(f"recall of the {rows[0]['n_early']} early writes")
    handles, labels = axes[0][-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7,
               title="schedule (eta0, decay, min)", title_fontsize=7)
    fig.suptitle(title or "Interference", fontsize=10)
    fig.tight_layout()
    return fig


def _main(args) -> None:
    cfg = QUICK if args.quick else FULL
    rows = forgetting_curves(**cfg, seed=args.seed, progress=not args.no_progress)
    table = half_life_table(rows)
    C.write_csv(args.out / "interference.csv", rows)
    C.write_csv(args.out / "interference_half_life.csv", table)
    C.save_figure(plot(rows, f"Interference (d={cfg['d']}, β={cfg['beta']:g}, iterative read, "
                             f"queries 20° from the early patterns)"),
                  args.out / "interference.png")
    print(C.markdown_table(table, ["stream", "schedule", "eta0", "eta_decay", "eta_min",
                                   "initial_recall", "final_recall", "final_nn_recall",
                                   "initial_cos", "final_cos", "final_locations", "half_life_str"]))
    print(f"\nwrote into {args.out}: interference.csv, interference_half_life.csv, interference.png")


def main(argv: Sequence[str] | None = None) -> None:
    C.run_main("interference", __doc__, argv, _main)


if __name__ == "__main__":
    main()
