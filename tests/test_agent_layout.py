"""hopmem.agent's module layout: the public names stay where they were, and modules depend one way."""

from __future__ import annotations

import ast
import importlib
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import hopmem.agent as agent
import hopmem.agent.memory as memory_module

AGENT = Path(agent.__file__).parent

#: Everything hopmem.agent.memory defined publicly before it was split into modules (under today's names).
MEMORY_NAMES = ("AgentMemory", "Entry", "Explanation", "MemoryHit", "Selection", "RecallConfig", "MissingIdentity",
                "RECALL_MODES", "DEFAULT_GATES", "DEFAULT_BAND_GATES", "DURABILITIES")


def test_public_names_are_importable_from_where_they_were():
    for name in MEMORY_NAMES:
        assert hasattr(memory_module, name), name
    for name in memory_module.__all__:
        assert getattr(agent, name) is getattr(memory_module, name), name
    for name in agent.__all__:
        assert hasattr(agent, name), name


@pytest.mark.parametrize("module", ["hopmem.agent", "hopmem.agent.memory", "hopmem.agent.results"])
def test_hit_is_the_deprecated_name_of_memory_hit(module):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match="MemoryHit"):
        assert mod.Hit is agent.MemoryHit


@pytest.mark.parametrize("module", ["hopmem.agent", "hopmem.agent.memory", "hopmem.agent.config"])
def test_modes_is_the_deprecated_name_of_recall_modes(module):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match="RECALL_MODES"):
        assert mod.MODES is agent.RECALL_MODES
    assert agent.RECALL_MODES == ("hybrid", "associative", "keyword")


def _internal_imports(path: Path) -> set[str]:
    """The hopmem.agent modules that ``path`` imports (relative imports within the package)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(alias.name for alias in node.names)
    return out


def test_modules_depend_one_way():
    graph = {p.stem: _internal_imports(p) for p in AGENT.glob("*.py") if p.stem != "__init__"}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:  # pragma: no cover - the failure message is the point
        raise AssertionError(f"import cycle in hopmem.agent: {exc.args[1]}") from None
    assert set(order) >= set(graph)
    # the facade sits on top: only the helpers built on AgentMemory import it
    assert {name for name, deps in graph.items() if "memory" in deps} <= {"tools", "history", "aio"}
    # the pipeline's stages know nothing of the parts that use them
    for stage in ("candidates", "evidence", "verdict", "ranking", "index", "results", "config", "validation",
                  "encoding", "_table", "_stages", "_recaller"):
        assert not graph[stage] & {"core", "writes", "recall", "calibration", "feedback", "maintenance",
                                   "memory"}, stage


def _private_accesses(path: Path) -> list[str]:
    """``obj._name`` in ``path`` where ``obj`` is not ``self`` or ``cls``, and ``from m import _name``
    (dunders aside)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            out.append(f"{path.name}:{node.lineno}: .{node.attr}")
        if isinstance(node, ast.ImportFrom):
            out += [f"{path.name}:{node.lineno}: import {a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_module_reaches_into_another_objects_private_names():
    found = [hit for p in sorted(AGENT.glob("*.py")) for hit in _private_accesses(p)]
    assert not found, found
