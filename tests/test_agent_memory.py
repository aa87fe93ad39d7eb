"""AgentMemory: every feature of docs AGENT-MEMORY.md, with the hashing encoder and an injected clock."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pytest

from hopmem.agent import (
    AgentMemory,
    ForgettingPolicy,
    KindPolicy,
    LabelPolicy,
    MissingIdentity,
    RecallConfig,
    Tuning,
    WritePolicy,
    ranking,
)
from hopmem.agent import keyword as kw
from hopmem.agent._settings import RecallSettings
from hopmem.agent.temporal import DAY, parse_time_hints
from hopmem.errors import IncompatibleStore, InvalidInput, NotFound
from hopmem.text.encoders import HashingEncoder
from hopmem.text.gates import calibrate

ENC = HashingEncoder(384)


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def gate(tau: float):
    """A separated gate with threshold ``tau`` (for tests that need a known cut)."""
    return calibrate([tau + 0.1, tau + 0.2], [tau - 0.2, tau - 0.1])


def make(tmp_path, name="mem.db", tau=0.1, band_tau=0.3, **kwargs):
    """A memory with known gates: verdict ``tau``, band cut ``band_tau`` (None: uncalibrated)."""
    clock = kwargs.pop("clock", None) or Clock()
    mem = AgentMemory.open(tmp_path / name, encoder=ENC, namespace=kwargs.pop("namespace", "team"), clock=clock,
                           **kwargs)
    if tau is not None:
        modes = ("hybrid", "associative", "keyword")
        mem.set_gates({m: gate(tau) for m in modes}, {m: gate(band_tau) for m in modes})
    return mem, clock


FACTS = [
    "Ticket PROJ-4417 tracks the duplicate webhook deliveries.",
    "Production deploys require a database snapshot first.",
    "The billing service runs on Postgres 16.",
    "Ada wants answers written in British English.",
    "The team standup is every morning at 9:30.",
]


# -- construction, identity, contract ---------------------------------------------------------


def test_open_requires_a_namespace(tmp_path):
    for bad in (None, "", "   "):
        with pytest.raises(MissingIdentity):
            AgentMemory.open(tmp_path / "x.db", encoder=ENC, namespace=bad)


@pytest.mark.parametrize("options", [
    dict(receipt_ttl=None), dict(receipt_ttl=0), dict(receipt_ttl=float("inf")), dict(max_receipts=0),
    dict(max_receipts=True), dict(capacity=0), dict(capacity=1.5), dict(session_ttl=-5),
    dict(day_zero="monday"), dict(day_zero=float("nan")),
])
def test_open_refuses_bad_options_before_creating_anything(tmp_path, options):
    with pytest.raises(InvalidInput, match=next(iter(options))):
        AgentMemory.open(tmp_path / "x.db", encoder=ENC, namespace="team", **options)
    assert list(tmp_path.iterdir()) == []  # no file left behind


def test_constructor_is_not_public():
    with pytest.raises(TypeError):
        AgentMemory()


def test_remember_is_committed_before_it_returns(tmp_path):
    mem, _ = make(tmp_path)
    entry = mem.remember(FACTS[0], labels={"topic": ["webhooks"]})
    other = sqlite3.connect(tmp_path / "mem.db")  # another connection sees the committed row
    row = other.execute("SELECT text, labels, length(vector) FROM entries WHERE id = ?", (entry.id,)).fetchone()
    assert row[0] == FACTS[0]
    assert json.loads(row[1]) == {"topic": ["webhooks"]}
    assert row[2] == 4 * ENC.dim
    other.close()
    mem.close()


def test_reopen_restores_entries_links_and_gates(tmp_path):
    mem, clock = make(tmp_path)
    a = mem.remember("User's phone is a Pixel 7.")
    b = mem.remember("User's phone is now a Fairphone 5.", supersedes=a.id)
    mem.close()
    again = AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="team", clock=clock)
    assert [e.id for e in again.entries()] == [a.id, b.id]
    assert again.get(a.id).superseded_by == b.id
    assert set(again.gates) == {"hybrid", "associative", "keyword"}
    assert again.recall("phone Fairphone").hits[0].entry_id == b.id
    again.close()


def test_encoder_mismatch_is_refused_and_reembed_migrates(tmp_path):
    mem, clock = make(tmp_path)
    mem.remember(FACTS[2])
    mem.close()
    with pytest.raises(IncompatibleStore):
        AgentMemory.open(tmp_path / "mem.db", encoder=HashingEncoder(384, seed=7), namespace="team")
    with pytest.raises(IncompatibleStore):
        AgentMemory.open(tmp_path / "mem.db", encoder=HashingEncoder(128), namespace="team")
    mem = AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="team", clock=clock)
    other = HashingEncoder(256, seed=3)
    assert mem.reembed(other) == 1
    assert mem.gates == {}  # gates are dropped: they were measured in the old space
    mem.close()
    reopened = AgentMemory.open(tmp_path / "mem.db", encoder=other, namespace="team", clock=clock)
    assert reopened.stats()["encoder"]["dimension"] == 256
    assert reopened.rank("billing Postgres")[0].text == FACTS[2]
    reopened.close()


class BrokenEncoder:
    """A new encoder that goes wrong on its ``fail_at``-th call: NaN, a wrong shape, or an exception."""

    def __init__(self, how, fail_at=1, dimension=256):
        self.inner, self.how, self.fail_at, self.calls = HashingEncoder(dimension, seed=5), how, fail_at, 0
        self.name, self.dim, self.fingerprint = "broken", dimension, "broken-1"

    def encode(self, texts):
        self.calls += 1
        out = self.inner.encode(texts)
        if self.calls < self.fail_at:
            return out
        if self.how == "nan":
            out[-1, 0] = np.nan
            return out
        if self.how == "shape":
            return out[:, :-1]
        raise RuntimeError("model server went away")


@pytest.mark.parametrize("how, fail_at", [("nan", 1), ("nan", 3), ("shape", 2), ("raise", 3)])
def test_reembed_with_a_failing_encoder_changes_nothing(tmp_path, monkeypatch, how, fail_at):
    from hopmem.agent import encoding

    monkeypatch.setattr(encoding, "ENCODE_BATCH", 2)  # several batches, so a later one can fail
    mem, clock = make(tmp_path)
    for fact in FACTS[:5]:
        mem.remember(fact)
    before = sqlite3.connect(tmp_path / "mem.db").execute("SELECT id, vector FROM entries ORDER BY id").fetchall()
    gates = dict(mem.gates)
    with pytest.raises(RuntimeError if how == "raise" else InvalidInput):
        mem.reembed(BrokenEncoder(how, fail_at))
    check = sqlite3.connect(tmp_path / "mem.db")
    assert check.execute("SELECT id, vector FROM entries ORDER BY id").fetchall() == before
    assert json.loads(check.execute("SELECT value FROM meta WHERE key = 'encoder'").fetchone()[0])["dimension"] == 384
    check.close()
    assert mem.gates == gates and mem.rank("billing Postgres")[0].text == FACTS[2]  # still the old space
    mem.close()
    AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="team").close()  # and the file opens as before


def test_reembed_encodes_in_batches_with_a_progress_bar(tmp_path, monkeypatch, capsys):
    from hopmem.agent import encoding

    monkeypatch.setattr(encoding, "ENCODE_BATCH", 2)
    mem, _ = make(tmp_path)
    for fact in FACTS[:5]:
        mem.remember(fact)
    new = BrokenEncoder("never", fail_at=10**9)
    assert mem.reembed(new, progress=True) == 5
    assert new.calls == 1 + 3  # the reference texts for the centering mean, then 5 entries in batches of 2
    assert "re-embedding" in capsys.readouterr().err
    assert mem.rank("billing Postgres")[0].text == FACTS[2]
    mem.close()


def test_close_is_idempotent_and_final(tmp_path):
    mem, _ = make(tmp_path)
    mem.close()
    mem.close()
    with pytest.raises(InvalidInput):
        mem.remember("anything at all")


# -- remember: validation, kinds, TTL, dedup, supersession ---------------------------------------


@pytest.mark.parametrize("kwargs, error", [
    (dict(text=""), InvalidInput),
    (dict(text="x y", kind="rumour"), InvalidInput),
    (dict(text="x y", importance=1.5), InvalidInput),
    (dict(text="x y", importance=True), InvalidInput),
    (dict(text="x y", durability="forever"), InvalidInput),
    (dict(text="x y", durability="session"), MissingIdentity),
    (dict(text="x y", ttl=-5), InvalidInput),
    (dict(text="x y", metadata={"a": object()}), InvalidInput),
    (dict(text="x y", labels={"topic": 3}), InvalidInput),
])
def test_remember_validates(tmp_path, kwargs, error):
    mem, _ = make(tmp_path)
    text = kwargs.pop("text")
    with pytest.raises(error):
        mem.remember(text, **kwargs)
    assert len(mem) == 0


def test_kinds_set_default_ttls(tmp_path):
    mem, clock = make(tmp_path, kinds={"event": KindPolicy(ttl=2 * DAY)})
    fact = mem.remember("The billing service runs on Postgres 16.", kind="fact")
    obs = mem.remember("The user seemed in a hurry this morning.", kind="observation")
    event = mem.remember("The office party happened on Friday.", kind="event")
    assert fact.expires_at is None
    assert obs.expires_at == pytest.approx(clock.t + 7 * DAY)  # observations fade after a week
    assert event.expires_at == pytest.approx(clock.t + 2 * DAY)  # overridden per kind
    assert mem.remember("Buy milk on the way home.", kind="task").expires_at == pytest.approx(clock.t + 30 * DAY)


def test_ttl_expires_from_recall_but_stays_inspectable_until_prune(tmp_path):
    mem, clock = make(tmp_path)
    events = []
    mem.subscribe(events.append)
    entry = mem.remember("The staging password rotates on Fridays.", ttl=60)
    assert mem.recall("staging password rotates").entry_ids == [entry.id]
    clock.advance(61)
    sel = mem.recall("staging password rotates")
    assert sel.abstained and entry.id not in sel.entry_ids
    inspected = mem.get(entry.id)
    assert inspected.expired and not inspected.recallable
    assert [e.type for e in events].count("expired") == 1
    assert mem.prune()["expired"] == 1
    with pytest.raises(NotFound):
        mem.get(entry.id)
    assert "pruned" in [e.type for e in events]


def test_reremembering_merges_instead_of_duplicating(tmp_path):
    mem, _ = make(tmp_path)
    events = []
    mem.subscribe(events.append, types=["merged"])
    first = mem.remember("Ada wants answers written in British English.", importance=0.4, labels={"topic": "style"})
    again = mem.remember("ada wants answers written in British English.", importance=0.9,
                         labels={"topic": ["language"]})
    assert again.merged and again.id == first.id and again.merged_count == 1
    assert again.importance == 0.9
    assert again.labels == {"topic": ["style", "language"]}
    assert len(mem) == 1
    assert mem.variants(first.id)[0]["text"].startswith("ada wants")  # the wording is kept
    assert events and events[0].data["merged_count"] == 1


def test_near_duplicates_with_different_values_are_not_merged(tmp_path):
    mem, _ = make(tmp_path)
    a = mem.remember("User now weighs 83 kg.")
    b = mem.remember("User now weighs 81 kg.")
    assert not b.merged and b.id != a.id
    assert mem.get(a.id).superseded_by == b.id  # phrased as a change: the newer supersedes


def test_supersession_orders_versions_by_the_question(tmp_path):
    mem, clock = make(tmp_path)
    old = mem.remember("User's phone is a Pixel 7.")
    clock.advance(DAY)
    new = mem.remember("User's phone is now a Fairphone 5.")
    assert mem.get(old.id).superseded_by == new.id
    current = mem.recall("User's phone?")
    assert current.entry_ids[:2] == [new.id, old.id]  # no cue: the current state wins
    first = mem.recall("User's phone originally?")
    assert first.time_hints["order"] == "origin"
    assert first.entry_ids[:2] == [old.id, new.id]


def test_adjacent_version_order_keeps_the_displaced_version_just_behind(tmp_path):
    mem, clock = make(tmp_path)
    old = mem.remember("User's phone is a Pixel 7.")
    clock.advance(DAY)
    new = mem.remember("User's phone is now a Fairphone 5.")
    for query, first, second in (("User's phone?", new, old), ("User's phone originally?", old, new)):
        hits = mem.recall(query).hits
        assert [h.entry_id for h in hits[:2]] == [first.id, second.id]
        assert hits[1].score < hits[0].score


def test_order_versions_lifts_the_preferred_version_and_keeps_the_displaced_just_behind(tmp_path):
    mem, clock = make(tmp_path)
    ids = []
    for text in ("User's phone is a Pixel 7.", "User's phone is now a Pixel 8.",
                 "User's phone is now a Fairphone 5."):
        ids.append(mem.remember(text).id)
        clock.advance(DAY)
    rows = mem._state.rows
    assert [len(g) for g in ranking.version_groups(rows, ids)] == [3]
    start = {ids[0]: 0.9, ids[1]: 0.5, ids[2]: 0.2}  # the oldest best: "recent" order must lift the newest
    adjacent = dict(start)
    ranking.order_versions(rows, ids, "recent", adjacent, {i: {} for i in ids})
    # the versions do not trade places (0.2 would go to the oldest): the displaced one stays just behind
    assert adjacent == {ids[2]: 0.9, ids[1]: 0.5, ids[0]: pytest.approx(0.9 * (1 - 1e-3))}


def test_explicit_supersedes_must_be_in_scope(tmp_path):
    mem, _ = make(tmp_path)
    mine = mem.remember("Session note: draft is in review.", durability="session", session_id="s1")
    with pytest.raises(NotFound):
        mem.remember("The draft is approved.", supersedes=mine.id)


def test_capacity_evicts_the_least_valuable_not_the_oldest(tmp_path):
    mem, clock = make(tmp_path, capacity=3)
    evicted = []
    mem.subscribe(evicted.append, types=["evicted"])
    keep_old = mem.remember("Production deploys require a database snapshot first.", importance=0.95)
    clock.advance(10)
    trivia = mem.remember("The coffee machine on floor two is slow.", importance=0.05)
    clock.advance(10)
    mem.remember("The billing service runs on Postgres 16.", importance=0.6)
    clock.advance(10)
    mem.remember("The team standup is every morning at 9:30.", importance=0.6)
    ids = [e.id for e in mem.entries()]
    assert keep_old.id in ids and trivia.id not in ids and len(ids) == 3
    assert evicted[0].data["id"] == trivia.id


# -- recall: hybrid evidence, abstention, explanations -----------------------------------------------


def test_empty_memory_abstains_with_a_reason(tmp_path):
    mem, _ = make(tmp_path)
    sel = mem.recall("anything remembered?")
    assert sel.abstained and sel.hits == () and sel.reason.startswith("no candidates")


def test_exact_identifier_is_evidence_on_its_own(tmp_path):
    mem, _ = make(tmp_path, tau=1.8)  # a gate nothing passes on similarity
    for fact in FACTS:
        mem.remember(fact)
    sel = mem.recall("PROJ-4417")
    assert not sel.abstained
    hit = sel.hits[0]
    assert hit.text == FACTS[0]
    assert hit.explanation.admitted_by == "exact token"
    assert hit.explanation.exact_tokens == ("proj-4417",)
    assert "proj" in hit.explanation.matched_terms and "4417" in hit.explanation.matched_terms
    assert "exact token proj-4417" in str(hit.explanation)
    assert all(h.explanation.admitted_by == "exact token" for h in sel.hits)  # nothing else passes


def test_unrelated_query_abstains_and_reason_says_why(tmp_path):
    mem, _ = make(tmp_path, tau=0.3)
    for fact in FACTS:
        mem.remember(fact)
    sel = mem.recall("the airspeed velocity of an unladen swallow")
    assert sel.abstained and not sel.hits
    assert "below the gate" in sel.reason or "too close to call" in sel.reason
    assert sel.statistic is not None and sel.statistic < sel.tau
    assert "not calibrated" not in sel.reason


def test_uncalibrated_gate_is_conservative_and_says_so(tmp_path):
    mem, _ = make(tmp_path, tau=None)
    for fact in FACTS:
        mem.remember(fact)
    sel = mem.recall("billing service database")
    assert not sel.calibrated
    assert "gate not calibrated" in sel.reason


def test_calibrate_stores_gates_per_mode(tmp_path):
    mem, clock = make(tmp_path, tau=None)
    for fact in FACTS:
        mem.remember(fact)
    gates = mem.calibrate(
        ["Which database does the billing service use?", "What do deploys require?",
         "When is the team standup?", "How should answers be written?"],
        ["What is the capital of Peru?", "How do volcanoes form?", "Best pizza dough recipe",
         "Who won the 1998 world cup?"])
    assert set(gates) == {"hybrid", "associative", "keyword"}
    assert all(g.calibrated_writes == 5 for g in gates.values())
    assert set(mem.band_gates) == set(gates)  # hits are banded on their own evidence scale
    sel = mem.recall("Which database does billing run on?")
    assert sel.calibrated and not sel.abstained and sel.hits[0].text == FACTS[2]
    assert mem.recall("How do volcanoes form?").abstained


def test_hits_carry_band_score_and_a_full_explanation(tmp_path):
    mem, _ = make(tmp_path)
    for fact in FACTS:
        mem.remember(fact)
    sel = mem.recall("billing service Postgres")
    hit = sel.hits[0]
    assert hit.text == FACTS[2]
    assert hit.band in ("vivid", "clear", "vague")
    e = hit.explanation
    assert set(e.sources) <= {"keyword", "semantic", "associative", "exact", "time"}
    assert "keyword" in e.sources and "semantic" in e.sources
    # reciprocal rank fusion: the fused score is a sum over the lists that ranked the entry
    cfg = mem.tuning
    expected = sum(cfg.rrf_weights[name] / (cfg.rrf_k + rank) for name, rank in e.ranks.items())
    assert e.fused == pytest.approx(expected, rel=1e-5)
    assert e.bm25 is not None and 0 < e.keyword < 1
    assert "billing" in e.matched_terms
    assert isinstance(hit.to_dict()["explanation"]["summary"], str)
    json.dumps(sel.to_dict())  # plain data


def test_rank_ignores_the_gate_but_reports_admission(tmp_path):
    mem, _ = make(tmp_path, tau=1.8)  # above any evidence (similarity + keyword weight)
    for fact in FACTS:
        mem.remember(fact)
    assert mem.recall("billing service Postgres").abstained
    ranked = mem.rank("billing service Postgres", limit=3)
    assert ranked[0].text == FACTS[2]
    assert ranked[0].explanation.admitted_by.startswith("nothing")


def test_modes_use_their_own_retrievers(tmp_path):
    mem, _ = make(tmp_path)
    for fact in FACTS:
        mem.remember(fact)
    kw_sel = mem.recall("billing Postgres", mode="keyword")
    assert kw_sel.hits and set(kw_sel.hits[0].explanation.sources) <= {"keyword", "exact"}
    assoc = mem.recall("billing Postgres", mode="associative")
    assert assoc.hits and "keyword" not in assoc.hits[0].explanation.sources
    assert assoc.first_contact is not None
    with pytest.raises(InvalidInput):
        mem.recall("billing", mode="psychic")


def test_recall_validates(tmp_path):
    mem, _ = make(tmp_path)
    with pytest.raises(InvalidInput):
        mem.recall("")
    with pytest.raises(InvalidInput):
        mem.recall("x", limit=0)
    with pytest.raises(InvalidInput):
        mem.recall("x", kinds=["rumour"])
    with pytest.raises(MissingIdentity):
        mem.recall("x", session_id="")


def test_kinds_and_time_filters(tmp_path):
    mem, clock = make(tmp_path)
    pref = mem.remember("Ada prefers British English spelling.", kind="preference")
    clock.advance(100)
    fact = mem.remember("Ada's English exam is in May.", kind="fact")
    assert mem.recall("Ada English", kinds=["preference"]).entry_ids == [pref.id]
    assert mem.recall("Ada English", since=clock.t - 50).entry_ids == [fact.id]
    assert mem.recall("Ada English", until=clock.t - 50).entry_ids == [pref.id]


def test_day_n_time_window_admits_entries_of_that_day(tmp_path):
    mem, clock = make(tmp_path, tau=1.8, clock=Clock(0.0), day_zero=0.0)
    clock.t = 3 * DAY + 10
    three = mem.remember("User took ownership of the flaky login test.")
    clock.t = 9 * DAY
    mem.remember("User renewed the team's cloud budget.")
    sel = mem.recall("What did I take on around day 3?")
    assert not sel.abstained and sel.hits[0].entry_id == three.id
    assert sel.hits[0].explanation.time_match
    assert sel.time_hints["window"] is not None


# -- labels -----------------------------------------------------------------------------------------


def test_label_policy_normalizes_bounds_and_rejects():
    policy = LabelPolicy({"topic": ["deploys", "billing"], "project": None}, max_values_per_key=2)
    assert policy.normalize({" Topic ": ["Deploys", "deploys ", "BILLING"]}) == {"topic": ["deploys", "billing"]}
    assert policy.normalize({"project": "Atlas  Core"}) == {"project": ["atlas core"]}
    with pytest.raises(InvalidInput):
        policy.normalize({"colour": ["red"]})
    with pytest.raises(InvalidInput):
        policy.normalize({"topic": ["gardening"]})
    with pytest.raises(InvalidInput):
        policy.normalize({"project": ["a", "b", "c"]})
    # inferred labels are cleaned, never refused
    assert policy.normalize({"colour": ["red"], "topic": ["gardening", "billing"]}, strict=False) == \
        {"topic": ["billing"]}


def test_label_policy_shows_what_it_allows_as_checked():
    policy = LabelPolicy({" Topic ": ["Deploys", "billing"], "project": None})
    assert policy.allowed_values == {"topic": frozenset({"deploys", "billing"}), "project": None}
    assert LabelPolicy().allowed_values is None


def test_explicit_labels_filter_inferred_labels_only_boost(tmp_path):
    labeler = lambda text: {"topic": ["deploys"]} if "deploy" in text.lower() else {}  # noqa: E731
    mem, _ = make(tmp_path, labeler=labeler, label_policy=LabelPolicy({"topic": None}))
    tagged = mem.remember("Production deploys require a database snapshot first.", labels={"topic": ["ops"]})
    inferred = mem.remember("Deploy windows are Tuesday and Thursday afternoons.")
    assert mem.get(inferred.id).inferred_labels == {"topic": ["deploys"]}
    assert mem.get(inferred.id).labels == {}
    only = mem.recall("deploy snapshot windows", labels={"topic": ["ops"]})
    assert only.entry_ids == [tagged.id]  # the filter uses explicit labels only
    both = mem.recall("When can I deploy?")
    boosted = [h for h in both.hits if "labels" in h.explanation.boosts]
    assert boosted and all(h.explanation.boosts["labels"] >= 1.0 for h in boosted)


def test_boosts_never_admit_an_unrelated_entry(tmp_path):
    labeler = lambda text: {"topic": ["everything"]}  # noqa: E731  # labels every text the same
    mem, _ = make(tmp_path, tau=0.3, labeler=labeler, reinforcement=True)
    entry = mem.remember("The billing service runs on Postgres 16.", importance=1.0)
    mem.feedback(entry.id, 1.0)
    sel = mem.recall("the airspeed velocity of an unladen swallow")
    assert sel.abstained


def test_labeler_failure_keeps_the_write(tmp_path):
    def broken(text):
        raise RuntimeError("labeler down")

    mem, _ = make(tmp_path, labeler=broken)
    failures = []
    mem.subscribe(failures.append, types="labeling_failed")
    entry = mem.remember("The billing service runs on Postgres 16.")
    assert mem.get(entry.id).text.startswith("The billing")
    assert failures and failures[0].data["id"] == entry.id
    assert not mem.recall("billing Postgres").abstained  # a failing labeler on queries is tolerated too


# -- selections, utility, reinforcement ----------------------------------------------------------------


def test_recall_counts_exposures_and_complete_is_atomic_and_idempotent(tmp_path):
    mem, _ = make(tmp_path, reinforcement=True)
    for fact in FACTS:
        mem.remember(fact)
    sel = mem.recall("billing service Postgres")
    ids = sel.entry_ids
    assert all(mem.get(i).exposures == 1 for i in ids)
    assert mem.get(ids[0]).utility == 0.0  # exposure alone never reinforces
    assert mem.complete(sel.id, 1.0) is True
    assert mem.complete(sel.id, 1.0) is False  # the receipt is consumed once
    after = [mem.get(i) for i in ids]
    assert all(e.utility > 0 for e in after)
    expected = (1.0 / len(ids)) / (1.0 / len(ids) + 1.0)  # centered 1.0, weight 1/n, shrunk by a prior of 1
    assert after[0].utility == pytest.approx(expected)
    with pytest.raises(InvalidInput):
        mem.complete(sel.id, 1.5)


def test_receipts_expire_and_are_bounded(tmp_path):
    mem, clock = make(tmp_path, receipt_ttl=60, max_receipts=3)
    mem.remember(FACTS[2])
    selections = [mem.recall("billing Postgres") for _ in range(5)]
    assert mem.stats()["receipts"] <= 3
    clock.advance(61)
    assert mem.complete(selections[-1].id, 1.0) is False  # expired


def test_feedback_sets_replaces_and_clears(tmp_path):
    mem, _ = make(tmp_path)
    entry = mem.remember(FACTS[1])
    assert mem.feedback(entry.id, 0.5).manual_feedback == 0.5
    assert mem.feedback(entry.id, -1.0).manual_feedback == -1.0
    cleared = mem.feedback(entry.id, None)
    assert cleared.manual_feedback is None and cleared.utility == 0.0
    with pytest.raises(InvalidInput):
        mem.feedback(entry.id, 2.0)
    with pytest.raises(NotFound):
        mem.feedback(99999, 0.5)


def test_reinforcement_reorders_only_when_enabled(tmp_path):
    texts = ["Deploy checklist: run the database snapshot.", "Deploy checklist: announce in the channel."]
    orders = {}
    for flag in (False, True):
        mem, _ = make(tmp_path, name=f"r{flag}.db", reinforcement=flag)
        a, b = (mem.remember(t) for t in texts)
        base = mem.recall("deploy checklist", record=False).entry_ids
        loser = base[-1]
        mem.feedback(loser, 1.0)
        orders[flag] = (base, mem.recall("deploy checklist", record=False).entry_ids, loser)
        mem.close()
    base, after, loser = orders[False]
    assert after == base
    base, after, loser = orders[True]
    assert after[0] == loser


# -- forgetting ------------------------------------------------------------------------------------


def test_forgetting_decays_suppresses_and_prunes(tmp_path):
    policy = ForgettingPolicy(half_life=10 * DAY, min_half_life=DAY, max_half_life=100 * DAY, threshold=0.1)
    mem, clock = make(tmp_path, forgetting=policy)
    weak = mem.remember("The coffee machine on floor two is slow.", importance=0.0)
    strong = mem.remember("Production deploys require a database snapshot first.", importance=1.0)
    protected = mem.remember("The billing service runs on Postgres 16.", importance=0.0)
    mem.feedback(protected.id, 1.0)  # a manual 1.0 protects
    # importance stretches the half-life: 10 days * 2**(+-1)
    assert mem.get(weak.id).retention == pytest.approx(1.0)
    clock.advance(10 * DAY)
    assert mem.get(weak.id).retention == pytest.approx(math.exp(-2.0))
    assert mem.get(strong.id).retention == pytest.approx(math.exp(-0.5))
    clock.advance(20 * DAY)
    w = mem.get(weak.id)
    assert w.suppressed and not w.expired  # inspectable, not recallable
    assert weak.id not in mem.recall("coffee machine floor two slow").entry_ids
    assert mem.get(protected.id).retention == 1.0
    assert mem.prune()["suppressed"] == 1
    assert {e.id for e in mem.entries()} == {strong.id, protected.id}


def test_forgetting_is_off_by_default(tmp_path):
    mem, clock = make(tmp_path)
    entry = mem.remember(FACTS[3])
    clock.advance(10_000 * DAY)
    assert mem.get(entry.id).retention == 1.0
    assert entry.id in mem.recall("answers British English").entry_ids


def test_forget_deletes_text_vector_and_keyword_index(tmp_path):
    mem, _ = make(tmp_path)
    events = []
    mem.subscribe(events.append, types=["forgotten"])
    entry = mem.remember(FACTS[0])
    assert mem.forget(entry.id) is True
    assert mem.forget(entry.id) is False
    assert mem.recall("PROJ-4417").abstained
    assert mem.rank("PROJ-4417 webhook") == []
    raw = sqlite3.connect(tmp_path / "mem.db")
    assert raw.execute("SELECT count(*) FROM entries").fetchone()[0] == 0
    raw.close()
    assert events[0].data["id"] == entry.id


# -- sessions ----------------------------------------------------------------------------------------


def test_session_entries_expire_with_session_ttl_and_end_session(tmp_path):
    mem, clock = make(tmp_path, session_ttl=3600)
    note = mem.remember("Working on the invoice export bug right now.", durability="session", session_id="s1")
    assert note.expires_at == pytest.approx(clock.t + 3600)
    other = mem.remember("Session two is reviewing the deploy checklist.", durability="session", session_id="s2")
    assert mem.end_session("s2") == 1
    assert mem.recall("deploy checklist review", session_id="s2").abstained
    assert mem.get(other.id, session_id="s2").expired
    clock.advance(3601)
    assert mem.recall("invoice export bug", session_id="s1").abstained
    assert mem.prune()["expired"] == 2


# -- events --------------------------------------------------------------------------------------------


def test_events_carry_plain_data_and_subscribers_cannot_break_the_memory(tmp_path):
    mem, _ = make(tmp_path)
    seen = []
    mem.subscribe(lambda e: (_ for _ in ()).throw(RuntimeError("bad subscriber")))
    unsubscribe = mem.subscribe(seen.append)
    entry = mem.remember(FACTS[2])
    sel = mem.recall("billing Postgres")
    mem.complete(sel.id, 0.8)
    mem.feedback(entry.id, 0.5)
    types = [e.type for e in seen]
    assert types == ["remembered", "recalled", "completed", "feedback"]
    recalled = seen[1].to_dict()
    assert recalled["data"]["hits"][0]["text"] == FACTS[2]  # the statements, not a count
    json.dumps([e.to_dict() for e in seen])
    unsubscribe()
    mem.remember(FACTS[3])
    assert len(seen) == 4
    with pytest.raises(InvalidInput):
        mem.subscribe(seen.append, types=["exploded"])


# -- several controllers on one file --------------------------------------------------------------------


def test_a_second_controller_sees_committed_writes(tmp_path):
    a, clock = make(tmp_path)
    b = AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="team", clock=clock)
    entry = a.remember(FACTS[2])
    assert b.rank("billing Postgres")[0].entry_id == entry.id
    b.forget(entry.id)
    assert a.rank("billing Postgres") == []
    a.close()
    b.close()


# -- pure helpers -------------------------------------------------------------------------------------------


def test_identifier_tokens_and_query_terms():
    assert kw.identifier_tokens("Is PROJ-4417 fixed in v2.3.1 on db-eu-west-2, see #1182?") == \
        ["proj-4417", "v2.3.1", "db-eu-west-2", "#1182"]
    assert kw.identifier_tokens("around day 3, 2 hours later") == []
    assert kw.query_terms("What's the name of my dog?") == ["dog"]
    assert kw.stem("lives") == kw.stem("live") and kw.stem("weighs") == kw.stem("weigh")
    assert kw.contains_token("Ticket PROJ-4417: webhooks", "proj-4417")
    assert not kw.contains_token("Ticket PROJ-44170", "proj-4417")


def test_time_hints():
    now = 100 * DAY
    assert parse_time_hints("What phone do I use now?", now).order == "recent"
    assert parse_time_hints("What was the original plan?", now).order == "origin"
    assert parse_time_hints("What phone do I use?", now).order is None
    hints = parse_time_hints("What happened around day 16?", now, day_zero=0.0)
    assert hints.window == (15 * DAY, 18 * DAY)
    assert parse_time_hints("What happened on day 16?", now).window is None  # needs day_zero
    assert parse_time_hints("Notes from 2024-05-03", now).window[1] - parse_time_hints(
        "Notes from 2024-05-03", now).window[0] == DAY
    assert parse_time_hints("what did I do yesterday", now).window == (now - 2 * DAY, now)
    # comparisons of two events ask for no earlier state, with comparisons=True only
    for text in ("Which happened first: the migration or the standup move?",
                 "Did the fall happen before or after the heart appointment?"):
        assert parse_time_hints(text, now).order == "origin"
        assert parse_time_hints(text, now, comparisons=True).order is None
    for text in ("What was my first car?", "Where did I live before Berlin?"):
        assert parse_time_hints(text, now, comparisons=True).order == "origin"


def test_recall_config_validates():
    with pytest.raises(InvalidInput):
        Tuning(beta=0)
    for bad in (True, 0, -1.0, 10.5, float("nan"), "7", None):
        with pytest.raises(InvalidInput, match="novelty_ceiling"):
            Tuning(novelty_ceiling=bad)
    assert Tuning(novelty_ceiling=7).novelty_ceiling == 7
    default = Tuning()
    assert (default.novelty_ceiling, default.rrf_weights["associative"]) == (7.0, 0.0)
    # the chosen behaviours are not options any more
    for removed in ("version_order", "comparison_cues", "path_floor", "split_parts"):
        with pytest.raises(InvalidInput, match="no such setting"):
            RecallConfig(**{removed: True})
    with pytest.raises(InvalidInput):
        WritePolicy(update_cues="(unclosed")
    with pytest.raises(InvalidInput):
        RecallConfig(activation="fuzzy")
    for field, bad in (("assoc_k", 0), ("assoc_k", True), ("floor_ratio", 1.5), ("keyword_weight", -0.1),
                       ("conversation", "yes")):
        with pytest.raises(InvalidInput, match=field):
            RecallConfig(**{field: bad})
    assert WritePolicy(update_cues=None).update_cues is None


def test_vectors_are_centered_unit_vectors(tmp_path):
    mem, _ = make(tmp_path)
    entry = mem.remember(FACTS[2])
    raw = sqlite3.connect(tmp_path / "mem.db").execute("SELECT vector FROM entries WHERE id = ?",
                                                        (entry.id,)).fetchone()[0]
    vec = np.frombuffer(raw, dtype="<f4")
    assert np.linalg.norm(vec) == pytest.approx(1.0, abs=1e-5)
    expected = mem.centerer.transform(ENC.encode([FACTS[2]]))[0]
    np.testing.assert_allclose(vec, expected, atol=1e-6)


def test_rank_checks_its_arguments_as_recall_does(tmp_path):
    mem, _ = make(tmp_path)
    mem.remember(FACTS[2])
    for bad in ("", "   ", None, 7):
        for call in (mem.recall, mem.rank):
            with pytest.raises(InvalidInput, match="text: expected a non-empty string"):
                call(bad)
    for limit in (0, 101, True, 2.0):
        for call in (mem.recall, mem.rank):
            with pytest.raises(InvalidInput, match="limit"):
                call("billing", limit=limit)
    assert mem.rank("  billing Postgres  ")[0].text == FACTS[2]
    mem.close()


class CountingEncoder:
    """The hashing encoder, counting its calls."""

    def __init__(self) -> None:
        self.inner, self.calls = ENC, 0
        self.name, self.dim, self.fingerprint = ENC.name, ENC.dim, ENC.fingerprint

    def encode(self, texts):
        self.calls += 1
        return self.inner.encode(texts)


def test_remember_many_stores_what_remember_would_with_batched_encoding(tmp_path, capsys):
    items = [f"Statement {i}: the {['billing', 'deploy', 'standup'][i % 3]} note number {i * 7}" for i in range(600)]
    items[5] = {"text": items[5], "kind": "event", "labels": {"topic": ["x"]}}
    items.append(" " + items[0] + " ")  # merges into the first
    one, two = CountingEncoder(), CountingEncoder()
    a = AgentMemory.open(tmp_path / "a.db", encoder=one, namespace="team", clock=Clock())
    b = AgentMemory.open(tmp_path / "b.db", encoder=two, namespace="team", clock=Clock())
    calls = one.calls, two.calls  # the centering mean, fitted on open
    singly = [a.remember(i, importance=0.7) if isinstance(i, str) else a.remember(importance=0.7, **i)
              for i in items]
    batched = b.remember_many(items, importance=0.7, progress=True)
    assert [e.to_dict() for e in batched] == [e.to_dict() for e in singly]
    assert batched[-1].merged and batched[-1].id == batched[0].id
    assert one.calls - calls[0] == len(items) and two.calls - calls[1] == 3  # batches of 256
    assert "encoding" in capsys.readouterr().err  # the progress bar
    assert [h.entry_id for h in b.rank("billing note")] == [h.entry_id for h in a.rank("billing note")]
    # every item is checked before anything is stored
    for bad, message in (([*items[:3], ""], r"items\[3\]: text"), ([items[0], 7], r"items\[1\]: expected a str"),
                         ([{"text": "x", "colour": "red"}], "unknown argument")):
        with pytest.raises(InvalidInput, match=message):
            a.remember_many(bad)
    with pytest.raises(InvalidInput, match="unknown argument"):
        a.remember_many(["fine"], colour="red")
    assert len(a.entries()) == len(items) - 1
    # an item remember refuses stops there, the items before it stored
    with pytest.raises(InvalidInput, match="kind"):
        a.remember_many(["a new statement about coffee", {"text": "another one about tea", "kind": "poem"}])
    assert [e.text for e in a.entries()][-1] == "a new statement about coffee"
    a.close()
    b.close()


def test_a_file_that_is_not_an_agent_memory_is_refused_and_left_untouched(tmp_path):
    import hashlib

    import hopmem
    from hopmem.errors import CorruptStore

    def digest(path):
        return hashlib.sha256(path.read_bytes()).hexdigest()

    app = tmp_path / "app.db"  # another application's SQLite database
    conn = sqlite3.connect(app)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("CREATE TABLE meta (k TEXT)")  # even with a table of the same name
    conn.commit()
    conn.close()
    vectors = tmp_path / "vectors.hopmem"  # a hopmem vector store
    with hopmem.open(vectors, dim=8) as db:
        db.collection("c").write(np.ones((2, 8), dtype=np.float32))
    for path in (app, vectors):
        before = digest(path)
        with pytest.raises(IncompatibleStore, match="not a hopmem agent memory.*left untouched"):
            AgentMemory.open(path, encoder=ENC, namespace="team")
        assert digest(path) == before
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(bytes(range(256)) * 20)
    with pytest.raises(CorruptStore):
        AgentMemory.open(garbage, encoder=ENC, namespace="team")
    mem, _ = make(tmp_path, "cut.db")
    for fact in FACTS:
        mem.remember(fact)
    mem.close()
    cut = tmp_path / "cut.db"
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    with pytest.raises(CorruptStore):
        AgentMemory.open(cut, encoder=ENC, namespace="team")


def test_a_controller_refuses_to_continue_after_another_reembeds_the_file(tmp_path):
    a, clock = make(tmp_path)
    b = AgentMemory.open(tmp_path / "mem.db", encoder=ENC, namespace="team", clock=clock)
    a.remember(FACTS[2])
    a.reembed(HashingEncoder(384, seed=11))
    with pytest.raises(IncompatibleStore):
        b.recall("billing Postgres")
    a.close()
    b.close()


def test_time_cue_words_are_not_searched_as_subjects(tmp_path):
    # "now" in "where do I climb now" asks for the current state; it is not
    # what the question is about, so an entry that only shares "now" is no
    # keyword candidate (it would crowd out the answer in the fused ranking).
    mem, _ = make(tmp_path)
    weight = mem.remember("User now weighs 83 kg.")
    climb = mem.remember("User climbs at the Kletterwerk gym.")
    hits = mem.rank("Where do I climb now?", mode="keyword")
    assert [h.entry_id for h in hits] == [climb.id]
    assert "now" not in hits[0].explanation.matched_terms
    assert [h.entry_id for h in mem.rank("What do I weigh now?", mode="keyword")] == [weight.id]


def test_split_parts_only_at_question_clauses():
    from hopmem.agent.parts import split_parts

    terms = kw.query_terms
    assert split_parts("Where do I climb now, and what's the hardest route I've led there?", terms) == [
        "Where do I climb now", "what's the hardest route I've led there"]
    assert split_parts("On which day do I visit my mother, and in which city does she live?", terms) == [
        "On which day do I visit my mother", "in which city does she live"]
    assert split_parts("Which ticket tracked the bug and which pull request fixed it?", terms) == [
        "Which ticket tracked the bug", "which pull request fixed it"]
    # one question: "and" joins words, a leading phrase is no question, a part with nothing to search for
    assert split_parts("What did I buy to track my runs and heart rate?", terms) == []
    assert split_parts("Where and when does flight FI 521 go?", terms) == []
    assert split_parts("In the most recent session, what did Tomasz tell me?", terms) == []
    assert split_parts("Who suggested the exam, and when is it?", terms) == []
    assert split_parts("What is my job?", terms) == []
    many = "What is alpha, what is beta, what is gamma, what is delta, what is kappa?"
    assert split_parts(many, terms) == [] and len(split_parts(many, terms, max_parts=5)) == 5


def test_a_multi_part_question_admits_an_answer_for_each_part(tmp_path):
    mem, _ = make(tmp_path)
    climb = mem.remember("User climbs at the Kletterwerk gym every Tuesday.")
    route = mem.remember("The hardest route User has led is a 6b.")
    for text in FACTS:
        mem.remember(text)
    question = "Where do I climb, and what's the hardest route I have led?"
    sel = mem.recall(question, limit=5)
    assert sel.parts == ("Where do I climb", "what's the hardest route I have led")
    assert {climb.id, route.id} <= set(sel.entry_ids)
    by_id = {h.entry_id: h for h in sel.hits}
    assert any(s.startswith("part ") for s in by_id[route.id].explanation.sources)
    assert mem.recall("Where do I climb?").parts == ()


def _floor_case(cfg, mode="hybrid", tau=0.0):
    """Three candidates: 1 matches the question's words and meaning, 2 and 3 only its meaning."""
    from hopmem.agent.evidence import Evidence
    from hopmem.agent.verdict import admit, decide

    ids = [1, 2, 3]
    ev = Evidence(mode, cfg, rows={}, qvec=np.zeros(4, np.float32), semantic={1: 0.9, 2: 0.6, 3: 0.5},
                  associative={}, lexical=None)
    ev.keyword = {1: 1.0, 2: 0.0, 3: 0.0}
    ev.value = {i: ev.path(i) + (cfg.keyword_weight * ev.keyword[i] if mode == "hybrid" else 0.0) for i in ids}
    verdict = decide(mode, cfg, gate(tau), None, ev, ids, 0.0)
    return verdict, admit(ids, ev, verdict, gate(5.0), {}, set(), False)


def test_path_floor_admits_what_the_semantic_path_alone_would():
    # entry 1's keyword evidence sets the evidence floor (0.6 x 1.4 = 0.84) above 2's and 3's; a candidate
    # whose path reaches 0.6 x the best path (0.54) is admitted as well
    verdict, admitted = _floor_case(RecallSettings.resolve())
    assert verdict.path_floor == pytest.approx(0.54)
    assert admitted == {1: "weak evidence in an admitted recall", 2: "semantic evidence in an admitted recall"}
    # only after a yes verdict, and only in hybrid mode (associative mode's floor is on the path already)
    verdict, admitted = _floor_case(RecallSettings.resolve(), tau=10.0)
    assert not verdict.passes and admitted == {}
    verdict, admitted = _floor_case(RecallSettings.resolve(), mode="associative")
    assert verdict.path_floor is None and set(admitted) == {1, 2}
