"""Plot the store bench's batch throughput over its recorded runs.

    PYTHONPATH=. .venv/bin/python -m benchmarks.plot_store_runs

Reads ``docs/results/store_runs.csv`` (one row per full run of
``benchmarks/store_bench.py``: the median batch of 100 at d = 384, ~1,500
locations, as ``docs/store.md`` lists them) and writes
``docs/img/store_runs.png``: vectors per second per run, coloured by the write
path the run measured, with the 20,000 vectors/s target drawn in. Add a row
to the CSV after a full run, then re-run this.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 20_000


def load(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["run"] = int(r["run"])
        r["batch_vec_s"] = float(r["batch_vec_s"])
        r["kernel_threads"] = int(r["kernel_threads"])
    return rows


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.8), dpi=120)
    paths = list(dict.fromkeys(r["write_path"] for r in rows))  # in order of first run
    for colour, path in zip(("tab:gray", "tab:blue", "tab:green"), paths):
        for threads, marker in ((1, "o"), (2, "s")):
            pts = [r for r in rows if r["write_path"] == path and r["kernel_threads"] == threads]
            if pts:
                ax.scatter([r["run"] for r in pts], [r["batch_vec_s"] / 1e3 for r in pts],
                           color=colour, marker=marker, s=28,
                           label=f"{path}, {threads} kernel thread{'s' if threads > 1 else ''}"
                                 + (" (a helper scores each next block)" if threads > 1 else ""))
    ax.axhline(TARGET / 1e3, color="tab:red", linestyle="--", linewidth=1)
    ax.text(rows[0]["run"], TARGET / 1e3 + 0.6, "target 20k", color="tab:red", fontsize=8)
    ax.set_xlabel("store bench run")
    ax.set_ylabel("thousand vectors/s")
    ax.set_title("Durable batches of 100 at d = 384 (~1,500 locations), median batch per run",
                 fontsize=9)
    ax.set_ylim(0, max(r["batch_vec_s"] for r in rows) / 1e3 * 1.1)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=ROOT / "docs" / "results" / "store_runs.csv")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "store_runs.png")
    args = ap.parse_args(argv)
    plot(load(args.csv), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
