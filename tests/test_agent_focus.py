"""The final order's focus: a question's subject's own turns move up, and a "when" question prefers turns that
date an event."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopmem.agent import AgentMemory, Tuning
from hopmem.agent.ranking import CONTEXT_KEEP, named_source, prefer_subject
from hopmem.agent.temporal import asks_for_date
from hopmem.errors import InvalidInput
from hopmem.text.encoders import HashingEncoder

ENC = HashingEncoder(384)


class _Row:
    def __init__(self, speaker: object) -> None:
        self.metadata = None if speaker is None else {"speaker": speaker}


@pytest.mark.parametrize("question, expected", [
    ("When did Caroline go to the support group?", True),
    ("when was the launch", True),
    ("In what year did Tim go to the Smoky Mountains?", True),
    ("What day did Tim get into his study abroad program?", True),
    ("Which month did they move?", True),
    ("How long ago was Caroline's 18th birthday?", True),
    ("What did Caroline research?", False),
    ("Whenever I call, who answers?", False),
    ("What has Melanie painted?", False),
])
def test_asks_for_date_reads_the_question_form(question, expected):
    assert asks_for_date(question) is expected


def test_the_subject_is_the_one_source_the_question_names():
    rows = {1: _Row("Melanie"), 2: _Row("Caroline"), 3: _Row(None), 4: _Row("Anna Lee"), 5: _Row(42)}
    assert named_source("What has Melanie painted?", rows, [1, 2, 3]) == "melanie"  # type: ignore[arg-type]
    assert named_source("what has MELANIE's kid painted", rows, [1, 2]) == "melanie"  # type: ignore[arg-type]
    # two named sources: no one subject; none named: none
    assert named_source("What have Caroline and Melanie both painted?", rows, [1, 2]) is None  # type: ignore[arg-type]
    assert named_source("What did she paint?", rows, [1, 2, 3]) is None  # type: ignore[arg-type]
    # only the sources among the ids count, by whole words
    assert named_source("What has Melanie painted?", rows, [2, 3]) is None  # type: ignore[arg-type]
    assert named_source("What did Melanies say?", rows, [1]) is None  # type: ignore[arg-type]
    assert named_source("Where does Anna Lee live?", rows, [1, 4, 5]) == "anna lee"  # type: ignore[arg-type]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 30), unique=True, max_size=15), st.sets(st.integers(0, 30)), st.floats(0.0, 1.0))
def test_preferring_the_subject_keeps_the_head_and_every_entry_once(order, theirs, boost):
    rows = {i: _Row("A" if i in theirs else "B") for i in range(31)}
    out = prefer_subject(order, rows, "a", boost, 20.0)  # type: ignore[arg-type]
    assert out[:CONTEXT_KEEP] == order[:CONTEXT_KEEP]
    assert sorted(out) == sorted(order)
    if boost == 0.0:
        assert out == order
    # the subject's turns keep their order among themselves, and so do the others
    assert [i for i in out if i in theirs] == [i for i in order if i in theirs]
    assert [i for i in out if i not in theirs] == [i for i in order if i not in theirs]


def _chat(tuning: Tuning) -> AgentMemory:
    mem = AgentMemory.open(":memory:", encoder=ENC, namespace="chat", tuning=tuning)
    t = 1.0e6
    for speaker, text in [("Caroline", "What has Melanie painted lately? Melanie, show me!"),
                          ("Caroline", "Melanie, has Melanie painted the lake? What has Melanie painted?"),
                          ("Caroline", "I wonder what Melanie has painted, Melanie is so talented."),
                          ("Caroline", "Melanie painted? Melanie, you painted that?"),
                          ("Melanie", "I did a watercolour of a horse last month, here it is.")]:
        mem.remember(f"{speaker}: {text}", created_at=t, metadata={"speaker": speaker})
        t += 7 * 86400.0  # a week apart: no turn is another's context
    for k in range(15):
        mem.remember(f"Caroline: unrelated note number {k} about the garden hose and tomatoes",
                     created_at=5e7 + k * 86400.0, metadata={"speaker": "Caroline"})
    return mem


def test_the_subjects_own_turn_moves_up():
    question = "What has Melanie painted?"
    with _chat(Tuning(subject_boost=0.0)) as off, _chat(Tuning()) as on:
        before = [h.text for h in off.rank(question, limit=5)]
        hits = on.rank(question, limit=5)
    after = [h.text for h in hits]
    own = "Melanie: I did a watercolour of a horse last month, here it is."
    assert after[:CONTEXT_KEEP] == before[:CONTEXT_KEEP]  # the first hits keep their places
    assert after.index(own) < before.index(own)
    assert all(a.score > b.score for a, b in zip(hits, hits[1:]))  # scores follow the order
    assert any("subject" in h.explanation.boosts for h in hits)  # the turns it passed say why they fell


def test_a_when_question_prefers_the_turn_that_dates_the_event():
    def build(tuning: Tuning) -> AgentMemory:
        mem = AgentMemory.open(":memory:", encoder=ENC, namespace="chat", tuning=tuning)
        mem.remember("Caroline: when I go to the LGBTQ support group, the LGBTQ support group is so kind",
                     created_at=2.0e6, metadata={"speaker": "Caroline"})
        mem.remember("Caroline: I went to a LGBTQ support group yesterday", created_at=1.0e6,
                     metadata={"speaker": "Caroline"})
        for k in range(10):
            mem.remember(f"Melanie: note {k} on the bakery queue and the weather", created_at=3e6 + k * 86400.0,
                         metadata={"speaker": "Melanie"})
        return mem

    question = "When did Caroline go to the LGBTQ support group?"
    with build(Tuning(date_boost=0.0)) as off, build(Tuning()) as on:
        assert not off.rank(question, limit=2)[0].text.endswith("yesterday")
        top = on.rank(question, limit=2)[0]
        other = on.rank("Who was at the LGBTQ support group?", limit=2)[0]
    assert top.text.endswith("yesterday") and top.explanation.boosts["dated"] == 1.5
    assert top.dates[0].date == "1970-01-11"
    assert "dated" not in other.explanation.boosts  # only a question that asks when


@pytest.mark.parametrize("field", ["subject_boost", "date_boost"])
@pytest.mark.parametrize("value", [-0.1, 1.5, "x"])
def test_focus_boosts_are_checked(field, value):
    with pytest.raises(InvalidInput, match=f"{field}: expected a number in \\[0, 1\\]"):
        Tuning(**{field: value})
