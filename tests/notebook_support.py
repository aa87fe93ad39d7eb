"""Shared by the notebook tests: run a notebook headless on this interpreter.

The kernel is this interpreter, declared by a kernelspec written to a
temporary JUPYTER_PATH with the repository on PYTHONPATH, so no installed
kernel is needed. Outside CI a missing notebook package skips; under CI (CI
true) it fails: the notebooks are part of what CI checks.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from conftest import in_ci

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "hopmem-test-python"


def require(module: str):
    try:
        return __import__(module)
    except ImportError as exc:
        if in_ci():
            pytest.fail(f"{module} is needed to run the notebooks in CI: {exc}")
        pytest.skip(f"{module} not installed ({exc}); pip install 'hopmem[notebooks]'")


def install_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "hopmem tests", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the notebooks ask for inline figures
    # One BLAS / torch thread: faster than two on small shared machines.
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    return KERNEL


def execute(path: Path, kernel: str, limit_s: float):
    """Run every cell; returns (notebook, seconds). Fails on any error or overrun."""
    nbformat = require("nbformat")
    nbclient = require("nbclient")
    require("ipykernel")
    require("matplotlib")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=int(limit_s), kernel_name=kernel,
                                     resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError at the first failing cell
    elapsed = time.perf_counter() - start
    assert elapsed < limit_s, f"{path.name} took {elapsed:.1f} s (limit {limit_s:.0f} s)"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count is not None for c in code), "a code cell did not run"
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)
    return nb, elapsed


def figures(nb) -> int:
    return sum(any("image/png" in o.get("data", {}) for o in c.outputs)
               for c in nb.cells if c.cell_type == "code")


def stdout(nb) -> str:
    return "\n".join("".join(o.get("text", "") for o in c.outputs
                             if o.get("output_type") == "stream" and o.get("name") == "stdout")
                     for c in nb.cells if c.cell_type == "code")
