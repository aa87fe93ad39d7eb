"""The conversational context in the ranking: entries stored next to the first hits are fused in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hopmem.agent import AgentMemory, Tuning
from hopmem.agent.ranking import CONTEXT_GAP, CONTEXT_KEEP, context_neighbours, fuse_context
from hopmem.text.encoders import HashingEncoder

ENC = HashingEncoder(384)


class _Row:
    def __init__(self, created_at: float, part: str | None = None, speaker: str | None = "A") -> None:
        self.created_at = created_at
        self.partition = part
        self.metadata = None if speaker is None else {"speaker": speaker}


def test_neighbours_alternate_sides_stay_in_scope_and_in_the_gap():
    rows = {1: _Row(0.0), 2: _Row(10.0), 3: _Row(20.0, "s"), 4: _Row(30.0), 5: _Row(40.0), 6: _Row(50.0),
            7: _Row(60.0 + CONTEXT_GAP + 1)}
    by_time = sorted((r.created_at, i) for i, r in rows.items())
    out = context_neighbours(rows, by_time, [4], lambda i: True)  # type: ignore[arg-type]
    assert out == [(2, 4), (5, 4), (1, 4), (6, 4)]  # 3 is another scope, 7 too far in time
    assert context_neighbours(rows, by_time, [4], lambda i: i != 2) == [(1, 4), (5, 4), (6, 4)]  # type: ignore[arg-type]
    # only conversation turns (metadata naming a source) have context, and are context
    rows[5] = _Row(40.0, speaker=None)
    assert context_neighbours(rows, by_time, [4], lambda i: True) == [(2, 4), (6, 4), (1, 4)]  # type: ignore[arg-type]
    assert context_neighbours(rows, by_time, [5], lambda i: True) == []  # type: ignore[arg-type]
    rows[5] = _Row(40.0)
    # seeds are never each other's context, and an entry comes once
    assert all(i not in (4, 5) for i, _ in context_neighbours(rows, by_time, [4, 5], lambda i: True))  # type: ignore[arg-type]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 30), unique=True, max_size=12), st.lists(st.integers(0, 30), unique=True, max_size=8),
       st.floats(0.0, 1.0))
def test_fusing_context_keeps_the_head_and_every_entry_once(order, context, weight):
    out = fuse_context(order, context, weight, 20.0)
    assert out[:len(order[:CONTEXT_KEEP])] == order[:CONTEXT_KEEP]
    assert sorted(out) == sorted(set(order) | set(context))
    if weight == 0.0 or not context:
        assert out[:len(order)] == order


def test_a_reply_is_recalled_through_the_turn_it_answers(tmp_path):
    def build(tuning):
        mem = AgentMemory.open(tmp_path / f"m{tuning.context_weight}.db", encoder=ENC, namespace="chat",
                               tuning=tuning)
        t = 1000.0
        for text in ["Melanie: Have you ever been to the pottery studio downtown?", "Caroline: Yes, twice! Loved it.",
                     "Melanie: The weather was awful on Monday.", "Caroline: My sister visited from Boston."]:
            mem.remember(text, created_at=t, metadata={"speaker": text.split(":")[0]})
            t += 5.0
        for k in range(20):
            mem.remember(f"Caroline: unrelated note number {k} about the garden hose and tomatoes", created_at=5e5 + k,
                         metadata={"speaker": "Caroline"})
        return mem

    on = build(Tuning())
    off = build(Tuning(context_weight=0.0))
    q = "Has Caroline been to the pottery studio?"
    ranked_on = [h.text for h in on.rank(q, limit=5)]
    ranked_off = [h.text for h in off.rank(q, limit=5)]
    assert ranked_on[0] == ranked_off[0] == "Melanie: Have you ever been to the pottery studio downtown?"
    assert "Caroline: Yes, twice! Loved it." in ranked_on
    hits = on.rank(q, limit=5)
    assert all(a.score > b.score for a, b in zip(hits, hits[1:]))  # scores follow the order
    reply = next(h for h in hits if h.text.startswith("Caroline: Yes"))
    assert reply.created_at == 1005.0
    on.close()
    off.close()
