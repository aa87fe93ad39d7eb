"""Questions that ask for several things of one kind read deeper (``Tuning.aggregation_k``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hopmem.agent import AgentMemory, RecallConfig, Tuning
from hopmem.agent.parts import asks_for_several
from hopmem.errors import InvalidInput
from hopmem.text.encoders import HashingEncoder

ENC = HashingEncoder(384)


@pytest.mark.parametrize("question, expected", [
    ("What activities does Melanie partake in?", True),
    ("Which cities has John been to?", True),
    ("What are Joanna's hobbies?", True),
    ("How many children does Melanie have?", True),
    ("What animal do both Nate and Joanna like?", True),
    ("What do they have in common?", True),
    ("What did Caroline research?", False),
    ("What is Caroline's identity?", False),
    ("When did Melanie run a charity race?", False),
    ("Where does Ana live?", False),
])
def test_asks_for_several(question: str, expected: bool) -> None:
    assert asks_for_several(question) is expected


def _memory(path: Path, assoc_k: int, aggregation_k: int) -> AgentMemory:
    mem = AgentMemory.open(path, encoder=ENC, namespace="n", config=RecallConfig(assoc_k=assoc_k),
                           tuning=Tuning(aggregation_k=aggregation_k))
    for k in range(40):
        mem.remember(f"Ana: note {k} about hobby number {k} and the weekend plans {k % 7}", created_at=1000.0 + k,
                     metadata={"speaker": "Ana"})
    return mem


def _semantic(hits: list) -> set[int]:
    return {h.entry_id for h in hits if "semantic" in h.explanation.sources}


def test_an_aggregation_question_reads_more_entries(tmp_path: Path) -> None:
    narrow = _memory(tmp_path / "narrow.db", assoc_k=4, aggregation_k=4)
    deep = _memory(tmp_path / "deep.db", assoc_k=4, aggregation_k=16)
    try:
        several = "What hobbies does Ana have on the weekend?"
        assert len(_semantic(narrow.rank(several, limit=40))) <= 4
        assert len(_semantic(deep.rank(several, limit=40))) > 4
        # any other question reads assoc_k entries, whatever aggregation_k says
        one = "Where does Ana spend the weekend?"
        assert [h.entry_id for h in narrow.rank(one, limit=40)] == [h.entry_id for h in deep.rank(one, limit=40)]
    finally:
        narrow.close()
        deep.close()


def test_the_deeper_read_sees_entries_stored_after_the_engine_was_built(tmp_path: Path) -> None:
    mem = _memory(tmp_path / "m.db", assoc_k=4, aggregation_k=64)
    try:
        question = "What hobbies does Ana have?"
        before = _semantic(mem.rank(question, limit=50))  # builds the engine
        new = mem.remember("Ana: my new hobby is kayaking", created_at=5000.0, metadata={"speaker": "Ana"})
        after = _semantic(mem.rank(question, limit=50))
        assert new.id not in before and new.id in after
    finally:
        mem.close()


def test_aggregation_k_is_validated() -> None:
    with pytest.raises(InvalidInput, match="aggregation_k: expected an int >= 1"):
        Tuning(aggregation_k=0)
