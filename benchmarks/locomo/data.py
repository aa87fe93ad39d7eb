"""Loading LoCoMo conversations into units and questions, as the data folder's protocol says.

* one unit per turn: ``"{speaker}: {text}"`` plus ``" (shares a photo: {caption})"``
  when the turn has a caption; its time is the session's date and time plus the
  turn's index in seconds;
* answerable questions: categories 1-4 (1 multi-hop, 2 temporal,
  3 open-domain, 4 single-hop) with their evidence turns, evidence ids
  normalized ("D:11:26" -> "D11:26", "D30:05" -> "D30:5", "D8:6; D9:17" -> two
  ids) and those that name no turn of the conversation dropped; a question left
  with no evidence is not scored;
* never-mentioned questions: the answerable questions of the *other*
  conversations of the folder, the two speakers' first names (also possessive)
  replaced by this conversation's two speakers', sampled with a fixed seed, as
  many as this conversation has answerable questions (at most 150).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CATEGORIES", "Unit", "Question", "Conversation", "load_folder", "never_mentioned", "normalize_evidence"]

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
NEVER_MENTIONED_MAX = 150
NEVER_MENTIONED_SEED = 0


@dataclass(frozen=True)
class Unit:
    dia_id: str
    speaker: str
    text: str
    created_at: float
    session: int


@dataclass(frozen=True)
class Question:
    conversation: str
    text: str
    category: int  # 1-4 answerable; 0 never-mentioned
    evidence: tuple[str, ...]
    answer: str = ""

    @property
    def answerable(self) -> bool:
        return self.category > 0


@dataclass
class Conversation:
    id: str
    speakers: tuple[str, str]
    units: list[Unit]
    questions: list[Question]
    never: list[Question] = field(default_factory=list)
    dropped_evidence: int = 0
    unscored: int = 0


def _session_time(raw: str) -> float:
    """ "1:56 pm on 8 May, 2023" -> POSIX seconds (UTC)."""
    stamp = dt.datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y")
    return stamp.replace(tzinfo=dt.UTC).timestamp()


_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


def normalize_evidence(raw: list[str] | None, known: set[str]) -> tuple[tuple[str, ...], int]:
    """The question's evidence ids that name turns of the conversation, and how many were dropped."""
    out: list[str] = []
    dropped = 0
    for item in raw or []:
        found = _EVIDENCE.findall(str(item))
        if not found:
            dropped += 1
            continue
        for session, turn in found:
            dia = f"D{int(session)}:{int(turn)}"
            if dia in known and dia not in out:
                out.append(dia)
            elif dia not in known:
                dropped += 1
    return tuple(out), dropped


def load_conversation(path: Path) -> Conversation:
    data = json.loads(path.read_text(encoding="utf-8"))
    speakers = (str(data["speaker_a"]), str(data["speaker_b"]))
    units: list[Unit] = []
    sessions = sorted((int(m.group(1)), key) for key in data if (m := re.fullmatch(r"session_(\d+)", key)))
    for number, key in sessions:
        start = _session_time(data[f"{key}_date_time"])
        for index, turn in enumerate(data[key]):
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" (shares a photo: {turn['blip_caption']})"
            units.append(Unit(dia_id=str(turn["dia_id"]), speaker=str(turn["speaker"]), text=text,
                              created_at=start + index, session=number))
    known = {u.dia_id for u in units}
    conv = Conversation(id=path.stem, speakers=speakers, units=units, questions=[])
    for qa in data.get("qa", []):
        category = int(qa.get("category", 0))
        if category not in CATEGORIES:
            continue
        evidence, dropped = normalize_evidence(qa.get("evidence"), known)
        conv.dropped_evidence += dropped
        if not evidence:
            conv.unscored += 1
            continue
        conv.questions.append(Question(conversation=conv.id, text=str(qa["question"]), category=category,
                                       evidence=evidence, answer=str(qa.get("answer", ""))))
    return conv


def _rename(text: str, source: tuple[str, str], target: tuple[str, str]) -> str:
    """Replace the source speakers' first names (and their possessives) by the target's, at once."""
    mapping = dict(zip(source, target))
    pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in source) + r")\b")
    return pattern.sub(lambda m: mapping[m.group(1)], text)


def never_mentioned(conv: Conversation, others: list[Conversation], *, seed: int = NEVER_MENTIONED_SEED,
                    limit: int = NEVER_MENTIONED_MAX) -> list[Question]:
    """Questions this conversation never answers: the others' answerable questions, speakers renamed."""
    pool = [_rename(q.text, other.speakers, conv.speakers) for other in others if other.id != conv.id
            for q in other.questions]
    n = min(len(conv.questions), limit, len(pool))
    rng = random.Random(f"{seed}:{conv.id}")
    return [Question(conversation=conv.id, text=t, category=0, evidence=()) for t in rng.sample(pool, n)]


def load_folder(folder: str | Path, only: list[str] | None = None) -> list[Conversation]:
    """Every conversation (``*.json``) of the LoCoMo data folder, with its never-mentioned questions.

    The never-mentioned questions are drawn from every conversation of the
    folder, also when ``only`` restricts which conversations are returned.
    """
    paths = sorted(Path(folder).glob("*.json"))
    if not paths:
        raise SystemExit(f"no conversation files (*.json) in {folder}")
    convs = [load_conversation(p) for p in paths]
    for conv in convs:
        conv.never = never_mentioned(conv, convs)
    if only:
        missing = set(only) - {c.id for c in convs}
        if missing:
            raise SystemExit(f"--conversations: not in the folder: {sorted(missing)}")
        convs = [c for c in convs if c.id in set(only)]
    return convs
