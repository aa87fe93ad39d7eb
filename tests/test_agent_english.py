"""English word frequencies (hopmem.agent.english) and the novelty they can weigh."""

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopmem.agent import keyword as kw
from hopmem.agent.english import _table, zipf
from hopmem.agent.evidence import novelty
from hopmem.agent.index import Partition

wordfreq = pytest.importorskip("wordfreq")
LARGE = wordfreq.get_frequency_dict("en", "large")
PLAIN = [w for w in list(LARGE)[::97] if re.fullmatch(r"[a-z]+", w)]  # every 97th word, plain letters only


def test_table_is_sorted_and_complete():
    keys, values = _table()
    assert len(keys) == len(values) == len(LARGE)
    assert all(keys[i] <= keys[i + 1] for i in range(len(keys) - 1))


@given(st.sampled_from(PLAIN))
def test_zipf_matches_the_word_list(word):
    # the oracle: wordfreq's own frequency of the word, as a Zipf value
    assert zipf(word) == pytest.approx(math.log10(LARGE[word]) + 9.0, abs=0.006)


@given(st.text(alphabet="qxzjvkw", min_size=12, max_size=20))
def test_a_word_the_list_lacks_is_zero(word):
    if word not in LARGE:
        assert zipf(word) == 0.0


def test_common_words_are_more_frequent():
    assert zipf("the") > 7.0
    assert zipf("the") > zipf("moment") > zipf("renovation") > zipf("hemsedal") == 0.0


def _partition(*texts):
    part = Partition(dim=4)
    for i, text in enumerate(texts):
        part.append(i, np.zeros(4, dtype=np.float32))
        part.count_terms({kw.stem(t) for t in kw.query_terms(text)}, +1)
    return part


def _novelty(query, parts, ceiling=7.0):
    return novelty(kw.query_terms(query), parts, ceiling)


def test_novelty_with_a_ceiling_weighs_everyday_words_less():
    parts = [_partition("User's mother moved to a flat in Leeds", "User's kitchen tap is leaking")]
    # one unknown word each: an everyday one ("moment") and a specific one ("renovation")
    everyday = _novelty("mother flat moment", parts, 7.0)
    specific = _novelty("mother flat renovation", parts, 7.0)
    assert 0.0 < everyday < specific < 1.0
    assert _novelty("garage renovation", parts, 7.0) == 1.0
    assert _novelty("kitchen leaking", parts, 7.0) == 0.0
    # a ceiling below every word's frequency weighs nothing: nothing is novel
    assert _novelty("the moment", parts, 1.0) == 0.0


def test_novelty_counts_a_stem_once():
    parts = [_partition("User paid the invoice")]
    # a stem counts once, weighed by its first word
    assert _novelty("renovations renovation invoice", parts, 7.0) == _novelty("renovations invoice", parts, 7.0)
