"""The hybrid verdict's features read off the fused ranking: content share and channel agreement."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopmem.agent import DEFAULT_GATES, DEFAULT_MODELS, AgentMemory
from hopmem.agent.english import zipf
from hopmem.agent.evidence import EVERYDAY_ZIPF, content_share, content_words
from hopmem.agent.index import Partition
from hopmem.agent.keyword import STOP_WORDS, stem
from hopmem.agent.verdict import AGREEMENT_DEPTH, AGREEMENT_TOP, SHARE_DEPTH, VERDICT_FEATURES, ranking_features
from hopmem.text.encoders import HashingEncoder

ENC = HashingEncoder(384)


class _Row:
    def __init__(self, stems: set[str]) -> None:
        self.stems = frozenset(stem(w) for w in stems)


class _Part:
    def __init__(self, live: int, df: dict[str, int]) -> None:
        self.live = live
        self.df = df


def test_content_words_drop_stop_words_everyday_words_and_possessives():
    words = content_words("What did Caroline's therapist say about the pottery workshop and the weather?")
    assert "pottery" in words and "workshop" in words and "therapist" in words
    assert "caroline" in words  # a name is a content word: the memory-wide filter drops frequent ones
    assert not {"what", "did", "say", "about", "the", "and"} & set(words)
    assert len(words) == len(set(words))


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyz '-?.ABC")), max_size=80))
def test_content_words_are_specific_lowercase_words(text):
    for w in content_words(text):
        assert len(w) >= 3 and w == w.lower() and w not in STOP_WORDS and zipf(w) < EVERYDAY_ZIPF


def test_content_share_weighs_rare_words_more_and_is_one_without_words():
    part: Partition = _Part(10, {})  # type: ignore[assignment]
    rare, common = "kayak", "weekend"
    assert zipf(rare) < zipf(common) < EVERYDAY_ZIPF
    with_rare = content_share([rare, common], [_Row({"kayak"})], [part], 0.05)  # type: ignore[list-item]
    with_common = content_share([rare, common], [_Row({"weekend"})], [part], 0.05)  # type: ignore[list-item]
    assert 0.5 < with_rare < 1.0 and 0.0 < with_common < 0.5
    assert content_share([], [], [part], 0.05) == 1.0
    assert content_share([rare], [], [part], 0.05) == 0.0


def test_content_share_ignores_words_in_most_entries_of_a_large_memory():
    # a speaker's name is in most turns: in a memory of 200+ entries it says nothing about the subject
    big: Partition = _Part(400, {stem("caroline"): 300, stem("kayak"): 2})  # type: ignore[assignment]
    small: Partition = _Part(100, {stem("caroline"): 90, stem("kayak"): 2})  # type: ignore[assignment]
    found = [_Row({"caroline"})]
    assert content_share(["caroline", "kayak"], found, [big], 0.05) == 0.0  # type: ignore[arg-type]
    assert content_share(["caroline", "kayak"], found, [small], 0.05) > 0.0  # type: ignore[arg-type]
    assert content_share(["caroline"], found, [big], 0.05) == 1.0  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["kayak", "pottery", "violin", "weekend", "garden", "adoption"]), unique=True),
       st.lists(st.sets(st.sampled_from(["kayak", "pottery", "violin", "weekend", "garden"])), max_size=12))
def test_content_share_is_a_share_and_grows_with_what_is_found(words, rows):
    part: Partition = _Part(10, {})  # type: ignore[assignment]
    found = [_Row(r) for r in rows]
    share = content_share(words, found, [part], 0.05)  # type: ignore[arg-type]
    assert 0.0 <= share <= 1.0
    more = content_share(words, [*found, _Row({"adoption"})], [part], 0.05)  # type: ignore[arg-type]
    assert more >= share


def test_ranking_features_count_agreement_in_the_top_only():
    rows = {i: _Row(set()) for i in range(20)}
    part: Partition = _Part(20, {})  # type: ignore[assignment]
    ranks = {i: {"semantic": i + 1, "keyword": i + 1} for i in range(20)}
    values = ranking_features(list(range(20)), ranks, rows, [], [part], 0.05)  # type: ignore[arg-type]
    assert values == {"content_share": 1.0, "agreement": float(AGREEMENT_TOP)}
    ranks[0] = {"semantic": 1}  # found by one channel only
    ranks[1] = {"semantic": 2, "keyword": AGREEMENT_DEPTH + 1}  # too deep in the keyword list
    values = ranking_features(list(range(20)), ranks, rows, [], [part], 0.05)  # type: ignore[arg-type]
    assert values["agreement"] == AGREEMENT_TOP - 2
    assert SHARE_DEPTH >= AGREEMENT_TOP


def test_hybrid_recall_reports_the_default_features_and_their_log_odds(tmp_path):
    mem = AgentMemory.open(tmp_path / "m.db", encoder=ENC, namespace="n")
    mem.remember("We adopted a rescue greyhound called Biscuit last spring.")
    mem.remember("The pottery class meets on Thursday evenings.")
    sel = mem.recall("What is the greyhound called?", record=False)
    assert set(VERDICT_FEATURES["hybrid"]) <= set(sel.features)
    assert sel.features["content_share"] == pytest.approx(1.0)  # "greyhound" is in the best candidates
    assert sel.statistic == pytest.approx(DEFAULT_MODELS["hybrid"].log_odds(sel.features), abs=1e-4)
    assert sel.tau == DEFAULT_GATES["hybrid"].tau and not sel.calibrated
    never = mem.recall("Which violin concerto did the orchestra rehearse?", record=False)
    assert never.features["content_share"] == 0.0
    assert never.statistic < sel.statistic
    mem.close()
