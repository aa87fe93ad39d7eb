"""Query text for the keyword side: terms, FTS5 queries, exact identifier tokens.

No model is involved: the keyword retriever is SQLite FTS5 (``porter unicode61``
tokenizer, BM25 ranking). This module turns a free-text query into an FTS5
``MATCH`` expression and finds the tokens of a query that name one specific
thing (a ticket ``PROJ-4417``, a version ``v2.3.1``, a host ``db-eu-west-2``),
which embeddings are bad at and which are evidence on their own when they are
rare in the memory.
"""

from __future__ import annotations

import functools
import re

__all__ = [
    "words",
    "STOP_WORDS",
    "query_terms",
    "fts_or_query",
    "fts_phrase",
    "identifier_tokens",
    "contains_token",
    "normalize_text",
    "stem",
]

# Function words and question scaffolding ("what", "so far", "mentioned"): they
# match nearly every entry, or none, and say nothing about the subject. English
# only and kept short on purpose; a common term that is not here is still
# down-weighted by BM25's IDF.
STOP_WORDS: frozenset[str] = frozenset(
    """
    a an the of to in on at for and or but nor is are was were be been being am do does did
    done i me my mine myself we us our ours you your yours he him his she her hers it its they
    them their theirs this that these those there here what which who whom whose when where why
    how has have had having with without from by as into onto than then so if not no yes any all
    some can could would should will shall may might must just also too very s t ve re ll d m
    what's whats it's its about up out over under again once only own same such more most other
    each few both much many get got go going gone let lets tell told know please
    far ever thing things anything something everything name named kind sort long often really
    actually remind remember recall mention mentioned say said happen happened happening
    """.split()
)

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

# An identifier: letters/digits joined by - . _ # : / with at least one digit.
_IDENT = re.compile(r"#?[^\W_](?:[\w.#:/-]*[^\W_])?", re.UNICODE)
_SEPARATORS = frozenset("-._#:/")


def words(text: str) -> list[str]:
    """The word tokens of ``text``, lowercased: runs of letters and digits (``_`` and punctuation split)."""
    return _WORD.findall(text.lower())


def normalize_text(text: str) -> str:
    """Lowercase, collapse whitespace: the form used to detect verbatim duplicates."""
    return " ".join(text.lower().split())


def query_terms(text: str) -> list[str]:
    """Content words of ``text``: lowercased, stop words and 1-letter words dropped.

    Order is kept and duplicates removed. Digits count as words (``"4417"``).
    """
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if word in STOP_WORDS or (len(word) < 2 and not word.isdigit()):
            continue
        seen.setdefault(word, None)
    return list(seen)


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def fts_or_query(terms: list[str]) -> str | None:
    """An FTS5 query matching any of ``terms`` (each quoted), or None for no terms."""
    if not terms:
        return None
    return " OR ".join(_quote(t) for t in terms)


def fts_phrase(token: str) -> str | None:
    """An FTS5 phrase for ``token``: its word parts, adjacent, in order."""
    parts = _WORD.findall(token.lower())
    if not parts:
        return None
    return _quote(" ".join(parts))


def identifier_tokens(text: str) -> list[str]:
    """Tokens of ``text`` that look like identifiers, lowercased, in order, unique.

    A token qualifies when it holds a digit and either a letter (``v2``,
    ``NW-88213``), a separator (``16:30`` does not: it needs a letter or
    a dash/dot/hash with at least three digits overall), or at least three
    digits (``53300``). Plain small numbers ("day 3", "2 hours") do not.
    """
    out: dict[str, None] = {}
    for match in _IDENT.finditer(text):
        token = match.group(0).rstrip(".:/-")
        if token.isalpha():  # most words: no digit, so no identifier (the count below is the slow path)
            continue
        digits = sum(ch.isdigit() for ch in token)
        if not digits:
            continue
        letters = any(ch.isalpha() for ch in token)
        separators = any(ch in _SEPARATORS for ch in token)
        if letters or digits >= 3 or (separators and digits >= 3):
            out.setdefault(token.lower(), None)
    return list(out)


def contains_token(text: str, token: str) -> bool:
    """Whether ``token`` occurs in ``text`` as a whole token (case-insensitive)."""
    pattern = r"(?<![\w])" + re.escape(token) + r"(?![\w])"
    return re.search(pattern, text.lower()) is not None


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """A light English suffix stripper (plural, -ing, -ed), for counting known words.

    Deliberately crude and cheap: it only has to make "lives" and "live",
    "weighs" and "weigh" count as the same word when measuring how much of a
    query the memory has never seen. Keyword *matching* uses FTS5's Porter
    stemmer.
    """
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("es") and w[-3] in "sxz":
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w
