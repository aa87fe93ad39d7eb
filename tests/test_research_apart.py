"""The design studies stay out of the product: nothing that ships or that ``make test`` runs imports them.

The studies (``research/``: the LoCoMo ``study_*`` scripts, their signals and
probes, the quality experiments and their notebook) run by hand, with their
own tests in ``research/tests``. Here, every Python file under ``tests/``,
``benchmarks/``, ``hopmem/`` and ``scripts/`` and every code cell of the
notebooks the suite executes (``notebooks/``) is parsed, and an import of
``research`` or of a study module (one whose name starts with ``study_``)
fails, as does a string naming one (``importlib.import_module("research.x")``,
``["-m", "research.x"]``). Relative imports are resolved against the file's
package first.
"""

from __future__ import annotations

import ast
import json
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUARDED = ("tests", "benchmarks", "hopmem", "scripts")
STUDY_PACKAGE = "research"


def package_of(path: Path) -> str:
    """The dotted package a file under the repository root sits in ("" at the root)."""
    return ".".join(path.relative_to(ROOT).parent.parts)


def imported_modules(source: str, package: str) -> list[str]:
    """Every module an import statement of ``source`` names (relative ones resolved), and names it imports."""
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out.append(base)
            out += [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith(STUDY_PACKAGE + "."):
            out.append(node.value)
    return out


def is_study(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == STUDY_PACKAGE or any(p.startswith("study_") for p in parts)


def study_imports(source: str, package: str) -> list[str]:
    return sorted({m for m in imported_modules(source, package) if is_study(m)})


def sources() -> list[tuple[Path, str]]:
    this = Path(__file__).resolve()  # its examples name the studies on purpose
    files = [(p, p.read_text(encoding="utf-8")) for d in GUARDED for p in sorted((ROOT / d).rglob("*.py"))
             if p.resolve() != this]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        # IPython magics (%matplotlib inline) are not Python: commented out before parsing
        files.append((nb, "\n".join(line if not line.lstrip().startswith(("%", "!")) else "# " + line
                                    for block in code for line in block.splitlines())))
    return files


@pytest.mark.parametrize(("source", "package", "found"), [
    ("from research.locomo import study_design", "tests", ["research.locomo", "research.locomo.study_design"]),
    ("import research", "benchmarks", ["research"]),
    ("from .study_verdict import SIGNALS", "benchmarks.locomo",
     ["benchmarks.locomo.study_verdict", "benchmarks.locomo.study_verdict.SIGNALS"]),
    ("from . import study_dedup", "benchmarks.locomo", ["benchmarks.locomo.study_dedup"]),
    ("importlib.import_module('research.experiments.capacity')", "tests", ["research.experiments.capacity"]),
    ("from benchmarks.locomo import run\nfrom .data import load_folder", "benchmarks.locomo", []),
    ("x = 'research notes'", "tests", []),
])
def test_the_check_finds_study_imports(source: str, package: str, found: list[str]) -> None:
    assert study_imports(source, package) == found


def test_nothing_tested_or_shipped_imports_a_study() -> None:
    files = sources()
    assert len(files) > 100  # the walk found the tree
    offenders = {str(path.relative_to(ROOT)): bad for path, text in files
                 if (bad := study_imports(text, package_of(path)))}
    assert not offenders, f"imports of the studies (research/) outside research/: {offenders}"


def test_no_study_lives_outside_research() -> None:
    strays = [str(p.relative_to(ROOT)) for d in GUARDED for p in (ROOT / d).rglob("study_*.py")]
    assert not strays, f"study scripts belong in research/: {strays}"


def test_make_test_collects_only_tests() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]
