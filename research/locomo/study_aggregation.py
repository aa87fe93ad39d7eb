"""Design study: candidate generation for aggregation questions ("What activities does X partake in?").

Usage::

    python -m research.locomo.study_aggregation DATA_DIR [--encoder minilm] [--cache DIR] [--json out.json]
        [--grid]

The evidence of a multi-hop question such as "What books has Melanie read?"
is 2-4 turns that each name one instance ("Charlotte's Web", "my horse
painting") and not the question's words, so neither the keyword nor the
dense channel finds them. Each variant here builds one more ranked list of
the question's subject's turns (the speaker the question names, the rule of
``subject_boost``; every turn when it names none) and is measured twice:

1. **feasibility**: on the multi-hop questions the memory answers, the share
   of the evidence missing from the defaults' top 5 (and from their top 40)
   that the list holds in its top 10 / 20 / 40;
2. **effect**: the list fused into the defaults' final order (reciprocal rank
   fusion, ``1 / (20 + rank)``, the first two hits kept) for the questions
   whose English form marks an aggregation
   (:func:`hopmem.agent.parts.asks_for_several`), end-to-end R@5 by
   category with paired 95% intervals over questions, and the weight chosen
   leave one conversation out.

Variants (vectors are the memory's centered unit vectors unless said). The
question's *category word* is its plural noun after "what"/"which" and before
the verb ("What *books* has ..."), else a word of :data:`CATEGORY_NOUNS`, a
general list of English category nouns written for this study from general
knowledge of English, not from the benchmark's questions.

* ``category word, the entry's best word`` (``best two words``): each turn's
  own content words encoded one by one (raw model vectors); a turn scores the
  best (mean of the best two) cosine of its words with the category word;
* ``question cosine + category word's best word``: that score plus the
  turn's cosine with the question;
* ``WordNet hyponyms of the category word``: the turns holding a word that
  WordNet 3.0 files under the category word (its first noun sense; a turn's
  word by its first sense, or any of its first three), ranked by cosine with
  the question. It reads the dict files of Debian's ``wordnet-base``
  (``/usr/share/wordnet``) and is skipped without them;
* ``category``: the category noun of :data:`CATEGORY_NOUNS` encoded alone,
  turns ranked by cosine with it;
* ``category phrase``: the same word in a generic carrier ("{speaker}'s
  {word}"), so the speaker's own voice is part of the probe;
* ``category links``: each turn linked at write time to its 3 nearest
  category nouns; the list is the subject's turns linked to the question's
  category, by cosine;
* ``template difference``: the question's vector minus the vector of the same
  question with its category word replaced by "things", i.e. the direction
  the category word adds to the question;
* ``feedback``: pseudo-relevance feedback, the mean of the first three hits'
  vectors minus its projection on the question (more things like these, not
  like the question);
* ``feedback + category``: the mean of the first three hits plus the
  category vector;
* ``hopfield``: a modern-Hopfield read (beta 20) over the subject's turns
  seeded by the category vector mixed with the mean of the first three hits,
  turns ranked by cosine with the read;
* ``wider ...``: the order of a memory opened with a larger ``assoc_k``
  and/or ``over_fetch`` in place of the defaults' (not fused; its verdict is
  not used: the defaults' decides).

``--grid`` also measures the shipped option, ``Tuning.aggregation_k``,
end to end with the library's own verdict on a grid of values, paired against
``aggregation_k=assoc_k`` (off), with the value chosen leave one conversation
out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from benchmarks.locomo.cache import CachedEncoder, default_cache_dir, make_encoder  # noqa: E402
from benchmarks.locomo.data import CATEGORIES, Conversation, load_folder  # noqa: E402
from benchmarks.locomo.metrics import evidence_recall, summary  # noqa: E402
from hopmem.agent.parts import asks_for_several  # noqa: E402

from .study_diversity import Units, line, top  # noqa: E402

K = 5
DEPTH = 40
WEIGHTS = (0.25, 0.5, 1.0, 2.0)

#: General English category nouns (hypernyms of everyday things a person does, owns, likes or meets),
#: written for this study from general knowledge of English, not from any benchmark's questions.
CATEGORY_NOUNS: tuple[str, ...] = tuple(sorted(set("""
activity hobby pastime interest sport game exercise workout fitness outdoor adventure
book novel story author poem poetry magazine comic article library reading writing
movie film show series documentary actor television theater play performance
music song album band singer artist musician instrument concert festival genre dance
art painting drawing sculpture photo photography craft pottery design museum gallery
pet animal dog cat bird fish horse
food dish meal recipe snack dessert drink beverage restaurant cuisine cooking baking fruit vegetable
travel trip vacation holiday journey destination place city country town village
landmark beach mountain park lake river island forest
event party celebration wedding birthday anniversary ceremony conference meeting gathering competition
tournament race parade
job career work profession occupation employer company business project task skill
school class course subject study degree education university college teacher lesson training
family parent mother father child kid son daughter sibling brother sister grandparent
relative spouse husband wife partner friend relationship neighbor colleague mentor community group
club organization team volunteer charity cause donation fundraiser
health illness disease injury symptom medicine doctor therapy treatment hospital diet sleep stress
emotion feeling mood fear worry hope dream goal plan ambition achievement award success failure challenge
problem struggle loss
clothes clothing outfit shoe accessory jewelry
car vehicle bike bicycle boat plane train
gift present purchase item possession collection toy gadget device phone computer app software
website technology tool equipment furniture home house apartment room garden plant flower tree
weather season
religion faith belief value tradition culture custom language identity
money finance budget investment
hobbyist habit routine ritual memory experience lesson
symbol sign flag
game sport team player
""".split())))


def _plural_forms(noun: str) -> set[str]:
    forms = {noun, noun + "s", noun + "es"}
    if noun.endswith("y"):
        forms.add(noun[:-1] + "ies")
    if noun.endswith("f"):
        forms.add(noun[:-1] + "ves")
    irregular = {"child": "children", "person": "people", "man": "men", "woman": "women"}
    if noun in irregular:
        forms.add(irregular[noun])
    return forms


_FORM_TO_NOUN = {form: n for n in CATEGORY_NOUNS for form in _plural_forms(n)}


def question_categories(question: str) -> list[tuple[str, str]]:
    """The category nouns a question names: (the word as written, the category noun), in order."""
    out = []
    for w in re.findall(r"[a-z]+", question.lower()):
        n = _FORM_TO_NOUN.get(w)
        if n is not None and all(n != m for _, m in out):
            out.append((w, n))
    return out


_AUX = frozenset("is are was were do does did has have had will would can could should might may must".split())
_NOT_PLURAL = frozenset("this his its was has does is us yes less unless always perhaps".split())


def category_word(question: str) -> str | None:
    """The word a question names its category by: the plural noun after "what"/"which" and before the verb
    ("What *activities* does ...", "Which *cities* ..."), else a word of :data:`CATEGORY_NOUNS` (any form)."""
    ws = re.findall(r"[a-z]+", question.lower())
    if ws and ws[0] in ("what", "which"):
        for w in ws[1:]:
            if w in _AUX:
                break
            if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")) and w not in _NOT_PLURAL:
                return w
    cats = question_categories(question)
    return cats[0][0] if cats else None


WORDNET = Path("/usr/share/wordnet")


class WordNet:
    """Nouns of WordNet 3.0 (the dict files Debian's ``wordnet-base`` installs): synsets and hypernym closure."""

    def __init__(self, folder: Path = WORDNET) -> None:
        self.index: dict[str, list[str]] = {}
        for line_ in (folder / "index.noun").read_text(encoding="latin-1").splitlines():
            if line_.startswith(" "):
                continue
            f = line_.split()
            n_ptr = int(f[3])
            n_sense = int(f[2])
            self.index[f[0]] = f[6 + n_ptr:6 + n_ptr + n_sense]
        self.up: dict[str, list[str]] = {}
        for line_ in (folder / "data.noun").read_text(encoding="latin-1").splitlines():
            if line_.startswith(" "):
                continue
            f = line_.split(" | ")[0].split()
            n_words = int(f[3], 16)
            at = 4 + 2 * n_words
            n_ptr = int(f[at])
            ptrs = f[at + 1:at + 1 + 4 * n_ptr]
            self.up[f[0]] = [ptrs[j + 1] for j in range(0, len(ptrs), 4) if ptrs[j] in ("@", "@i")]
        self.exc = {}
        for line_ in (folder / "noun.exc").read_text(encoding="latin-1").splitlines():
            f = line_.split()
            if len(f) >= 2:
                self.exc[f[0]] = f[1]
        self._anc: dict[str, frozenset[str]] = {}

    def lemma(self, word: str) -> str | None:
        if word in self.index:
            return word
        if word in self.exc:
            return self.exc[word]
        for suffix, repl in (("ies", "y"), ("ches", "ch"), ("shes", "sh"), ("ses", "s"), ("xes", "x"), ("s", "")):
            if word.endswith(suffix) and word[:-len(suffix)] + repl in self.index:
                return word[:-len(suffix)] + repl
        return None

    def synsets(self, word: str, senses: int = 3) -> list[str]:
        lemma = self.lemma(word)
        return self.index.get(lemma, [])[:senses] if lemma else []

    def ancestors(self, synset: str) -> frozenset[str]:
        got = self._anc.get(synset)
        if got is None:
            seen = {synset}
            stack = [synset]
            while stack:
                for u in self.up.get(stack.pop(), []):
                    if u not in seen:
                        seen.add(u)
                        stack.append(u)
            got = self._anc[synset] = frozenset(seen)
        return got

    def is_a(self, word: str, category: Sequence[str], senses: int = 3) -> bool:
        cat = set(category)
        return any(self.ancestors(s) & cat for s in self.synsets(word, senses))


def subject_of(question: str, conv: Conversation) -> str | None:
    named = [s for s in conv.speakers if re.search(rf"\b{re.escape(s.split()[0].lower())}\b", question.lower())]
    return named[0] if len(named) == 1 else None


def unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


class Study:
    def __init__(self, convs: list[Conversation], encoder: CachedEncoder, centerer: Any) -> None:
        self.encoder, self.centerer = encoder, centerer
        self.units = {c.id: Units(c, encoder, centerer) for c in convs}
        self.speaker = {c.id: {u.dia_id: u.speaker for u in c.units} for c in convs}
        self.order = {c.id: [u.dia_id for u in c.units] for c in convs}
        self.cat_vec = dict(zip(CATEGORY_NOUNS, self.vectors(list(CATEGORY_NOUNS))))
        from hopmem.agent.keyword import query_terms

        names = {w.lower() for c in convs for s in c.speakers for w in s.split()}
        self.words = {c.id: {u.dia_id: [w for w in query_terms(u.text.split(": ", 1)[-1]) if w not in names
                                        and w.isalpha() and len(w) > 2]
                             for u in c.units} for c in convs}
        vocab = sorted({w for c in convs for ws in self.words[c.id].values() for w in ws})
        raw = np.atleast_2d(encoder.encode(vocab))
        self.word_raw = {w: unit(v) for w, v in zip(vocab, raw)}
        self.wordnet = WordNet() if (WORDNET / "data.noun").is_file() else None
        C = np.stack([self.cat_vec[n] for n in CATEGORY_NOUNS])
        self.links: dict[str, dict[str, set[str]]] = {}
        for c in convs:
            u = self.units[c.id]
            self.links[c.id] = {}
            for d in self.order[c.id]:
                sims = C @ u.vec[d]
                self.links[c.id][d] = {CATEGORY_NOUNS[j] for j in np.argsort(-sims)[:3]}

    def vectors(self, texts: list[str]) -> list[np.ndarray]:
        X = np.atleast_2d(self.centerer.transform(self.encoder.encode(texts)))
        return [unit(x) for x in X]

    def pool_ids(self, conv: Conversation, question: str) -> list[str]:
        subject = subject_of(question, conv)
        ids = self.order[conv.id]
        return [d for d in ids if subject is None or self.speaker[conv.id][d] == subject]

    def by_cosine(self, conv: Conversation, question: str, probe: np.ndarray, exclude: Sequence[str] = (),
                  among: Sequence[str] | None = None) -> list[str]:
        u = self.units[conv.id]
        ids = [d for d in (among if among is not None else self.pool_ids(conv, question)) if d not in exclude]
        scored = sorted(ids, key=lambda d: -float(u.vec[d] @ probe))
        return scored[:DEPTH]

    def lists(self, conv: Conversation, record: dict[str, Any], qvec: np.ndarray) -> dict[str, list[str]]:
        q = record["question"]
        cats = question_categories(q)
        out: dict[str, list[str]] = {}
        u = self.units[conv.id]
        head = [d for d in record["pool"][:3]]
        fb = unit(np.mean([u.vec[d] for d in head], axis=0)) if head else np.zeros_like(qvec)
        out["feedback"] = self.by_cosine(conv, q, unit(fb - (fb @ qvec) * qvec), exclude=head)
        cw = category_word(q)
        if cw is not None:
            probe = unit(np.atleast_2d(self.encoder.encode([cw]))[0])
            ids = self.pool_ids(conv, q)
            best = {d: max([float(self.word_raw[w] @ probe) for w in self.words[conv.id][d]] or [-1.0]) for d in ids}
            out["category word, the entry's best word"] = sorted(ids, key=lambda d: -best[d])[:DEPTH]
            top2 = {d: float(np.mean(sorted([float(self.word_raw[w] @ probe) for w in self.words[conv.id][d]]
                                            or [-1.0])[-2:])) for d in ids}
            out["category word, the entry's best two words"] = sorted(ids, key=lambda d: -top2[d])[:DEPTH]
            u = self.units[conv.id]
            both = {d: float(u.vec[d] @ qvec) + best[d] for d in ids}
            out["question cosine + category word's best word"] = sorted(ids, key=lambda d: -both[d])[:DEPTH]
        if cw is not None and self.wordnet is not None:
            for senses, label in ((1, "first sense"), (3, "first 3 senses")):
                cat = self.wordnet.synsets(cw, 1)
                ids = self.pool_ids(conv, q)
                count = {d: sum(self.wordnet.is_a(w, cat, senses) for w in self.words[conv.id][d] if w != cw)
                         for d in ids}
                members = [d for d in ids if count[d] > 0]
                out[f"WordNet hyponyms of the category word ({label}), by cosine"] = self.by_cosine(
                    conv, q, qvec, among=members)
        if not cats:
            return out
        word, noun = cats[0]
        cv = self.cat_vec[noun]
        subject = subject_of(q, conv)
        out["category"] = self.by_cosine(conv, q, cv)
        phrase = f"{subject or 'my'}'s {word}" if subject else f"my {word}"
        out["category phrase"] = self.by_cosine(conv, q, self.vectors([phrase])[0])
        linked = [d for d in self.pool_ids(conv, q) if noun in self.links[conv.id][d]]
        out["category links"] = self.by_cosine(conv, q, cv, among=linked)
        generic = re.sub(rf"\b{word}\b", "things", q, flags=re.IGNORECASE)
        gv = self.vectors([generic])[0]
        out["template difference"] = self.by_cosine(conv, q, unit(qvec - gv))
        out["feedback + category"] = self.by_cosine(conv, q, unit(fb + cv), exclude=head)
        ids = self.pool_ids(conv, q)
        X = np.stack([u.vec[d] for d in ids])
        seed = unit(cv + fb)
        z = 20.0 * (X @ seed)
        p = np.exp(z - z.max())
        p /= p.sum()
        out["hopfield"] = self.by_cosine(conv, q, unit(X.T @ p))
        return out


AGGREGATION_GRID = (32, 48, 64, 96, 128)


def grid(convs: list[Conversation], encoder: CachedEncoder) -> dict[str, Any]:
    """``Tuning.aggregation_k`` on :data:`AGGREGATION_GRID`, end to end with the library's verdict."""
    def e2e(rs: list[dict[str, Any]]) -> list[float]:
        return [0.0 if r["abstained"] else evidence_recall(r["pool"][:K], r["evidence"]) for r in rs]

    runs = {k: [r for c in convs for r in top(c, encoder, aggregation_k=k)] for k in AGGREGATION_GRID}
    rows = runs[AGGREGATION_GRID[0]]
    base = e2e(rows)
    values = {k: e2e(rs) for k, rs in runs.items()}
    table = [{**line(f"aggregation_k {k}", rows, v, base),
              "false_abstention": float(np.mean([r["abstained"] for r in runs[k]]))} for k, v in values.items()]
    held, held_base, held_rows, picks = [], [], [], []
    for c in sorted({r["conversation"] for r in rows}):
        best = max(AGGREGATION_GRID, key=lambda k: np.mean([v for v, r in zip(values[k], rows)
                                                             if r["conversation"] != c]))
        picks.append({"held_out": c, "aggregation_k": best})
        for v, b, r in zip(values[best], base, rows):
            if r["conversation"] == c:
                held.append(v)
                held_base.append(b)
                held_rows.append(r)
    table.append(line("leave one conversation out", held_rows, held, held_base))
    cats = list(CATEGORIES.values())
    print("\nTuning.aggregation_k, end to end with the library's verdict (paired against the first)\n")
    print("| setting | R@5 | gain [95% CI] | " + " | ".join(cats) + " |")
    print("|---|---|---|" + "---|" * len(cats))
    for t in table:
        lo, hi = t["gain_ci95"]
        print(f"| {t['variant']} | {t['all']:.3f} | {t['gain']:+.3f} [{lo:+.3f}, {hi:+.3f}] | "
              + " | ".join(f"{t[c]:.3f}" for c in cats) + " |")
    for k in AGGREGATION_GRID[1:]:
        mh = summary([v - b for v, b, r in zip(values[k], base, rows) if r["category"] == 1])
        print(f"  multi-hop gain, aggregation_k {k}: {mh['mean']:+.3f} [{mh['ci95'][0]:+.3f}, {mh['ci95'][1]:+.3f}]")
    print("leave one conversation out choices:", json.dumps(picks))
    return {"table": table, "loco_choices": picks}


def fuse_keep(base: list[str], extra: list[str], w: float, keep: int = 2) -> list[str]:
    s: dict[str, float] = {}
    for r, d in enumerate(base, 1):
        s[d] = s.get(d, 0.0) + 1.0 / (20.0 + r)
    for r, d in enumerate(extra, 1):
        s[d] = s.get(d, 0.0) + w / (20.0 + r)
    position = {d: i for i, d in enumerate([*base, *extra])}
    head = base[:keep]
    return head + sorted((d for d in s if d not in head), key=lambda d: (-s[d], position[d]))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from hopmem.agent import AgentMemory

    p = argparse.ArgumentParser(prog="python -m research.locomo.study_aggregation",
                                description=__doc__.split("\n")[0])
    p.add_argument("data", metavar="DATA_DIR")
    p.add_argument("--encoder", choices=("minilm", "hashing"), default="minilm")
    p.add_argument("--cache", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--grid", action="store_true", help="also Tuning.aggregation_k on a grid, end to end")
    args = p.parse_args(argv)
    cache = Path(args.cache) if args.cache else default_cache_dir()
    convs = load_folder(args.data)
    encoder = make_encoder(args.encoder, cache)
    rows = [r for c in convs for r in top(c, encoder, depth=DEPTH)]
    wider = {"wider candidate lists (assoc_k 64, over_fetch 100)": {"assoc_k": 64, "over_fetch": 100},
             "wider semantic list (assoc_k 64)": {"assoc_k": 64},
             "wider keyword list (over_fetch 100)": {"over_fetch": 100},
             "wider keyword list (over_fetch 200)": {"over_fetch": 200}}
    wide = {name: {(r["conversation"], r["question"]): r["pool"]
                   for c in convs for r in top(c, encoder, depth=DEPTH, **cfg)} for name, cfg in wider.items()}
    with AgentMemory.open(":memory:", encoder=encoder, namespace="study") as mem:
        centerer = mem.centerer
    study = Study(convs, encoder, centerer)
    by_id = {c.id: c for c in convs}
    qvecs = study.vectors([r["question"] for r in rows])
    lists = [study.lists(by_id[r["conversation"]], r, qv) for r, qv in zip(rows, qvecs)]
    encoder.save()
    names = ["category word, the entry's best word", "category word, the entry's best two words",
             "question cosine + category word's best word",
             "WordNet hyponyms of the category word (first sense), by cosine",
             "WordNet hyponyms of the category word (first 3 senses), by cosine",
             "feedback", "category", "category phrase", "category links", "template difference",
             "feedback + category", "hopfield"]
    for r, ls in zip(rows, lists):  # the wider memory's own order, in place of the defaults' (no fusion)
        for name in wider:
            ls[name] = wide[name][(r["conversation"], r["question"])]
    names += list(wider)
    names = [n for n in names if any(n in ls for ls in lists)]
    # 1. feasibility on the multi-hop questions the memory answers
    feas = []
    mh = [(r, ls) for r, ls in zip(rows, lists) if r["category"] == 1 and not r["abstained"]]
    miss5 = [(r, ls, e) for r, ls in mh for e in r["evidence"] if e not in r["pool"][:K]]
    miss40 = [(r, ls, e) for r, ls in mh for e in r["evidence"] if e not in r["pool"][:DEPTH]]
    n_cat = sum(1 for r, _ in mh if question_categories(r["question"]))
    for name in names:
        row: dict[str, Any] = {"variant": name}
        for label, miss in (("missing from top 5", miss5), ("missing from top 40", miss40)):
            for depth in (10, 20, 40):
                got = [e in ls.get(name, [])[:depth] for _, ls, e in miss]
                row[f"{label}, in top {depth}"] = float(np.mean(got)) if got else 0.0
        feas.append(row)
    print(f"\nfeasibility: {len(mh)} multi-hop questions answered, {n_cat} name a category noun; "
          f"{len(miss5)} evidence turns missing from the top 5, {len(miss40)} from the top 40\n")
    cols = [k for k in feas[0] if k != "variant"]
    print("| list | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for f in feas:
        print(f"| {f['variant']} | " + " | ".join(f"{f[c]:.3f}" for c in cols) + " |")

    # 2. effect: fused into the final order for aggregation questions
    def scores(name: str | None, w: float, gate: Callable[[str], bool] = asks_for_several) -> list[float]:
        out = []
        for r, ls in zip(rows, lists):
            if r["abstained"]:
                out.append(0.0)
                continue
            pool = r["pool"]
            if name is not None and gate(r["question"]) and name in ls:
                pool = ls[name] if name.startswith("wider") else fuse_keep(pool, ls[name], w)
            out.append(evidence_recall(pool[:K], r["evidence"]))
        return out

    def entry(label: str, rs: list[dict[str, Any]], vals: list[float], bs: list[float]) -> dict[str, Any]:
        t = line(label, rs, vals, bs)
        mh = summary([v - b for v, b, r in zip(vals, bs, rs) if r["category"] == 1])
        t["multi-hop gain"], t["multi-hop gain_ci95"] = mh["mean"], mh["ci95"]
        return t

    base = scores(None, 0.0)
    table = [entry("the defaults", rows, base, base)]
    for name in names:
        per_w = {w: scores(name, w) for w in (WEIGHTS[:1] if name.startswith("wider") else WEIGHTS)}
        if name.startswith("wider"):  # not fused: no weight to choose
            table.append(entry(name, rows, per_w[WEIGHTS[0]], base))
            continue
        for w, vals in per_w.items():
            table.append(entry(f"{name}, weight {w}", rows, vals, base))
        held: list[float] = []
        held_base: list[float] = []
        held_rows: list[dict[str, Any]] = []
        picks = []
        for c in sorted({r["conversation"] for r in rows}):
            best = max(per_w, key=lambda w: np.mean([v for v, r in zip(per_w[w], rows) if r["conversation"] != c]))
            picks.append(best)
            for v, b, r in zip(per_w[best], base, rows):
                if r["conversation"] == c:
                    held.append(v)
                    held_base.append(b)
                    held_rows.append(r)
        table.append(entry(f"{name}, weight chosen leave one conversation out {picks}", held_rows, held, held_base))
    cats = list(CATEGORIES.values())
    print("\nfused into the final order, aggregation questions only (end to end R@5)\n")
    print("| variant | R@5 | gain [95% CI, paired] | multi-hop gain [95% CI] | " + " | ".join(cats) + " |")
    print("|---|---|---|---|" + "---|" * len(cats))
    for t in table:
        lo, hi = t["gain_ci95"]
        mlo, mhi = t["multi-hop gain_ci95"]
        print(f"| {t['variant']} | {t['all']:.3f} | {t['gain']:+.3f} [{lo:+.3f}, {hi:+.3f}] | "
              f"{t['multi-hop gain']:+.3f} [{mlo:+.3f}, {mhi:+.3f}] | "
              + " | ".join(f"{t[c]:.3f}" for c in cats) + " |")
    result: dict[str, Any] = {"feasibility": feas, "effect": table}
    if args.grid:
        result["aggregation_k"] = grid(convs, encoder)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
