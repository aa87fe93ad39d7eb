"""What the benchmarks write: CSV files, markdown tables, PNG figures, and a line about the machine."""

from __future__ import annotations

import csv
import math
import os
import platform
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


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
