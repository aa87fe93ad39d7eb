"""hopmem.agent's module layout: the public names stay where they were, and modules depend one way."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import hopmem.agent as agent
import hopmem.agent.memory as memory_module

AGENT = Path(agent.__file__).parent

#: Everything hopmem.agent.memory defined publicly before it was split into modules.
MEMORY_NAMES = ("AgentMemory", "Entry", "Explanation", "Hit", "Selection", "RecallConfig", "MissingIdentity",
                "MODES", "DEFAULT_GATES", "DEFAULT_BAND_GATES", "DEFAULT_UPDATE_CUES", "DEFAULT_RRF_WEIGHTS",
                "DURABILITIES")


def test_public_names_are_importable_from_where_they_were():
    for name in MEMORY_NAMES:
        assert hasattr(memory_module, name), name
    for name in memory_module.__all__:
        assert getattr(agent, name) is getattr(memory_module, name), name
    for name in agent.__all__:
        assert hasattr(agent, name), name


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
    # the pipeline's stages know nothing of the mixins that use them
    for stage in ("candidates", "evidence", "verdict", "ranking", "index", "results", "config", "validation",
                  "encoding"):
        assert not graph[stage] & {"core", "writes", "recall", "calibration", "feedback", "maintenance",
                                   "memory"}, stage
