"""The learned reranker: its features, its model file, and how recall uses it (after the verdict, over the
fused order's first ``depth`` hits)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopmem.agent import AgentMemory
from hopmem.agent.encoding import space_centerer
from hopmem.agent.rerank import FEATURES, LinearReranker, Reranker, design, hit_features, shipped_reranker
from hopmem.agent.verdict import fit_logistic
from hopmem.errors import InvalidInput
from hopmem.text.encoders import HashingEncoder

ENC = HashingEncoder(384)
TURNS = [
    "Melanie: I just signed up for a pottery class yesterday!",
    "Caroline: Cool! What did it look like?",
    "Melanie: We went camping with the kids at the lake last weekend.",
    "Caroline: That pottery class sounds like fun, Mel.",
    "Melanie: I go swimming with the kids every Sunday.",
    "Caroline: My sister visited from Boston.",
    "Melanie: Painting sunsets is how I relax after work.",
    "Caroline: I researched adoption agencies all week.",
]


class Reverse:
    """Reverses the fused order's first ``depth`` hits, and keeps what it was given."""

    def __init__(self, depth: int = 6) -> None:
        self.depth = depth
        self.seen: list[tuple[str, np.ndarray, list, np.ndarray]] = []

    def order(self, question, qvec, hits, vectors):
        self.seen.append((question, qvec, list(hits), vectors))
        return list(range(len(hits)))[::-1]


def chat(path, **kwargs) -> AgentMemory:
    mem = AgentMemory.open(path, encoder=ENC, namespace="chat", **kwargs)
    mem.remember_many([{"text": t, "created_at": 1000.0 + 3600.0 * n, "metadata": {"speaker": t.split(":")[0]}}
                       for n, t in enumerate(TURNS)], progress=False)
    return mem


def model(dim: int = 384, depth: int = 10, seed: int = 0, **changes) -> LinearReranker:
    rng = np.random.default_rng(seed)
    values = dict(fingerprint="abc123", centerer="c0ffee", depth=depth, mean=rng.normal(size=len(FEATURES)),
                  scale=rng.uniform(0.5, 2.0, len(FEATURES)), weights=rng.normal(size=len(FEATURES)),
                  vector_weights=rng.normal(size=3 * dim), intercept=0.5)
    values.update(changes)
    return LinearReranker(**values)


# -- features ----------------------------------------------------------------------------------------------


def test_features_say_what_the_hits_show(tmp_path):
    collect = Reverse(depth=8)
    with chat(tmp_path / "m.db", reranker=collect) as mem:
        mem.rank("What activities does Melanie do?", limit=8)
    question, qvec, hits, vectors = collect.seen[-1]
    X = hit_features(question, hits)
    assert X.shape == (len(hits), len(FEATURES))
    col = {name: X[:, j] for j, name in enumerate(FEATURES)}
    assert col["position"][0] == 0.0 and np.allclose(col["position"], -np.log1p(np.arange(len(hits))))
    assert col["fused_share"][0] == pytest.approx(1.0)
    for n, h in enumerate(hits):
        assert col["subject"][n] == float(h.metadata["speaker"] == "Melanie")  # the one person the question names
        assert col["ends_with_question"][n] == float(h.text.endswith("?"))
        assert col["exclaims"][n] == float("!" in h.text)
        assert col["semantic"][n] == h.explanation.semantic
        assert col["length"][n] == pytest.approx(math.log1p(len(h.text.split())))
        assert col["dated"][n] == float(bool(h.dates))  # "yesterday", "last weekend": a turn reporting an event
    assert col["dated"].any() and not col["dated"].all()
    assert col["semantic_gap"].max() == 0.0 and (col["semantic_gap"] <= 0).all()
    assert col["term_share"].max() in (0.0, 1.0) and ((0 <= col["term_share"]) & (col["term_share"] <= 1)).all()
    # "What activities ..." asks for several things: the interactions are on; it does not ask when
    assert np.array_equal(col["several_position"], col["position"])
    assert np.array_equal(col["several_subject"], col["subject"])
    assert not col["when_dated"].any()
    when = hit_features("When did Melanie go camping?", hits)
    assert np.array_equal(when[:, FEATURES.index("when_dated")], col["dated"])
    scalar, blocks = design(question, qvec, hits, vectors)
    assert np.array_equal(scalar, X) and blocks.shape == (len(hits), 3 * 384)
    assert np.allclose(blocks[:, :384], vectors) and np.allclose(blocks[:, 768:], vectors)  # several: v again
    # a question naming both people has no subject, and one that asks for one thing has no interactions
    both = hit_features("Did Melanie and Caroline talk about pottery?", hits)
    assert not both[:, FEATURES.index("subject")].any()
    assert not both[:, FEATURES.index("several_position")].any()


def test_the_vectors_given_are_the_stored_ones(tmp_path):
    collect = Reverse(depth=8)
    with chat(tmp_path / "m.db", reranker=collect) as mem:
        mem.recall("pottery class", limit=3, record=False)
        centerer = space_centerer(ENC, 384)
    question, qvec, hits, vectors = collect.seen[-1]
    expected = centerer.transform(ENC.encode([h.text for h in hits]))
    assert np.allclose(vectors, expected, atol=1e-6)
    assert np.allclose(qvec, centerer.transform(ENC.encode([question]))[0], atol=1e-6)


# -- recall with a reranker --------------------------------------------------------------------------------


def test_recall_returns_the_reranked_head_and_leaves_the_verdict_alone(tmp_path):
    with chat(tmp_path / "a.db", reranker=False) as plain, chat(tmp_path / "b.db", reranker=Reverse(6)) as rev:
        for q in ("What does Melanie do with the kids?", "pottery class", "quantum chromodynamics lecture notes"):
            base = plain.recall(q, limit=6, record=False)
            got = rev.recall(q, limit=2, record=False)
            assert got.abstained == base.abstained and got.statistic == base.statistic
            if base.abstained:
                assert got.hits == ()
                continue
            head = [h.entry_id for h in base.hits]
            assert [h.entry_id for h in got.hits] == head[::-1][:2]
            scores = [h.score for h in got.hits]
            assert scores == sorted(scores, reverse=True)  # scores follow the new order
            lowered = [h for h in got.hits[1:] if "rerank" in h.explanation.boosts]
            assert all(0 < h.explanation.boosts["rerank"] < 1 for h in lowered)


def test_a_limit_beyond_the_depth_keeps_the_fused_order_after_it(tmp_path):
    reverse = Reverse(depth=3)
    with chat(tmp_path / "a.db", reranker=False) as plain, chat(tmp_path / "b.db", reranker=reverse) as rev:
        q = "Melanie pottery camping swimming"
        head = [h.entry_id for h in plain.rank(q, limit=7)]
        got = rev.rank(q, limit=7)
        assert len(head) == 7 and [h.entry_id for h in got] == head[:3][::-1] + head[3:]
        assert len(reverse.seen[-1][2]) == 3 and reverse.seen[-1][3].shape == (3, 384)  # only its depth
        scores = [h.score for h in got]
        assert scores == sorted(scores, reverse=True)


def test_only_returned_hits_get_receipts_and_exposures(tmp_path):
    with chat(tmp_path / "m.db", reranker=Reverse(8)) as mem:
        sel = mem.recall("What does Melanie do with the kids?", limit=2)
        assert len(sel.hits) == 2
        exposed = {e.id for e in mem.entries() if e.exposures}
        assert exposed == {h.entry_id for h in sel.hits}


def test_rank_is_reranked_and_other_modes_are_not(tmp_path):
    with chat(tmp_path / "a.db", reranker=False) as plain, chat(tmp_path / "b.db", reranker=Reverse(5)) as rev:
        q = "Melanie pottery camping swimming"
        head = [h.entry_id for h in plain.rank(q, limit=5)]
        assert [h.entry_id for h in rev.rank(q, limit=5)] == head[::-1]
        for mode in ("associative", "keyword"):
            assert ([h.entry_id for h in rev.rank(q, limit=5, mode=mode)]
                    == [h.entry_id for h in plain.rank(q, limit=5, mode=mode)])


def test_a_reranker_that_is_not_one_is_refused(tmp_path):
    for bad in (object(), "yes", True, type("D", (), {"depth": 0, "order": lambda *a: []})()):
        with pytest.raises(InvalidInput, match="reranker"):
            AgentMemory.open(tmp_path / "m.db", encoder=ENC, namespace="x", reranker=bad)

    class Broken(Reverse):
        def order(self, question, qvec, hits, vectors):
            return [0] * len(hits)

    with chat(tmp_path / "b.db", reranker=Broken(6)) as mem:
        with pytest.raises(InvalidInput, match="permutation"):
            mem.rank("pottery class", limit=3)


def test_a_memory_without_a_model_for_its_encoder_does_not_rerank(tmp_path):
    assert shipped_reranker(ENC.fingerprint, 384, space_centerer(ENC, 384).fingerprint) is None
    with chat(tmp_path / "a.db") as default, chat(tmp_path / "b.db", reranker=False) as off:
        for q in ("What activities does Melanie do?", "pottery class"):
            assert default.recall(q, record=False).hits == off.recall(q, record=False).hits


def test_the_reranker_protocol():
    assert isinstance(model(), Reranker) and isinstance(Reverse(), Reranker)


# -- the model and its file --------------------------------------------------------------------------------


def test_linear_reranker_scores_are_its_formula(tmp_path):
    collect = Reverse(depth=8)
    with chat(tmp_path / "m.db", reranker=collect) as mem:
        mem.rank("What activities does Melanie do?", limit=8)
    question, qvec, hits, vectors = collect.seen[-1]
    m = model(depth=8)
    scalar, blocks = design(question, qvec, hits, vectors)
    expected = 0.5 + ((scalar - m.mean) / m.scale) @ m.weights + blocks @ m.vector_weights
    assert np.allclose(m.scores(question, qvec, hits, vectors), expected)
    assert m.order(question, qvec, hits, vectors) == list(np.argsort(-expected, kind="stable"))
    with pytest.raises(InvalidInput, match="dimension"):
        model(dim=8).scores(question, qvec, hits, vectors)
    assert model().scores(question, qvec, [], vectors[:0]).shape == (0,)


def test_linear_reranker_refuses_bad_parameters():
    n = len(FEATURES)
    for changes in ({"depth": 0}, {"depth": 101}, {"depth": True}, {"mean": np.zeros(n - 1)},
                    {"scale": np.zeros(n)}, {"weights": np.full(n, np.nan)}, {"vector_weights": np.zeros(10)},
                    {"intercept": math.inf}):
        with pytest.raises(InvalidInput, match="LinearReranker"):
            model(**changes)
    m = model()
    with pytest.raises(ValueError):
        m.weights[0] = 1.0  # read-only: a shared model cannot be changed under a memory


def test_model_file_round_trip_and_what_is_refused(tmp_path):
    m = model()
    again = LinearReranker.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again.to_dict() == m.to_dict()
    (tmp_path / "abc123.json").write_text(json.dumps(m.to_dict()))
    loaded = shipped_reranker("abc123", 384, "c0ffee", directory=tmp_path)
    assert loaded is not None and loaded.to_dict() == m.to_dict()
    assert shipped_reranker("abc123", 384, "another", directory=tmp_path) is None  # a file centered its own way
    assert shipped_reranker("abc123", 128, "c0ffee", directory=tmp_path) is None
    assert shipped_reranker("nothing", 384, "c0ffee", directory=tmp_path) is None
    assert shipped_reranker("../abc123", 384, "c0ffee", directory=tmp_path) is None
    data = m.to_dict()
    data["features"] = data["features"][:-1]
    (tmp_path / "old1.json").write_text(json.dumps({**data, "fingerprint": "old1"}))
    (tmp_path / "bad2.json").write_text("{not json")
    for name in ("old1", "bad2"):
        assert shipped_reranker(name, 384, "c0ffee", directory=tmp_path) is None


def test_every_shipped_model_loads_for_its_encoder_and_centering_mean():
    from hopmem.agent.encoding import shipped_centerer
    from hopmem.agent.rerank import RERANK_DIR

    paths = sorted(RERANK_DIR.glob("*.json"))
    assert len(paths) >= 3  # all-MiniLM-L6-v2 as the int8 graph (the default), the float32 graph and torch
    for path in paths:
        m = LinearReranker.from_dict(json.loads(path.read_text()))
        assert m.fingerprint == path.stem and m.dim == 384 and 5 <= m.depth <= 100
        centerer = shipped_centerer(m.fingerprint, 384)  # the mean a new file with that encoder is centered with
        assert centerer is not None and m.centerer == centerer.fingerprint
        assert shipped_reranker(m.fingerprint, 384, centerer.fingerprint) is not None


# -- the logistic fit both models use ----------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 10.0))
def test_fit_logistic_is_at_its_optimum(seed, l2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, 4))
    y = (X[:, 0] + rng.normal(size=60) > 0).astype(float)
    y[:2] = (0.0, 1.0)
    s = rng.uniform(0.2, 3.0, 60)
    w, b = fit_logistic(X, y, l2=l2, sample_weight=s)
    p = 1.0 / (1.0 + np.exp(-(X @ w + b)))
    assert np.allclose(X.T @ (s * (p - y)) + l2 * w, 0.0, atol=1e-6)  # the penalised gradient vanishes
    assert abs(np.sum(s * (p - y))) < 1e-6  # the intercept is not penalised
    # a weight of 2 is a row counted twice
    w2, b2 = fit_logistic(np.vstack([X, X[:1]]), np.append(y, y[0]), l2=l2, sample_weight=np.append(s, s[0]))
    s3 = s.copy()
    s3[0] *= 2
    w3, b3 = fit_logistic(X, y, l2=l2, sample_weight=s3)
    assert np.allclose(w2, w3, atol=1e-8) and b2 == pytest.approx(b3, abs=1e-8)


def test_fit_logistic_refuses_mismatched_shapes():
    with pytest.raises(InvalidInput):
        fit_logistic(np.zeros((3, 2)), np.zeros(2))
    with pytest.raises(InvalidInput):
        fit_logistic(np.zeros((3, 2)), np.zeros(3), sample_weight=np.ones(2))
