"""The parts of a multi-part question ("Where do I climb now, and what's the hardest route there?").

Such a question is answered by several entries, each about one part. Searched
as a whole, the part with more words in common with the memory takes the top
of every list and the other part's answer can fall out of the first few hits.
So a question that joins clauses, each starting with a question word, is also
searched part by part (:mod:`~hopmem.agent.recall`): the parts' candidate lists
join the fusion and each part admits its own best answers. The split is
lexical and conservative: only at a comma or "and" directly before a question
word, only when every part starts with a question word ("In the last session,
what did Ana say?" is one question) and has a word of its own to search for.

A question can also ask for several things of one kind ("What activities does
Melanie partake in?", "How many children ...", "What are ..."):
:func:`asks_for_several` tells it by its English form, and recall reads
deeper for it (``Tuning.aggregation_k``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["split_parts", "asks_for_several"]

_QUESTION_WORDS = (r"what|what's|whats|which|who|who's|whom|whose|where|when|why|how|did|do|does|is|are|was|were|"
                   r"can|could|will|would|have|has")
# A clause boundary: ", and <q-word>", ", <q-word>", " and <q-word>" (the word starts the next part).
_LEAD = rf"(?:(?:in|on|at|for|from|to|with|by)\s+)?(?:{_QUESTION_WORDS})\b"  # "in which city", "what"
_STARTS = re.compile(_LEAD, re.IGNORECASE)
_BOUNDARY = re.compile(rf"\s*(?:,\s*(?:and\s+)?|\s+and\s+|;\s*)(?={_LEAD})", re.IGNORECASE)


def split_parts(text: str, terms: Callable[[str], list[str]], max_parts: int = 4) -> list[str]:
    """The parts of ``text`` when it joins two or more question clauses, else ``[]``.

    ``terms(part)`` gives a part's searchable words: every part needs at least
    one (so "Where and when does flight FI 521 go?" stays whole), and every
    part starts with a question word. At most
    ``max_parts`` parts; a question with more boundaries stays whole.
    """
    pieces = [p.strip(" ,;?") for p in _BOUNDARY.split(text)]
    pieces = [p for p in pieces if p]
    if not 2 <= len(pieces) <= max_parts:
        return []
    if not all(_STARTS.match(p) and terms(p) for p in pieces):
        return []
    return pieces


_AUX = frozenset("is are was were do does did has have had will would can could should might may must".split())
_NOT_PLURAL = frozenset("this his its was has does is us yes less unless always perhaps".split())
_SEVERAL = re.compile(r"\bhow many\b|\bboth\b|\bin common\b")
_WORDS = re.compile(r"[a-z']+")


def asks_for_several(text: str) -> bool:
    """Whether a question's English form asks for several things of one kind.

    True for "how many", "both", "in common", "what/which are/were ...", and
    a plural noun after "what" or "which" and before the verb ("What
    *activities* does ...", "Which *cities* ..."). Such a question's answer is
    spread over several entries, each naming one instance, which rarely
    resemble the question. English only.
    """
    q = text.lower()
    if _SEVERAL.search(q):
        return True
    ws = _WORDS.findall(q)
    if not ws or ws[0] not in ("what", "which"):
        return False
    if len(ws) > 1 and ws[1] in ("are", "were"):
        return True
    for w in ws[1:]:
        if w in _AUX:
            return False
        if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")) and w not in _NOT_PLURAL:
            return True
    return False
