"""Recall's stages (hopmem.agent._stages), each on a hand-built candidate table, without an AgentMemory."""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap

import numpy as np
import pytest

from hopmem.agent import _stages as stages
from hopmem.agent._recaller import Recaller
from hopmem.agent._settings import RecallSettings
from hopmem.agent._table import CandidateTable, Query, Scope
from hopmem.agent.candidates import Candidates
from hopmem.agent.evidence import Evidence
from hopmem.agent.index import Partition, Row
from hopmem.agent.temporal import TimeHints
from hopmem.agent.verdict import Verdict, VerdictModel
from hopmem.text.gates import Bands, Gate

DIM = 8
CFG = RecallSettings.resolve()


def unit(*values: float) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[: len(values)] = values
    return v / np.linalg.norm(v)


def row(i: int, text: str, vector: np.ndarray, created_at: float = 0.0, **extra) -> Row:
    values = dict(id=i, text=text, vector=vector, created_at=created_at, durability="shared", kind="fact",
                  session_id=None, labels={}, inferred_labels={}, metadata=None, importance=0.5, supersedes=[],
                  superseded_by=None, stems=frozenset(text.lower().split()), part=None)
    values.update(extra)
    return Row(**values)


def gate(tau: float) -> Gate:
    return Gate(tau=tau, coverage=0.0, error_rate=0.0, auc=0.5, n_relevant=0, n_irrelevant=0,
                calibrated_writes=None, calibrated_locations=None, bands=Bands(vivid=tau + 0.15, clear=tau),
                separated=False, holdout_coverage=None, holdout_error_rate=None)


def query(text: str = "where does ana climb", vector: np.ndarray | None = None, mode: str = "hybrid",
          limit: int = 5, order: str | None = None, **extra) -> Query:
    return Query(text=text, vector=unit(1.0) if vector is None else vector, mode=mode, limit=limit, now=100.0,
                 hints=TimeHints(order=order, window=None, cues=()), **extra)


def scope(partitions=(), visible=lambda i: True) -> Scope:
    return Scope(partitions=tuple(partitions), tables=(), visible=visible, newly_expired=[])


def evidence(values: dict[int, float], mode: str = "hybrid", semantic: dict[int, float] | None = None,
             rows=None) -> Evidence:
    ev = Evidence(mode, CFG, rows or {}, unit(1.0), semantic if semantic is not None else dict(values), {}, None)
    ev.keyword = {i: 0.0 for i in values}
    ev.value = dict(values)
    return ev


def verdict(passes: bool = True, floor: float = 0.0) -> Verdict:
    return Verdict(statistic=1.0 if passes else -1.0, what="", passes=passes, best_evidence=1.0, floor=floor,
                   features={}, path_floor=None)


def snapshot(value):
    """A deep copy of a table's contents that compares by value (an Evidence by its scores)."""
    if isinstance(value, Evidence):
        return ("Evidence", value.semantic, value.associative, value.keyword, value.value)
    if isinstance(value, CandidateTable):
        return {name: snapshot(getattr(value, name)) for name in value.__dataclass_fields__}
    if isinstance(value, tuple):
        return tuple(snapshot(v) for v in value)
    return copy.deepcopy(value)


def unchanged(stage, *args, **kwargs):
    """Call ``stage`` and check that it left its table (the second argument) as it was."""
    table = args[1]
    before = snapshot(table)
    out = stage(*args, **kwargs)
    assert snapshot(table) == before
    return out


def test_run_calls_the_stages_in_order():
    source = textwrap.dedent(inspect.getsource(Recaller.run))
    called = [node.func.id for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in stages.ORDER]
    calls = sorted((node.lineno, node.col_offset, node.func.id) for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                   and node.func.id in stages.ORDER)
    assert [name for _, _, name in calls] == list(stages.ORDER) == sorted(called, key=stages.ORDER.index)
    assert len(source.splitlines()) <= 40


def test_find_reads_the_engine_of_each_partition():
    rows = {1: row(1, "ana climbs at the quarry", unit(1.0, 0.1)), 2: row(2, "bo bakes bread", unit(0.0, 1.0))}
    part = Partition(DIM)
    for r in rows.values():
        part.append(r.id, r.vector)
    table = stages.find(query(mode="associative"), scope([part], visible=lambda i: i != 2), CFG, None, rows, [])
    assert table.ids == (1,)  # 2 is not visible
    assert table.found.semantic[1] == pytest.approx(float(rows[1].vector @ unit(1.0)), abs=1e-6)
    assert table.part_found == ()


def test_score_completes_every_candidates_evidence():
    rows = {1: row(1, "ana climbs", unit(1.0)), 2: row(2, "bo climbs", unit(0.6, 0.8))}
    found = Candidates(terms=[], semantic={1: 1.0})  # 2 found by another list: no engine score
    table = CandidateTable(found=found, ids=(1, 2))
    out = unchanged(stages.score, query(mode="associative"), table, CFG, rows, scope())
    assert out.evidence.value == {1: 1.0, 2: pytest.approx(0.6)}
    assert found.semantic == {1: 1.0}  # the retrievers' output is not touched
    assert out.own == (1, 2)


def test_fuse_sums_reciprocal_ranks_over_the_lists():
    found = Candidates(terms=[], sem_list=[(0.9, 1), (0.8, 2)], kw_list=[(5.0, 2)])
    table = CandidateTable(found=found, ids=(1, 2), evidence=evidence({1: 0.9, 2: 0.8}))
    out = unchanged(stages.fuse, query(), table, CFG)
    assert out.ranks == {1: {"semantic": 1}, 2: {"semantic": 2, "keyword": 1}}
    k = CFG.rrf_k
    assert out.fused == {1: pytest.approx(1 / (k + 1)), 2: pytest.approx(1 / (k + 2) + 1 / (k + 1))}


def test_judge_applies_the_model_and_the_gate():
    rows = {1: row(1, "ana climbs", unit(1.0))}
    table = CandidateTable(found=Candidates(terms=[]), ids=(1,), own=(1,), evidence=evidence({1: 0.8}, "keyword"))
    model = VerdictModel(("evidence",), (10.0,), -5.0)  # log-odds 3 at evidence 0.8
    out = unchanged(stages.judge, query(mode="keyword"), table, CFG, gate(2.0), model, rows, scope())
    assert out.verdict.passes and out.verdict.statistic == pytest.approx(3.0)
    out = stages.judge(query(mode="keyword"), table, CFG, gate(4.0), model, rows, scope())
    assert not out.verdict.passes


def test_admit_by_the_verdict_by_an_exact_token_and_by_a_question_part():
    found = Candidates(terms=[], exact={3: ["A-17"]})
    part = evidence({1: 0.0, 2: 0.0, 3: 0.0, 4: 0.9})
    table = CandidateTable(found=found, ids=(1, 2, 3, 4), evidence=evidence({1: 0.9, 2: 0.2, 3: 0.1, 4: 0.1}),
                           part_evidence=(part,), verdict=verdict(floor=0.5))
    out = unchanged(stages.admit, query(), table, gate(0.6), CFG)
    assert out.admitted == {1: "gate", 3: "exact token", 4: "evidence for part 1 of the question"}
    out = stages.admit(query(), table.but(verdict=verdict(passes=False)), gate(0.6), CFG)
    assert out.admitted == {3: "exact token"}


def test_fuse_question_parts_adds_each_parts_lists():
    found = Candidates(terms=[], sem_list=[(0.9, 1)])
    part = Candidates(terms=[], sem_list=[(0.9, 2)])
    ev = evidence({1: 0.9, 2: 0.5})
    table = CandidateTable(found=found, part_found=(part,), ids=(1, 2), evidence=ev, part_evidence=(ev,),
                           lists={"semantic": [1]})
    out = unchanged(stages.fuse_question_parts, query(), table, CFG)
    assert out.lists == {"semantic": [1], "part 1:semantic": [2]}
    assert out.fused[2] == pytest.approx(CFG.part_weight / (CFG.rrf_k + 1))
    assert stages.fuse_question_parts(query(), table.but(part_found=()), CFG) is not None


def test_keep_head_keeps_the_fused_head():
    ids = tuple(range(1, 41))
    table = CandidateTable(found=Candidates(terms=[], exact={40: ["X"]}), ids=ids,
                           evidence=evidence({i: 0.5 for i in ids}), fused={i: 1.0 / i for i in ids},
                           admitted={i: "gate" for i in ids})
    out = unchanged(stages.keep_head, query(), table, 5)
    assert set(out.admitted) == set(range(1, 25)) | {40}


def test_pull_versions_admits_the_newer_version_behind_its_older():
    rows = {1: row(1, "ana climbs at the quarry", unit(1.0), superseded_by=2),
            2: row(2, "ana climbs at the gym now", unit(0.9, 0.3), created_at=10.0, supersedes=[1])}
    table = CandidateTable(found=Candidates(terms=[]), ids=(1,), evidence=evidence({1: 0.9}, rows=rows),
                           ranks={1: {"semantic": 1}}, fused={1: 0.05}, admitted={1: "gate"}, verdict=verdict())
    out = unchanged(stages.pull_versions, query(), table, rows, scope())
    assert out.admitted[2] == "newer version of an admitted hit" and out.via == {2: 1}
    assert out.fused[2] == pytest.approx(0.05 * 0.999)
    assert 2 in out.evidence.value and 2 not in table.evidence.value


def test_boost_multiplies_the_fused_score():
    rows = {1: row(1, "ana climbs", unit(1.0), created_at=1.0), 2: row(2, "ana climbed", unit(1.0), created_at=2.0)}
    table = CandidateTable(found=Candidates(terms=[]), ids=(1, 2), fused={1: 0.1, 2: 0.1},
                           admitted={1: "gate", 2: "gate"}, in_window=frozenset({1}))
    out = unchanged(stages.boost, query(order="recent"), table, CFG, rows, None, None)
    assert out.boosts[2] == {"recency": 1.0 + CFG.recency_boost}
    assert out.final[1] == pytest.approx(0.1 * (1.0 + CFG.recency_boost))  # in the window, and oldest


def test_order_versions_puts_the_newest_version_first():
    rows = {1: row(1, "old", unit(1.0), created_at=1.0, superseded_by=2),
            2: row(2, "new", unit(1.0), created_at=2.0, supersedes=[1])}
    table = CandidateTable(found=Candidates(terms=[]), ids=(1, 2), evidence=evidence({1: 0.9, 2: 0.8}),
                           admitted={1: "gate", 2: "gate"}, final={1: 0.2, 2: 0.1}, boosts={1: {}, 2: {}},
                           verdict=verdict())
    out = unchanged(stages.order_versions, query(), table, rows)
    assert out.final[2] == 0.2 and out.final[1] < 0.2 and "version order" in out.boosts[2]


def test_sort_orders_by_final_score_then_evidence_then_id():
    table = CandidateTable(found=Candidates(terms=[]), evidence=evidence({1: 0.5, 2: 0.9, 3: 0.9}),
                           admitted={1: "gate", 2: "gate", 3: "gate"}, final={1: 0.3, 2: 0.1, 3: 0.1})
    assert unchanged(stages.sort, query(), table).order == (1, 2, 3)


def _turns():
    speakers = ["Ana", "Bo", "Ana", "Bo"]
    return {i: row(i, f"turn {i}", unit(1.0), created_at=float(i), metadata={"speaker": speakers[i - 1]})
            for i in range(1, 5)}


def test_add_context_fuses_the_turns_next_to_the_first_hits():
    rows = _turns()
    by_time = sorted((r.created_at, i) for i, r in rows.items())
    table = CandidateTable(found=Candidates(terms=[]), admitted={1: "gate"}, order=(1,), verdict=verdict())
    out = unchanged(stages.add_context, query(), table, CFG, rows, by_time, scope())
    assert out.order == (1, 2, 3) and out.context_of == {2: 1, 3: 1}
    assert stages.add_context(query(mode="keyword"), table, CFG, rows, by_time, scope()) is table


def test_prefer_subject_moves_the_named_speakers_turns_up():
    rows = _turns()
    table = CandidateTable(found=Candidates(terms=[]), order=(1, 2, 4, 3))
    out = unchanged(stages.prefer_subject, query("what did ana paint"), table, CFG, rows, 5)
    assert out.order == (1, 2, 3, 4) and out.moved_by == "subject"
    assert stages.prefer_subject(query("what did they paint"), table, CFG, rows, 5) is table


def test_settle_keeps_scores_in_the_new_order_and_admits_context():
    rows = _turns()
    table = CandidateTable(found=Candidates(terms=[]), evidence=evidence({1: 0.9, 3: 0.5}, rows=rows),
                           admitted={1: "gate", 3: "gate"}, final={1: 0.2, 3: 0.1}, boosts={1: {}, 3: {}},
                           ranks={1: {}, 3: {}}, fused={1: 0.2, 3: 0.1}, order=(1, 2, 3), context_of={2: 1})
    out = unchanged(stages.settle, query(), table, (1, 3), 5)
    assert out.admitted[2] == "stored next to hit 1" and out.final[2] == pytest.approx(0.2 * 0.999)
    assert out.final[3] == 0.1 and 2 in out.evidence.value
    assert stages.settle(query(), table.but(order=(1, 3)), (1, 3), 5).final == table.final


def test_a_record_reads_one_candidate_across_the_columns():
    table = CandidateTable(found=Candidates(terms=[]), part_found=(Candidates(terms=[], semantic={2: 0.4}),),
                           evidence=evidence({2: 0.4}), fused={2: 0.1}, admitted={2: "gate"}, final={2: 0.1})
    rec = table.record(2)
    assert (rec.evidence, rec.fused, rec.admitted_by, rec.question_parts, rec.via) == (0.4, 0.1, "gate", (1,), None)
