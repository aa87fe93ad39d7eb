"""Tests of hopmem.text on the durable store, with the (fast, model-free) hashing encoder."""

from __future__ import annotations

import json
import threading
from importlib import resources

import numpy as np
import pytest

import hopmem
from hopmem.errors import IncompatibleStore, InvalidInput
from hopmem.text import CENTERING_FORMAT, MIN_FIT, PreparedVectors, TextCollection
from hopmem.text.centering import Centerer
from hopmem.text.encoders import HashingEncoder
from hopmem.text.recall import TEXT_COLLECTION_CONFIG, RecallGate

D = 384
ENC = HashingEncoder(D)
DATA = json.loads(resources.files("hopmem").joinpath("data/conversation.json").read_text())
STATEMENTS = [s["text"] for s in DATA["statements"]]
SIDS = [s["id"] for s in DATA["statements"]]
RELATED = [r["question"] for r in DATA["related"]]
ANSWERS = [r["answers"] for r in DATA["related"]]
UNRELATED = DATA["unrelated"]


@pytest.fixture
def db(tmp_path):
    with hopmem.open(tmp_path / "t.hopmem", encoder=ENC, **TEXT_COLLECTION_CONFIG) as database:
        yield database


@pytest.fixture
def tc(db):
    return TextCollection(db.collection("conv"), ENC)


@pytest.fixture
def filled(tc):
    tc.remember(STATEMENTS, [{"sid": sid} for sid in SIDS])
    return tc


# ---------------------------------------------------------------------------- remember


class TestRemember:
    def test_ids_documents_and_metadata(self, tc):
        ids = tc.remember(STATEMENTS[:20], [{"sid": s} for s in SIDS[:20]])
        assert ids == list(range(1, 21))
        doc = tc.collection.documents.get(ids[3])
        assert doc.metadata == {"text": STATEMENTS[3], "sid": SIDS[3]}
        more = tc.remember(["One more statement about the garden."])
        assert more == [21]
        assert tc.collection.documents.get(21).metadata == {"text": "One more statement about the garden."}

    def test_same_centering_on_write_and_on_query(self, filled):
        centerer = filled.centerer
        expected = centerer.transform(ENC.encode(STATEMENTS[:3]))
        for i in range(3):
            stored = filled.collection.documents.get(i + 1).vector
            np.testing.assert_array_equal(stored, expected[i])
        np.testing.assert_array_equal(filled.prepare(STATEMENTS[:3]).vectors, expected)
        hit = filled.recall(STATEMENTS[7], limit=1).hits[0]
        assert hit.id == 8 and hit.confidence == pytest.approx(1.0, abs=1e-5)

    def test_mean_is_learned_from_the_first_batch_and_frozen(self, tc):
        tc.remember(STATEMENTS[:20])
        first = tc.centerer
        assert first.frozen and first.n_samples_seen_ == 20
        np.testing.assert_allclose(first.mean_, ENC.encode(STATEMENTS[:20]).mean(axis=0), atol=1e-6)
        tc.remember(STATEMENTS[20:])
        assert tc.centerer == first
        slot = tc.collection.centering
        assert slot["format"] == CENTERING_FORMAT and slot["encoder"]["fingerprint"] == ENC.fingerprint
        assert Centerer.from_dict(slot["centerer"]) == first

    def test_mean_survives_a_reopen(self, tmp_path):
        path = tmp_path / "r.hopmem"
        with hopmem.open(path, encoder=ENC, **TEXT_COLLECTION_CONFIG) as database:
            tc = TextCollection(database.collection("c"), ENC)
            tc.remember(STATEMENTS)
            mean = tc.centerer
            tc.calibrate(RELATED[:20], UNRELATED[:20])
            gate = tc.gate
        with hopmem.open(path, encoder=ENC) as database:
            again = TextCollection(database.collection("c"), ENC)
            assert again.centerer == mean and again.gate == gate
            assert again.recall(STATEMENTS[0], limit=1).hits[0].id == 1

    def test_first_batch_too_small(self, tc):
        with pytest.raises(InvalidInput, match=f"at least {MIN_FIT} texts"):
            tc.remember(STATEMENTS[:MIN_FIT - 1])
        assert tc.collection.stats().writes == 0 and tc.collection.centering is None

    def test_fit_centering_then_one_at_a_time(self, tc):
        centerer = tc.fit_centering(RELATED[:MIN_FIT])
        assert centerer.frozen and tc.collection.stats().writes == 0
        assert tc.remember([STATEMENTS[0]]) == [1]
        assert tc.remember([STATEMENTS[1]]) == [2]
        assert tc.centerer == centerer
        assert tc.recall(STATEMENTS[1], limit=1).hits[0].id == 2
        with pytest.raises(IncompatibleStore, match="already has a centering mean"):
            tc.fit_centering(RELATED[:MIN_FIT])
        with pytest.raises(InvalidInput):
            TextCollection(tc.collection, ENC).fit_centering(RELATED[:3])

    def test_empty_batch(self, tc):
        assert tc.remember([]) == []
        assert tc.collection.centering is None

    @pytest.mark.parametrize("texts", ["one string", [1, 2], ["ok", "   "], None])
    def test_bad_texts(self, tc, texts):
        with pytest.raises(InvalidInput):
            tc.remember(texts)

    @pytest.mark.parametrize("metadata,match", [
        ({"sid": 1}, "single dict"),
        ([{"a": 1}], "one per text"),
        ([["x"]] * 16, "dict or None"),
        ([{"text": "other"}] * 16, "reserved"),
        ([{"when": object()}] * 16, "JSON"),
        ([{"x": float("nan")}] * 16, "JSON"),
    ])
    def test_bad_metadata(self, tc, metadata, match):
        with pytest.raises(InvalidInput, match=match):
            tc.remember(STATEMENTS[:16], metadata)
        assert tc.collection.stats().writes == 0 and tc.collection.centering is None

    def test_other_text_key(self, db):
        tc = TextCollection(db.collection("k"), ENC, text_key="body")
        tc.remember(STATEMENTS[:16], [{"text": "allowed here"}] * 16)
        assert db.collection("k").documents.get(1).metadata == {"body": STATEMENTS[0],
                                                               "text": "allowed here"}
        hit = tc.recall(STATEMENTS[0], limit=1).hits[0]
        assert hit.text == STATEMENTS[0] and hit.metadata == {"text": "allowed here"}

    def test_concurrent_first_batches_share_one_mean(self, db):
        # One TextCollection per collection, shared: it holds the lock.
        coll = db.collection("race")
        shared = TextCollection(coll, ENC)
        wrappers = [shared, shared]
        batches = [STATEMENTS[:24], STATEMENTS[24:]]
        errors = []

        def run(i):
            try:
                wrappers[i].remember(batches[i])
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        centerer = wrappers[0].centerer
        for doc in coll.documents.list(limit=100, vectors=True):
            expected = centerer.transform(ENC.encode([doc.metadata["text"]]))[0]
            np.testing.assert_array_equal(doc.vector, expected)


# ------------------------------------------------------------------------ refusals


class TestRefusals:
    def test_vectors_prepared_under_another_mean(self, db):
        a = TextCollection(db.collection("a"), ENC)
        b = TextCollection(db.collection("b"), ENC)
        a.remember(STATEMENTS[:24])
        b.remember(STATEMENTS[24:])
        foreign = a.prepare(["A question about billing?"])
        with pytest.raises(IncompatibleStore, match="centering mean"):
            b.write_prepared(foreign, [{"text": "x"}])
        with pytest.raises(IncompatibleStore, match="centering mean"):
            b.recall_prepared(foreign)
        own = b.prepare(["A question about billing?"])
        assert b.write_prepared(own, [{"text": "A question about billing?"}]) == [25]
        assert b.recall_prepared(own, limit=1).hits[0].id == 25
        with pytest.raises(InvalidInput):
            b.write_prepared(own, [])
        with pytest.raises(InvalidInput):
            b.recall_prepared(b.prepare(["x", "y"]))
        with pytest.raises(InvalidInput):
            b.write_prepared(own.vectors, [{"text": "x"}])

    def test_prepared_by_another_encoder(self, db):
        tc = TextCollection(db.collection("a"), ENC)
        tc.remember(STATEMENTS)
        good = tc.prepare(["hello"])
        bad = PreparedVectors(good.vectors, "0" * 16, good.centering)
        with pytest.raises(IncompatibleStore, match="encoder"):
            tc.write_prepared(bad, [{"text": "hello"}])

    def test_prepare_needs_a_mean(self, tc):
        with pytest.raises(InvalidInput, match="no centering mean"):
            tc.prepare(["x"])

    def test_a_collection_with_uncentered_vectors(self, db):
        coll = db.collection("raw")
        coll.write(ENC.encode(STATEMENTS[:3]), metadata=[{"text": t} for t in STATEMENTS[:3]])
        tc = TextCollection(coll, ENC)
        with pytest.raises(IncompatibleStore, match="without a centering record"):
            tc.remember(STATEMENTS)
        with pytest.raises(IncompatibleStore, match="without a centering record"):
            tc.recall("anything")
        with pytest.raises(IncompatibleStore, match="without a centering record"):
            tc.fit_centering(STATEMENTS)

    def test_another_encoder_on_the_database(self, db):
        with pytest.raises(IncompatibleStore, match="database records encoder"):
            TextCollection(db.collection("conv"), HashingEncoder(D, seed=1))

    def test_another_encoder_on_the_collection(self, tmp_path):
        with hopmem.open(tmp_path / "n.hopmem", dim=D, **TEXT_COLLECTION_CONFIG) as database:
            TextCollection(database.collection("c"), ENC).remember(STATEMENTS)
            other = TextCollection(database.collection("c"), HashingEncoder(D, seed=1))
            with pytest.raises(IncompatibleStore, match="written with encoder"):
                other.recall("anything")
            with pytest.raises(IncompatibleStore, match="written with encoder"):
                other.remember(STATEMENTS)

    def test_dimension(self, db):
        with pytest.raises(IncompatibleStore, match="128-d"):
            TextCollection(db.collection("conv"), HashingEncoder(128))

    @pytest.mark.parametrize("kwargs", [dict(text_key=""), dict(min_fit=1), dict(resolution="fuzzy")])
    def test_bad_arguments(self, db, kwargs):
        with pytest.raises(InvalidInput):
            TextCollection(db.collection("conv"), ENC, **kwargs)
        with pytest.raises(InvalidInput):
            TextCollection(db.collection("conv"), object())

    def test_gate_from_another_mean(self, filled):
        filled.calibrate(RELATED[:20], UNRELATED[:20])
        data = filled.collection.gate
        data["centering"] = "f" * 16
        filled.collection.gate = data
        with pytest.raises(IncompatibleStore, match="calibrate again"):
            filled.recall("anything")


# ------------------------------------------------------------------------------ recall


class TestRecall:
    def test_empty_collection_abstains(self, tc):
        result = tc.recall("Anything at all?")
        assert result.abstained and result.reason == "empty memory" and result.hits == []
        assert result.fidelity is None and result.first_contact is None

    @pytest.mark.parametrize("text", ["", "  ", 5, ["a"]])
    def test_bad_question(self, filled, text):
        with pytest.raises(InvalidInput):
            filled.recall(text)

    def test_bad_n(self, filled):
        with pytest.raises(InvalidInput):
            filled.recall("billing", limit=0)

    def test_ungated(self, filled):
        result = filled.recall(RELATED[0], limit=5)
        assert not result.abstained and len(result.hits) == 5 and result.reason is None
        assert all(h.band is None for h in result.hits)
        top = result.hits[0]
        assert top.text in STATEMENTS and top.metadata == {"sid": SIDS[STATEMENTS.index(top.text)]}
        assert 0.0 < result.first_contact <= 1.0 and -1.0 <= result.fidelity <= 1.0

    def test_deleted_documents_are_not_recalled(self, filled):
        filled.collection.documents.delete(8)
        ids = [h.id for h in filled.recall(STATEMENTS[7], limit=5).hits]
        assert 8 not in ids and len(ids) == 5

    def test_indexed_resolution(self, db):
        tc = TextCollection(db.collection("conv"), ENC, resolution="indexed")
        tc.remember(STATEMENTS)
        assert tc.recall(STATEMENTS[5], limit=1).hits[0].id == 6

    def test_fused_is_at_least_as_good_as_the_question_alone(self, filled):
        """On the shipped data, adding the reconstruction never costs a top-1 answer."""
        prepared = filled.prepare(RELATED)

        def accuracy(fusion):
            hits = [filled.recall_prepared(PreparedVectors(v[None], prepared.encoder,
                                                           prepared.centering), limit=1,
                                           fusion=fusion).hits[0] for v in prepared.vectors]
            return np.mean([h.metadata["sid"] == a for h, a in zip(hits, ANSWERS)])

        fused, alone = accuracy("path"), accuracy("question")
        assert fused >= alone
        assert alone > 0.5  # the hashing encoder is lexical: far below MiniLM, far above chance


# ---------------------------------------------------------------------------- calibrate


class TestCalibrate:
    def test_gate_is_stored_and_used(self, filled):
        gate = filled.calibrate(RELATED[0::2], UNRELATED[0::2])
        assert isinstance(gate, RecallGate) and filled.gate == gate
        assert filled.collection.gate == gate.to_dict()
        assert gate.encoder == ENC.fingerprint and gate.centering == filled.centerer.fingerprint
        assert gate.gate.calibrated_writes == 48 and gate.gate.calibrated_locations == 48
        assert gate.gate.holdout_coverage is not None
        abstained = [filled.recall(q) for q in UNRELATED[1::2]]
        assert np.mean([r.abstained for r in abstained]) >= 0.8
        one = next(r for r in abstained if r.abstained)
        assert one.hits == [] and one.reason.startswith("below gate (confidence ")
        answered = [r for r in (filled.recall(q) for q in RELATED[1::2]) if not r.abstained]
        assert answered
        for result in answered:
            assert result.hits[0].band in ("vivid", "clear")
            assert all(h.band in ("vivid", "clear", "vague") for h in result.hits)
        filled.clear_gate()
        assert filled.gate is None and filled.recall(UNRELATED[1]).hits[0].band is None

    def test_first_contact_statistic(self, filled):
        gate = filled.calibrate(RELATED, UNRELATED, statistic="first_contact")
        assert gate.statistic == "first_contact"
        result = filled.recall(UNRELATED[0])
        assert result.score == pytest.approx(result.first_contact)

    def test_gate_goes_stale_as_the_memory_grows(self, filled):
        filled.calibrate(RELATED, UNRELATED)
        assert not filled.recall(STATEMENTS[0]).gate_stale
        filled.remember([f"{s} (again, take {i})" for i in range(2) for s in STATEMENTS])
        assert filled.gate.is_stale(filled.collection.stats())
        assert filled.recall(STATEMENTS[0]).gate_stale

    def test_needs_a_filled_collection(self, tc):
        with pytest.raises(InvalidInput, match="empty collection"):
            tc.calibrate(RELATED, UNRELATED)

    def test_bad_arguments(self, filled):
        with pytest.raises(InvalidInput):
            filled.calibrate(RELATED[:1], UNRELATED)
        with pytest.raises(InvalidInput):
            filled.calibrate("one text", UNRELATED)
        with pytest.raises(InvalidInput):
            filled.calibrate(RELATED, UNRELATED, error_budget=-0.1)
        assert filled.gate is None


# ---------------------------------------------------------------- collection, demo


@pytest.mark.skipif(not hasattr(hopmem.Collection, "remember"),
                    reason="the store's Collection does not delegate to hopmem.text yet")
def test_collection_delegates_to_the_text_layer(tmp_path):
    with hopmem.open(tmp_path / "d.hopmem", encoder=ENC, **TEXT_COLLECTION_CONFIG) as database:
        coll = database.collection("c")
        assert coll.remember(STATEMENTS, [{"sid": s} for s in SIDS]) == list(range(1, 49))
        gate = coll.calibrate(RELATED, UNRELATED)
        assert isinstance(gate, RecallGate) and coll.gate == gate.to_dict()
        result = coll.recall(STATEMENTS[4], 2)
        assert result.hits[0].id == 5 and result.hits[0].band == "vivid"
        assert coll.recall(UNRELATED[0]).abstained


def test_demo_runs_with_the_hashing_encoder(capsys, tmp_path):
    from hopmem import demo

    keep = tmp_path / "demo.hopmem"
    assert demo.main(["--encoder", "hashing", "--show", "3", "--keep", str(keep)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("encoder: hashing-384, the model-free fallback")
    assert "abstained: below gate (confidence " in out
    assert "gate calibrated on 48 related and 48 unrelated questions" in out
    assert keep.exists()
    assert demo.main(["--encoder", "hashing", "--keep", str(keep)]) == 2  # never overwrites
