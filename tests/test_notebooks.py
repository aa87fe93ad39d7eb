"""Execute the notebooks headless; any cell error fails the test.

notebooks/calibrate-tau.ipynb has its own test (test_notebook_calibrate.py),
which also checks its figures; every other notebook in notebooks/ runs here
(research/notebooks/ is the studies', run by research/tests).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from notebook_support import ROOT, execute, figures, install_kernel

pytestmark = [pytest.mark.notebook, pytest.mark.subprocess]  # nbclient starts a kernel process

OWN_TESTS = {"calibrate-tau.ipynb"}
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").glob("*.ipynb") if p.name not in OWN_TESTS)
# hopmem.demo.pick_encoder loads all-MiniLM-L6-v2 where it is installed.
PARAMS = [pytest.param(p, id=p.name, marks=[pytest.mark.model] if "pick_encoder(" in p.read_text() else [])
          for p in NOTEBOOKS]
LIMIT_S = float(os.environ.get("HOPMEM_NOTEBOOK_LIMIT_S", "120"))


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    return install_kernel(tmp_path, monkeypatch)


def test_there_are_notebooks():
    assert any(p.name == "calibrate-agent-gate.ipynb" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", PARAMS)
def test_notebook_executes(path: Path, kernel: str) -> None:
    nb, elapsed = execute(path, kernel, LIMIT_S)
    print(f"{path.name}: executed in {elapsed:.1f} s")
    for cell in nb.cells:
        if cell.cell_type == "code" and "plt.show()" in cell.source:
            assert any("image/png" in o.get("data", {}) for o in cell.outputs), \
                f"no figure from cell:\n{cell.source[:200]}"
    assert figures(nb) >= 1
