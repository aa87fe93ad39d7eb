"""The project's own evaluation sets (``benchmarks/data/agent_eval``) as LoCoMo conversations.

:func:`eval_conversation` reads one set the way :mod:`.data` reads a LoCoMo
conversation: one unit per turn (speaker ``User``, a session per day of the
set), the answerable questions with their evidence turns, and the set's
``abstention`` questions as never-mentioned ones. The default fits
(:mod:`.fit_defaults`) pool these with LoCoMo's development conversations.
"""

from __future__ import annotations

import json
from pathlib import Path

from .data import Conversation, Question, Unit

EVAL = Path(__file__).resolve().parents[1] / "data" / "agent_eval"
CATEGORY = {"multi-session": 1, "temporal": 2}


def eval_conversation(name: str) -> Conversation:
    data = json.loads((EVAL / f"{name}_conversations.json").read_text(encoding="utf-8"))
    units = []
    for n, session in enumerate(data["sessions"], start=1):
        for i, turn in enumerate(session["turns"]):
            units.append(Unit(dia_id=turn["id"], speaker="User", text=turn["text"],
                              created_at=session["day"] * 86400.0 + i, session=n))
    conv = Conversation(id=name, speakers=("User", "Assistant"), units=units, questions=[])
    for q in data["questions"]:
        if q["category"] == "abstention":
            conv.never.append(Question(conversation=name, text=q["question"], category=0, evidence=()))
        else:
            conv.questions.append(Question(conversation=name, text=q["question"],
                                           category=CATEGORY.get(q["category"], 4), evidence=tuple(q["answers"])))
    return conv
