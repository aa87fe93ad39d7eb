"""AgentMemory's structure: it composes parts (writes, recall, calibration, feedback, maintenance) over one
MemoryState, each part reads and changes the state only through the state's public interface, and the public
API of AgentMemory is what it was when it was built from mixins."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

import hopmem.agent as agent
from hopmem.agent import AgentMemory
from hopmem.agent.calibration import Calibration
from hopmem.agent.core import MemoryState
from hopmem.agent.feedback import Feedback
from hopmem.agent.maintenance import Maintenance
from hopmem.agent.recall import Recall
from hopmem.agent.writes import Writes
from hopmem.text.encoders import HashingEncoder
from hopmem.text.gates import calibrate

AGENT = Path(agent.__file__).parent
ENC = HashingEncoder(384)

#: Each part, the module it is in, and the attribute of AgentMemory that holds it.
PARTS = {Writes: ("writes", "_writes"), Recall: ("recall", "_recall"), Calibration: ("calibration", "_calibration"),
         Feedback: ("feedback", "_feedback"), Maintenance: ("maintenance", "_maintenance")}

#: AgentMemory's public methods and properties, as they were when it inherited them from mixins, and the part
#: each delegates to (None: AgentMemory's own, or the state's).
METHODS = {
    "open": None, "close": None, "subscribe": None, "publish": None, "now": None,
    "remember": Writes, "remember_many": Writes,
    "recall": Recall, "rank": Recall,
    "calibrate": Calibration, "gate_statistics": Calibration, "set_gates": Calibration,
    "complete": Feedback, "feedback": Feedback,
    "get": Maintenance, "entries": Maintenance, "variants": Maintenance, "forget": Maintenance,
    "end_session": Maintenance, "prune": Maintenance, "stats": Maintenance, "reembed": Maintenance,
}
PROPERTIES = {"gates": Calibration, "band_gates": Calibration, "verdict_models": Calibration}
#: What the memory was opened with, readable as before (attributes then, properties of the state now).
OPENED_WITH = ("namespace", "encoder", "dim", "centerer", "encoder_info", "config", "write_policy", "tuning",
               "reinforcement", "forgetting",
               "label_policy", "labeler", "kinds", "capacity", "session_ttl", "day_zero", "receipt_ttl",
               "max_receipts", "events")


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_agent_memory_inherits_nothing_and_no_mixin_is_left():
    assert AgentMemory.__mro__ == (AgentMemory, object)
    for part in (*PARTS, MemoryState):
        assert part.__mro__ == (part, object), part
    for path in AGENT.glob("*.py"):
        classes = [n.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)]
        assert not [c for c in classes if c.endswith("Mixin") or c == "MemoryCore"], path.name


def test_public_api_is_unchanged():
    mem = AgentMemory.open(":memory:", encoder=ENC, namespace="team", reranker=False)
    with mem:
        public = {n for n in set(dir(AgentMemory)) | set(vars(mem)) if not n.startswith("_")}
        assert public == set(METHODS) | set(PROPERTIES) | set(OPENED_WITH)
        for name in OPENED_WITH:
            assert getattr(mem, name) is getattr(mem._state, name), name
    for name in (*METHODS, *PROPERTIES, *OPENED_WITH):
        assert getattr(AgentMemory, name).__doc__, f"AgentMemory.{name} has no docstring (the docs site reads it)"


@pytest.mark.parametrize("name", [n for n, part in METHODS.items() if part is not None])
def test_each_method_hands_its_arguments_to_its_part_unchanged(name):
    """Same parameters, kinds and defaults on AgentMemory (what users and the docs see) and on the part."""
    facade, part = inspect.signature(getattr(AgentMemory, name)), inspect.signature(getattr(METHODS[name], name))
    assert facade == part


@pytest.mark.parametrize("name", [n for n, part in {**METHODS, **PROPERTIES}.items() if part is not None])
def test_each_delegation_is_one_statement_to_its_part(name):
    member = inspect.getattr_static(AgentMemory, name)
    func = member.fget if isinstance(member, property) else member
    body = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0].body
    code = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    assert len(code) == 1 and isinstance(code[0], ast.Return), name
    target = code[0].value.func if isinstance(code[0].value, ast.Call) else code[0].value
    held = PARTS[{**METHODS, **PROPERTIES}[name]][1]
    assert ast.unparse(target) == f"self.{held}.{name}"


def _state_names(module: str) -> set[str]:
    """The names a part's module reads of the state: ``self._state.X`` and ``state.X``."""
    tree = ast.parse((AGENT / f"{module}.py").read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if (isinstance(value, ast.Name) and value.id == "state") or (
                isinstance(value, ast.Attribute) and value.attr == "_state"
                and isinstance(value.value, ast.Name) and value.value.id == "self"):
            names.add(node.attr)
    return names


#: The state's interface each part uses. Narrow on purpose: a part that needs more of the state shows here.
INTERFACES = {
    Writes: {"check_open", "lock", "sync", "now", "store", "namespace", "rows", "partitions", "kinds",
             "label_policy", "labeler", "session_ttl", "capacity", "forgetting", "write_policy", "fts_for", "delete",
             "add_row", "drop_rows", "load", "mark_synced", "encode", "expired", "utility", "entry", "emit", "row"},
    Recall: {"check_open", "lock", "sync", "now", "store", "namespace", "rows", "by_time", "partitions", "fts",
             "reranker", "gates", "band_gates", "models", "kinds", "label_policy", "labeler", "config", "settings",
             "day_zero",
             "receipt_ttl", "max_receipts", "receipts", "recalls", "reinforcement", "forgetting", "mark_synced",
             "encode", "expired", "suppressed", "utility", "retention", "emit"},
    Calibration: {"check_open", "lock", "sync", "now", "store", "namespace", "rows", "gates", "band_gates",
                  "models", "mark_synced", "encode"},
    Feedback: {"check_open", "lock", "sync", "now", "store", "namespace", "rows", "reinforcement", "mark_synced",
               "row", "entry", "emit"},
    Maintenance: {"check_open", "lock", "sync", "now", "store", "namespace", "rows", "partitions", "fts", "gates",
                  "max_receipts", "encoder", "dim", "centerer", "encoder_info", "reranker", "resolve_reranker",
                  "load", "mark_synced", "delete", "drop_rows", "expired", "suppressed", "entry", "emit", "row"},
}


@pytest.mark.parametrize("part", list(PARTS), ids=lambda p: p.__name__)
def test_each_part_uses_only_its_narrow_public_interface_of_the_state(part, tmp_path):
    used = _state_names(PARTS[part][0])
    assert used, part
    assert not [n for n in used if n.startswith("_")], used
    assert used <= INTERFACES[part], sorted(used - INTERFACES[part])
    state = MemoryState(tmp_path / "m.db", encoder=ENC, namespace="team", reranker=False)
    try:
        assert all(hasattr(state, n) for n in INTERFACES[part]), sorted(n for n in INTERFACES[part]
                                                                        if not hasattr(state, n))
    finally:
        state.close()


def test_the_parts_work_on_a_state_built_without_agent_memory(tmp_path):
    clock = Clock()
    state = MemoryState(tmp_path / "m.db", encoder=ENC, namespace="team", clock=clock, reranker=False)
    writes, recall, feedback, maintenance = Writes(state), Recall(state), Feedback(state), Maintenance(state)
    calibration = Calibration(state, recall)
    heard = []
    state.events.subscribe(lambda event: heard.append(event.type))
    kept = writes.remember("Production deploys require a database snapshot first.")
    writes.remember_many(["The billing service runs on Postgres 16.", "Ana leads the platform team."])
    assert maintenance.stats()["entries"] == 3 and len(state.rows) == 3
    modes = ("hybrid", "associative", "keyword")
    tight = calibrate([0.2, 0.3], [-0.1, 0.0])
    calibration.set_gates({m: tight for m in modes})
    assert calibration.gates == {m: tight for m in modes} and state.gates == calibration.gates
    selection = recall.recall("What do production deploys require?")
    assert selection.hits and selection.hits[0].entry_id == kept.id
    assert feedback.complete(selection.id, 1.0) and not feedback.complete(selection.id, 1.0)
    assert state.rows[kept.id].eval_weight > 0
    assert [h.entry_id for h in recall.rank("billing database", limit=3)]
    assert maintenance.forget(kept.id) and kept.id not in state.rows
    assert heard[:4] == ["remembered", "remembered", "remembered", "recalled"] and "forgotten" in heard
    state.close()


def test_calibration_measures_with_the_recall_it_is_given(tmp_path):
    state = MemoryState(tmp_path / "m.db", encoder=ENC, namespace="team", reranker=False)
    recall = Recall(state)
    asked = []

    class Counting(Recall):
        def retrieve(self, *args, **kwargs):
            asked.append(args[0])
            return super().retrieve(*args, **kwargs)

    counting = Counting(state)
    Writes(state).remember("The billing service runs on Postgres 16.")
    assert Calibration(state, counting).gate_statistics(["Which database does billing use?"]) == \
        Calibration(state, recall).gate_statistics(["Which database does billing use?"])
    assert asked == ["Which database does billing use?"]
    state.close()


def test_agent_memory_shares_one_state_among_its_parts():
    with AgentMemory.open(":memory:", encoder=ENC, namespace="team", reranker=False) as mem:
        for part, (_, attribute) in PARTS.items():
            held = getattr(mem, attribute)
            assert isinstance(held, part) and held._state is mem._state
        assert mem._calibration._recall is mem._recall


def test_open_and_the_state_take_the_same_settings():
    opened = inspect.signature(AgentMemory.open).parameters
    state = inspect.signature(MemoryState).parameters
    assert [(p.name, p.kind, p.default) for p in opened.values()] == \
        [(p.name, p.kind, p.default) for p in state.values()]
