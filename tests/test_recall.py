"""Tests of hopmem.recall: fusion, abstention, bands, calibration (no store, no text)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hopmem
from hopmem.errors import InvalidInput
from hopmem.text import gates
from hopmem.text.gates import Bands
from hopmem.text.recall import (
    DEFAULT_BETA,
    DEFAULT_MODE,
    FUSIONS,
    TEXT_COLLECTION_CONFIG,
    RecallGate,
    RecallHit,
    RecallResult,
    RecallSource,
    calibrate_gate,
    fuse,
    question_statistics,
    recall_vector,
)


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class ArraySource:
    """A RecallSource over a Memory and a NumPy document matrix (test stand-in)."""

    def __init__(self, docs=None, metadata=None, *, dim=None, id_step=10, **config):
        dim = dim if dim is not None else np.asarray(docs).shape[1]
        config = {**TEXT_COLLECTION_CONFIG, **config}
        self.memory = hopmem.Memory(dim, **config)
        self.vectors = np.zeros((0, dim), np.float32)
        self.ids = np.zeros(0, np.int64)
        self.metadata: list = []
        self.deleted: set[int] = set()  # documents fetch_documents no longer finds
        self.id_step = id_step
        if docs is not None:
            self.add(docs, metadata)

    def add(self, docs, metadata=None):
        docs = np.asarray(docs, np.float32)
        self.memory.write(docs)
        if metadata is False:  # a write without metadata: no documents
            return
        start = len(self.ids)
        new_ids = (np.arange(start, start + len(docs)) + 1) * self.id_step
        self.vectors = np.vstack([self.vectors, docs])
        self.ids = np.concatenate([self.ids, new_ids])
        self.metadata += list(metadata) if metadata is not None else [
            {"text": f"doc {i}"} for i in new_ids]

    def analyze(self, vector):
        return self.memory.analyze(vector)

    def nearest_documents(self, vector, n):
        if not len(self.ids):
            return []
        scores = unit(self.vectors) @ unit(vector)
        order = np.lexsort((self.ids, -scores))[:n]
        return self.ids[order].tolist()

    def fetch_documents(self, ids):
        rows = [int(np.flatnonzero(self.ids == i)[0]) for i in ids if i in self.ids
                and i not in self.deleted]
        return self.ids[rows].tolist(), self.vectors[rows], [self.metadata[r] for r in rows]

    def stats(self):
        return self.memory.stats()


def clusters(n_clusters=6, per=4, dim=48, spread=0.6, seed=0):
    rng = np.random.default_rng(seed)
    centers = unit(rng.normal(size=(n_clusters, dim)))
    docs = unit(np.repeat(centers, per, 0) + spread * unit(rng.normal(size=(n_clusters * per, dim))))
    return docs.astype(np.float32), rng


def noisy(docs, rng, noise=0.7):
    return unit(docs + noise * unit(rng.normal(size=docs.shape))).astype(np.float32)


def a_gate(tau=0.5, vivid=None, statistic="confidence", writes=None):
    vivid = max(tau, 0.8) if vivid is None else vivid
    gate = gates.Gate(tau=tau, coverage=1.0, error_rate=0.0, auc=1.0, n_relevant=2, n_irrelevant=2,
                      calibrated_writes=writes, calibrated_locations=None,
                      bands=Bands(vivid=vivid, clear=tau), separated=True,
                      holdout_coverage=1.0, holdout_error_rate=0.0)
    return RecallGate(gate=gate, statistic=statistic)


# ----------------------------------------------------------------------------- defaults


def test_defaults_chosen_by_measurement():
    assert DEFAULT_MODE == "plain" and DEFAULT_BETA == 30.0
    assert TEXT_COLLECTION_CONFIG == {"mode": "plain", "beta": 30.0}
    assert isinstance(ArraySource(np.eye(4)), RecallSource)


# ------------------------------------------------------------------------------- fusion


class TestFuse:
    qs = np.array([0.9, 0.2, 0.5, -0.3])
    rs = np.array([0.1, 0.95, 0.5, 0.8])

    def test_rules(self):
        np.testing.assert_allclose(fuse(self.qs, self.rs, 0.5, "path"), [0.9, 0.475, 0.5, 0.4])
        np.testing.assert_allclose(fuse(self.qs, self.rs, 0.5, "question"), self.qs)
        np.testing.assert_allclose(fuse(self.qs, self.rs, 0.5, "reconstruction"), self.rs)
        np.testing.assert_allclose(fuse(self.qs, self.rs, 0.5, "max"), [0.9, 0.95, 0.5, 0.8])
        rq = np.array([0, 2, 1, 3])  # ranks by question score
        rr = np.array([3, 0, 2, 1])
        np.testing.assert_allclose(fuse(self.qs, self.rs, 0.5, "rrf"), 1 / (60 + rq) + 1 / (60 + rr))

    def test_path_ignores_a_reconstruction_that_points_away(self):
        # A negative fidelity must not turn anti-similar documents into hits.
        np.testing.assert_allclose(fuse(self.qs, -self.rs, -0.9, "path"), self.qs)

    def test_rrf_ties_go_to_the_lower_id(self):
        scores = fuse([0.5, 0.5], [0.5, 0.5], 1.0, "rrf", ids=[7, 3])
        assert scores[1] > scores[0]

    @pytest.mark.parametrize("bad", [
        dict(rule="mean"), dict(question_scores=[1.0, 2.0]), dict(question_scores=[[1.0]]),
        dict(fidelity=math.nan)])
    def test_validation(self, bad):
        args = dict(question_scores=[0.1], reconstruction_scores=[0.2], fidelity=0.5, rule="path")
        args.update(bad)
        with pytest.raises(InvalidInput):
            fuse(**args)

    @given(st.integers(0, 2**32 - 1), st.integers(1, 8), st.floats(-1, 1))
    def test_path_top_n_lies_in_the_union_of_both_top_n(self, seed, n, fidelity):
        # Why the candidate pool of size n is enough for exact fused ranking.
        rng = np.random.default_rng(seed)
        docs = unit(rng.normal(size=(30, 8)))
        q, r = unit(rng.normal(size=8)), unit(rng.normal(size=8))
        qs, rs = docs @ q, docs @ r
        ids = np.arange(30)
        full = np.lexsort((ids, -fuse(qs, rs, fidelity)))[:n]
        union = np.union1d(np.lexsort((ids, -qs))[:n], np.lexsort((ids, -rs))[:n])
        sub = union[np.lexsort((union, -fuse(qs[union], rs[union], fidelity)))][:n]
        np.testing.assert_array_equal(full, sub)


# ------------------------------------------------------------------------------- recall


class TestRecall:
    def test_empty_memory_abstains(self):
        result = recall_vector(ArraySource(dim=8), np.ones(8, np.float32))
        assert result == RecallResult(None, None, [], True, "empty memory")

    def test_no_documents_abstains(self):
        source = ArraySource(dim=8)
        source.add(np.eye(8, dtype=np.float32), metadata=False)
        result = recall_vector(source, np.eye(8, dtype=np.float32)[0])
        assert result.abstained and result.reason == "no candidates" and result.hits == []
        assert result.fidelity == pytest.approx(1.0) and result.first_contact is not None

    def test_documents_deleted_after_the_query_are_left_out(self):
        source = ArraySource(np.eye(3))
        source.deleted = {10}
        assert [h.id for h in recall_vector(source, np.eye(3)[0], limit=3).hits] == [20, 30]
        source.deleted = {10, 20, 30}
        assert recall_vector(source, np.eye(3)[0]).reason == "no candidates"

    def test_ungated_hits(self):
        docs, rng = clusters()
        source = ArraySource(docs)
        q = noisy(docs[5:6], rng, 0.3)[0]
        result = recall_vector(source, q, limit=4)
        assert not result.abstained and result.reason is None and not result.gate_stale
        assert len(result.hits) == 4
        assert result.hits[0].id == 60 and result.hits[0].text == "doc 60"
        assert result.hits[0].metadata == {}
        assert all(h.band is None for h in result.hits)
        conf = [h.confidence for h in result.hits]
        assert conf == sorted(conf, reverse=True)
        assert result.score == conf[0]
        trace = source.memory.analyze(q)
        assert result.fidelity == pytest.approx(trace.fidelity)
        assert result.first_contact == pytest.approx(trace.first_contact)
        # confidence is the path score of each hit
        r = unit(trace.result)
        for hit in result.hits:
            d = unit(source.vectors[list(source.ids).index(hit.id)])
            path = max(d @ unit(q), trace.fidelity * (d @ r)) if trace.fidelity > 0 else d @ unit(q)
            assert hit.confidence == pytest.approx(path)
            assert set(hit.sources) <= {"question", "reconstruction"} and hit.sources

    def test_a_written_vector_recalls_itself(self):
        docs, _ = clusters()
        source = ArraySource(docs)
        for i in (0, 7, 23):
            hit = recall_vector(source, docs[i], limit=1).hits[0]
            assert hit.id == (i + 1) * 10 and hit.confidence == pytest.approx(1.0, abs=1e-5)

    def test_equal_scores_go_to_the_lower_id(self):
        v = np.eye(4, dtype=np.float32)[0]
        source = ArraySource(np.stack([v, v, v]))
        assert [h.id for h in recall_vector(source, v, limit=3).hits] == [10, 20, 30]

    def test_metadata_without_text(self):
        source = ArraySource(np.eye(3), metadata=["plain string", {"k": 1}, {"text": 5}])
        hits = recall_vector(source, np.eye(3)[0], limit=3).hits
        by_id = {h.id: h for h in hits}
        assert by_id[10].text is None and by_id[10].metadata == "plain string"
        assert by_id[20].text is None and by_id[20].metadata == {"k": 1}
        assert by_id[30].text is None and by_id[30].metadata == {"text": 5}

    def test_other_text_key(self):
        source = ArraySource(np.eye(3), metadata=[{"body": "x", "k": 1}] * 3)
        hit = recall_vector(source, np.eye(3)[0], limit=1, text_key="body").hits[0]
        assert hit.text == "x" and hit.metadata == {"k": 1}

    @pytest.mark.parametrize("fusion", FUSIONS)
    def test_every_fusion_rule_answers(self, fusion):
        docs, rng = clusters()
        source = ArraySource(docs)
        result = recall_vector(source, noisy(docs[3:4], rng, 0.2)[0], limit=3, fusion=fusion)
        assert result.hits[0].id == 40 and len(result.hits) == 3

    @pytest.mark.parametrize("kwargs", [dict(limit=0), dict(limit=True), dict(limit=2.0), dict(pool=0),
                                        dict(fusion="mean")])
    def test_bad_arguments(self, kwargs):
        with pytest.raises(InvalidInput):
            recall_vector(ArraySource(np.eye(3)), np.eye(3)[0], **kwargs)

    def test_question_must_be_one_vector(self):
        with pytest.raises(InvalidInput):
            recall_vector(ArraySource(np.eye(3)), np.eye(3))

    def test_results_are_json(self):
        result = recall_vector(ArraySource(np.eye(3)), np.eye(3)[0], gate=a_gate(0.5))
        data = json.loads(json.dumps(result.to_dict()))
        assert set(data) == {"fidelity", "first_contact", "hits", "abstained", "reason", "score",
                             "gate_stale"}
        assert set(data["hits"][0]) == {"text", "id", "metadata", "confidence", "band", "sources"}


# ---------------------------------------------------------------------------- the gate


class TestGate:
    def test_abstains_below_tau_with_a_reason_and_no_hits(self):
        docs, rng = clusters()
        source = ArraySource(docs)
        far = unit(rng.normal(size=docs.shape[1])).astype(np.float32)
        result = recall_vector(source, far, gate=a_gate(tau=0.9))
        assert result.abstained and result.hits == []
        assert re.fullmatch(r"below gate \(confidence -?\d\.\d\d < tau 0\.90\)", result.reason)
        assert result.score < 0.9 and result.fidelity is not None

    def test_bands_when_admitted(self):
        docs, rng = clusters()
        source = ArraySource(docs)
        gate = a_gate(tau=0.3, vivid=0.9)
        result = recall_vector(source, noisy(docs[2:3], rng, 0.4)[0], limit=6, gate=gate)
        assert not result.abstained
        for hit in result.hits:
            assert hit.band == gate.bands.band(hit.confidence)
        assert result.hits[0].band in ("vivid", "clear")
        assert {h.band for h in result.hits} >= {"vague"}  # lower hits fall below tau

    def test_first_contact_statistic(self):
        docs, _ = clusters()
        source = ArraySource(docs)
        trace = source.memory.analyze(docs[0])
        above = a_gate(tau=trace.first_contact - 0.01, statistic="first_contact")
        below = a_gate(tau=trace.first_contact + 0.01, statistic="first_contact")
        assert not recall_vector(source, docs[0], gate=above).abstained
        res = recall_vector(source, docs[0], gate=below)
        assert res.abstained and res.reason.startswith("below gate (first_contact ")
        assert res.score == pytest.approx(trace.first_contact)

    def test_stale_gate_is_flagged(self):
        docs, _ = clusters()
        source = ArraySource(docs[:4])
        gate = a_gate(tau=0.1, writes=4)
        assert not recall_vector(source, docs[0], gate=gate).gate_stale
        source.add(docs[4:])
        assert recall_vector(source, docs[0], gate=gate).gate_stale

    def test_round_trip(self):
        gate = RecallGate(a_gate(0.4).gate, "first_contact", Bands(0.7, 0.3), "enc", "mean")
        data = json.loads(json.dumps(gate.to_dict()))
        assert RecallGate.from_dict(data) == gate
        assert gate.tau == 0.4 and gate.band(0.5) == "clear" and gate.admits(0.4)

    def test_bands_default_to_the_gates(self):
        gate = a_gate(0.4, 0.6)
        assert gate.bands == gate.gate.bands

    @pytest.mark.parametrize("data", [None, {}, {"format": "hopmem.gate"},
                                      {"format": "hopmem.recall-gate", "version": 2}])
    def test_from_dict_refuses(self, data):
        with pytest.raises(InvalidInput):
            RecallGate.from_dict(data)

    def test_missing_key(self):
        data = a_gate().to_dict()
        del data["bands"]
        with pytest.raises(InvalidInput, match="bands"):
            RecallGate.from_dict(data)

    @pytest.mark.parametrize("kwargs", [dict(statistic="fidelity"), dict(gate=0.5),
                                        dict(bands=(0.5, 0.6))])
    def test_constructor_validates(self, kwargs):
        args = dict(gate=a_gate().gate)
        args.update(kwargs)
        with pytest.raises(InvalidInput):
            RecallGate(**args)


# ------------------------------------------------------------------------- calibration


class TestCalibrate:
    def setup_method(self):
        docs, rng = clusters(n_clusters=8, per=4, dim=64)
        self.source = ArraySource(docs)
        self.related = noisy(docs, rng, 0.5)
        self.unrelated = unit(rng.normal(size=(32, 64))).astype(np.float32)

    def test_gate_separates_and_records_the_load(self):
        gate = calibrate_gate(self.source, self.related, self.unrelated, encoder="e", centering="c")
        assert gate.statistic == "confidence" and gate.bands == gate.gate.bands
        assert gate.gate.auc > 0.99
        assert gate.gate.calibrated_writes == 32 and gate.gate.calibrated_locations == 32
        assert (gate.encoder, gate.centering) == ("e", "c")
        stats = question_statistics(self.source, self.unrelated)
        assert np.all(stats.confidence < gate.tau)
        answered = [recall_vector(self.source, q, gate=gate) for q in self.related]
        assert np.mean([not r.abstained for r in answered]) >= 0.95

    def test_first_contact_gate_bands_come_from_confidences(self):
        gate = calibrate_gate(self.source, self.related, self.unrelated, statistic="first_contact")
        assert gate.statistic == "first_contact"
        conf = gates.calibrate(question_statistics(self.source, self.related).confidence,
                               question_statistics(self.source, self.unrelated).confidence,
                               writes=32, locations=32)
        assert gate.bands == conf.bands

    def test_question_statistics(self):
        stats = question_statistics(self.source, self.related[:5])
        assert stats.confidence.shape == stats.first_contact.shape == (5,)
        assert stats.top_ids.tolist() == [10, 20, 30, 40, 50]
        with pytest.raises(InvalidInput):
            stats.statistic("nope")
        with pytest.raises(InvalidInput):
            question_statistics(self.source, self.related[0])

    def test_refuses_an_empty_memory_or_no_documents(self):
        with pytest.raises(InvalidInput, match="empty memory"):
            calibrate_gate(ArraySource(dim=64), self.related, self.unrelated)
        source = ArraySource(dim=64)
        source.add(self.related, metadata=False)
        with pytest.raises(InvalidInput, match="no document"):
            calibrate_gate(source, self.related, self.unrelated)

    def test_bad_arguments(self):
        with pytest.raises(InvalidInput):
            calibrate_gate(self.source, self.related, self.unrelated, statistic="fidelity")
        with pytest.raises(InvalidInput):
            calibrate_gate(self.source, self.related[:1], self.unrelated)
        with pytest.raises(InvalidInput):
            calibrate_gate(self.source, self.related, self.unrelated, error_budget=1.5)


# --------------------------------------------------------------- fused vs question alone


@pytest.mark.parametrize("spread,noise", [(0.6, 0.8), (0.8, 1.0), (1.2, 1.0)])
def test_fused_recall_is_at_least_as_good_as_the_question_alone(spread, noise):
    """With the default mode and beta, fusing in the reconstruction never costs accuracy."""
    docs, rng = clusters(n_clusters=10, per=4, dim=64, spread=spread, seed=1)
    source = ArraySource(docs)
    answers = np.repeat(np.arange(len(docs)), 2)
    questions = noisy(docs[answers], rng, noise)
    fused = [recall_vector(source, q, limit=1).hits[0].id for q in questions]
    alone = [recall_vector(source, q, limit=1, fusion="question").hits[0].id for q in questions]
    truth = (answers + 1) * 10
    assert np.mean(np.equal(fused, truth)) >= np.mean(np.equal(alone, truth))


def test_low_beta_reconstruction_drifts_to_cluster_means():
    """Why the default beta is 30: at beta 5 the reconstruction alone loses statements."""
    docs, rng = clusters(n_clusters=12, per=4, dim=64, spread=0.6, seed=0)
    answers = np.repeat(np.arange(len(docs)), 2)
    questions = noisy(docs[answers], rng, 0.8)
    truth = (answers + 1) * 10

    def accuracy(beta, fusion):
        source = ArraySource(docs, beta=beta)
        return np.mean([recall_vector(source, q, limit=1, fusion=fusion).hits[0].id == t
                        for q, t in zip(questions, truth)])

    assert accuracy(5.0, "reconstruction") < 0.6
    assert accuracy(DEFAULT_BETA, "reconstruction") >= 0.95
    assert accuracy(5.0, "path") >= 0.95  # the path score protects against the drift


def test_hit_is_a_plain_value():
    hit = RecallHit("t", 1, {}, 0.5, "clear", ("question",))
    assert hit.to_dict() == {"text": "t", "id": 1, "metadata": {}, "confidence": 0.5,
                             "band": "clear", "sources": ["question"]}
