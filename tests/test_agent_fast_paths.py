"""The fast paths of recall's text handling find exactly what the plain code finds.

``parse_time_hints`` matches ASCII text lowercased with case-sensitive patterns, and
``identifier_tokens`` skips purely alphabetic words before counting digits; both are checked
here against the plain form on awkward input (mixed case, Unicode digits and letters).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hopmem.agent import keyword as kw
from hopmem.agent import temporal
from hopmem.agent.temporal import parse_time_hints

_PIECES = ["now", "NOW", "Currently", "these days", "At The Moment", "latest", "still", "first", "FIRST",
           "originally", "before", "Before or After", "earlier", "or", "OR", "used to", "back then", "day 16",
           "Around Day 3", "about day 120", "3 days ago", "1 DAY AGO", "2024-05-03", "2023-02-30", "yesterday",
           "YESTERDAY", "last week", "Last Week", "what", "did", "I", "say", "phone", "?", ",", "."]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12), st.booleans(), st.sampled_from([None, 0.0, 1e6]))
def test_time_hints_read_ascii_text_as_the_case_insensitive_patterns_do(pieces, comparisons, day_zero):
    text = " ".join(pieces)
    assert text.isascii()
    now = 2e9
    # a trailing non-ASCII word sends the text down the case-insensitive path; it names no time
    plain = parse_time_hints(text + " \u00e9t\u00e9", now, day_zero, comparisons=comparisons)
    assert parse_time_hints(text, now, day_zero, comparisons=comparisons) == plain


def test_the_time_patterns_are_lowercase_so_lowercased_text_can_use_their_cased_twins():
    assert all(p.pattern == p.pattern.lower() for p in temporal._HINTS)
    assert [p.pattern for p in temporal._HINTS_CASED] == [p.pattern for p in temporal._HINTS]


def _identifier_tokens_plain(text: str) -> list[str]:
    out: dict[str, None] = {}
    for match in kw._IDENT.finditer(text):
        token = match.group(0).rstrip(".:/-")
        digits = sum(ch.isdigit() for ch in token)
        if not digits:
            continue
        letters = any(ch.isalpha() for ch in token)
        separators = any(ch in kw._SEPARATORS for ch in token)
        if letters or digits >= 3 or (separators and digits >= 3):
            out.setdefault(token.lower(), None)
    return list(out)


_ALPHABET = st.sampled_from(list("abcXYZ019 -._#:/") + ["\u00b2", "\u0663", "\u00e9", "\u4e00", "\u2167", " "])


@settings(max_examples=500, deadline=None)
@given(st.text(_ALPHABET, max_size=40))
def test_identifier_tokens_fast_path_finds_what_counting_finds(text):
    assert kw.identifier_tokens(text) == _identifier_tokens_plain(text)


def test_identifier_tokens_examples():
    assert kw.identifier_tokens("Ticket PROJ-4417 on v2.3.1, day 3, 2 hours, 53300") == ["proj-4417", "v2.3.1", "53300"]
