"""Dedup and supersession on chat: restatements merge, later similar statements and other speakers do not."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hopmem.agent import AgentMemory
from hopmem.agent.writes import NEAR_DUPLICATE_WINDOW
from hopmem.text.encoders import HashingEncoder

ENC = HashingEncoder(384)
DAY = 86400.0


def open_mem(tmp_path, name="m.db", **kwargs):
    return AgentMemory.open(tmp_path / name, encoder=ENC, namespace="chat", **kwargs)


def test_a_near_duplicate_merges_only_when_close_in_time(tmp_path):
    mem = open_mem(tmp_path, config=None)
    first = mem.remember("Next month I am having an art show at the gallery", created_at=1000.0,
                         metadata={"turn": 1})
    again = mem.remember("next month  I am having an art show at the gallery!", created_at=1000.0 + 60,
                         metadata={"turn": 2})
    weeks = mem.remember("Next month I am having an art show at the gallery.", created_at=1000.0 + 20 * DAY,
                         metadata={"turn": 3})
    assert again.merged and again.id == first.id
    assert not weeks.merged and weeks.id != first.id
    # the merged turn's own metadata and time stay reachable
    assert mem.variants(first.id) == [{"text": "next month  I am having an art show at the gallery!",
                                       "metadata": {"turn": 2}, "created_at": 1000.0 + 60}]
    mem.close()


def test_the_same_text_merges_whenever_it_was_said(tmp_path):
    mem = open_mem(tmp_path)
    first = mem.remember("The billing service runs on Postgres 16.", created_at=0.0)
    later = mem.remember("The billing service runs on Postgres 16.", created_at=90 * DAY)
    assert later.merged and later.id == first.id
    mem.close()


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=0.0, max_value=10 * NEAR_DUPLICATE_WINDOW))
def test_merging_a_near_duplicate_follows_the_window(tmp_path_factory, gap):
    mem = open_mem(tmp_path_factory.mktemp("w"))
    first = mem.remember("We moved the standup to half past nine every morning", created_at=5000.0)
    second = mem.remember("we moved the standup to half past nine every morning.", created_at=5000.0 + gap)
    assert second.merged == (gap <= NEAR_DUPLICATE_WINDOW)
    assert len(mem.entries()) == (1 if second.merged else 2) and first.id == mem.entries()[0].id
    mem.close()


def test_conversation_turns_are_never_superseded_automatically(tmp_path):
    mem = open_mem(tmp_path)
    old = mem.remember("Caroline: I work at the animal shelter now", metadata={"speaker": "Caroline"},
                       created_at=0.0)
    other = mem.remember("Caroline: I work at the animal shelter now again", metadata={"speaker": "Melanie"},
                         created_at=DAY)
    same = mem.remember("Caroline: I work at the animal shelter now again", metadata={"speaker": "Caroline"},
                        created_at=2 * DAY)
    # the same text from another speaker is not merged; no turn supersedes another
    assert len({old.id, other.id, same.id}) == 3
    assert all(mem.get(e.id).superseded_by is None for e in (old, other, same))
    # statements without a source keep cue-based supersession
    fact = mem.remember("User works at the animal shelter", created_at=3 * DAY)
    update = mem.remember("User now works at the city library instead of the animal shelter", created_at=4 * DAY)
    assert mem.get(fact.id).superseded_by == update.id
    mem.close()


def test_explicit_supersession_still_works_across_sources(tmp_path):
    mem = open_mem(tmp_path)
    old = mem.remember("The meeting is on Monday", metadata={"speaker": "A"})
    new = mem.remember("The meeting is on Tuesday", metadata={"speaker": "B"}, supersedes=old.id)
    assert mem.get(old.id).superseded_by == new.id
    mem.close()
