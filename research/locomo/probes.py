"""Self-calibration probes: questions derived from a memory's own entries, and generic unrelated questions.

A memory can set its own verdict threshold without anyone's labelled
questions: questions it can answer are made from its own entries (two of an
entry's content words, with the entry's speaker), questions it cannot answer
are a fixed, shipped set of generic questions about everyday topics, with the
memory's own people's names put in (real unanswerable questions name them too).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

__all__ = ["GENERIC_QUESTIONS", "entry_probes", "generic_probes"]

#: Everyday questions about things a personal conversation rarely holds; ``{a}``, ``{b}``: two people's names.
GENERIC_QUESTIONS = (
    "What is the capital of Australia according to {a}?",
    "Which programming language did {a} use for the payroll system?",
    "How did {b} fix the leaking dishwasher?",
    "What mortgage rate did {a} get from the bank?",
    "Which airline lost {b}'s luggage?",
    "What did {a} think of the new tax regulations?",
    "How many cylinders does {b}'s tractor engine have?",
    "What is {a}'s blood type?",
    "Which chess opening does {b} prefer?",
    "What did {a} order at the sushi restaurant in Osaka?",
    "When did {b} renew the car insurance?",
    "What was the score of the cricket match {a} watched?",
    "Which cryptocurrency did {b} invest in?",
    "How did {a} repair the roof after the hailstorm?",
    "What did {b}'s dentist recommend?",
    "Which university did {a}'s cousin attend for law?",
    "What brand of lawnmower does {b} own?",
    "How long was {a}'s layover in Frankfurt?",
    "What did {b} learn in the welding course?",
    "Which podcast about astronomy does {a} listen to?",
    "What did {a} say about the stock market crash?",
    "How much did {b} pay for the parking ticket?",
    "What kind of fertiliser does {a} use on tomatoes?",
    "Which opera did {b} see in Vienna?",
    "What is the password policy at {a}'s office?",
    "Why did {b} cancel the gym membership in Tokyo?",
    "What did {a} build with the 3D printer?",
    "Which vaccine did {b}'s cat get last week?",
    "How did {a} get a refund for the broken laptop?",
    "What did {b} think about the election debate?",
    "What is the name of {a}'s accountant?",
    "Which mountain did {b} ski down in Switzerland?",
    "What did {a} bake for the office potluck?",
    "How many solar panels did {b} install?",
    "What did {a}'s landlord say about the heating bill?",
    "Which football club does {b}'s grandfather support?",
    "What allergy medication does {a} take?",
    "What did {b} write in the complaint to the council?",
    "Which violin sonata did {a} practise for the audition?",
    "How did {b} organise the warehouse inventory?",
)


def generic_probes(names: tuple[str, str]) -> list[str]:
    a, b = names
    return [q.format(a=a, b=b) if i % 2 == 0 else q.format(a=b, b=a) for i, q in enumerate(GENERIC_QUESTIONS)]


def entry_probes(units: list[tuple[str, str]], content: Callable[[str], list[str]], n: int = 40,
                 seed: int = 0) -> list[str]:
    """``n`` questions made from entries ``(speaker, text)``: "What did {speaker} say about {w1} and {w2}?"
    with two content words of one entry (``content(text)`` lists them), entries and words drawn with ``seed``."""
    rng = random.Random(seed)
    pool = [(s, ws) for s, t in units if len(ws := content(re.sub(r"^[^:]+:\s*", "", t))) >= 2]
    out = []
    for speaker, words in rng.sample(pool, min(n, len(pool))):
        w1, w2 = rng.sample(words, 2)
        out.append(f"What did {speaker} say about {w1} and {w2}?")
    return out
