"""The store's API: databases, collections, round trips of state, documents and config."""

from __future__ import annotations

import numpy as np
import pytest

import hopmem
from conftest import clustered
from hopmem import (
    DimensionMismatch,
    IncompatibleStore,
    InvalidInput,
    Memory,
    NotFound,
    StoreError,
)
from hopmem.store import CollectionStats, StoredWriteResult


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "db.hopmem")


def test_create_needs_dim_and_reopen_reads_it(path):
    with pytest.raises(InvalidInput, match="give dim"):
        hopmem.open(path)
    with hopmem.open(path, dim=16, k=7) as db:
        assert db.dim == 16 and db.config.k == 7 and db.config.dim == 16
        assert db.collections() == []
    with hopmem.open(path) as db:
        assert db.dim == 16 and db.config.k == 7
        info = db.info()
        assert info["name"] == "db" and info["dimension"] == 16 and info["collections"] == []
        assert info["created_at"].endswith("Z")


def test_state_round_trip_is_bit_identical_to_a_plain_memory(path):
    batches = [clustered(37, 16, rng=s, noise=0.15, centre_seed=99) for s in range(6)]
    expected = Memory(16, max_locations=12, seed=5)
    with hopmem.open(path, dim=16, checkpoint_every=50, max_locations=12, seed=5) as db:
        coll = db.collection("c")
        for i, X in enumerate(batches):
            res = coll.write(X, metadata=[{"b": i, "j": j} for j in range(len(X))] if i % 2 else None)
            ref = expected.write(X)
            assert isinstance(res, StoredWriteResult)
            assert res.count == ref.count and res.merges == ref.merges
            assert all(np.array_equal(a, b) for a, b in zip(res.touched, ref.touched))
            assert res.seq == i + 1
        coll.compress(8)
        expected.compress(8)
        coll.write(clustered(5, 16, rng=77, noise=0.15, centre_seed=99))
        expected.write(clustered(5, 16, rng=77, noise=0.15, centre_seed=99))
        assert coll.snapshot() == expected.snapshot()
    # Reopen: checkpoint (every 50 vectors) + replay of the tail.
    with hopmem.open(path) as db:
        coll = db.collection("c")
        assert coll.snapshot() == expected.snapshot()
        assert coll.config == expected.config
        assert coll.seq == 8
        q = clustered(3, 16, rng=5, noise=0.15, centre_seed=99)
        assert np.array_equal(coll.read(q), expected.read(q))
        assert coll.stats() == CollectionStats(**expected.stats().to_dict(),
                                               documents=3 * 37)


def test_a_compact_collection_reopens_with_its_half_copy(path):
    """A checkpoint loaded into a compact memory rebuilds the half copy its reads scan."""
    X = clustered(300, 16, rng=3, noise=0.15, centre_seed=99)
    expected = Memory(16, activation="compact", tau_split=0.6)
    expected.write(X)
    with hopmem.open(path, dim=16, activation="compact", tau_split=0.6) as db:
        coll = db.collection("c")
        coll.write(X)
        coll.checkpoint()
    with hopmem.open(path) as db:
        coll = db.collection("c")
        state = coll._memory._state
        assert state.addresses16 is not None
        np.testing.assert_array_equal(state.addresses16[:state.size],
                                      state.addresses[:state.size].astype(np.float16))
        q = clustered(8, 16, rng=4, noise=0.15, centre_seed=99)
        for strategy in ("iterative", "fast"):
            np.testing.assert_array_equal(coll.read(q, strategy=strategy),
                                          expected.read(q, strategy=strategy))


def test_reopen_without_any_checkpoint_replays_everything(path):
    with hopmem.open(path, dim=16, checkpoint_every=10**9) as db:
        coll = db.collection("c")
        for s in range(4):
            coll.write(clustered(10, 16, rng=s, noise=0.15, centre_seed=99))
        state = coll.snapshot()
        coll._maybe_checkpoint = lambda **kw: None  # no checkpoint on close either
    with hopmem.open(path) as db:
        ckpts = db._file.reader().execute("SELECT count(*) FROM checkpoints").fetchone()[0]
        assert ckpts == 0
        assert db.collection("c").snapshot() == state


def test_collections_get_create_list_drop(store_opener):
    with store_opener(dim=8) as db:
        with pytest.raises(NotFound, match="'nope' not found"):
            db.get_collection("nope")
        a = db.collection("a")
        assert db.collection("a") is a
        db.collection("b", k=3, mode="plain")
        assert db.collections() == ["a", "b"]
        assert "b" in db and "zz" not in db
        assert db.get_collection("b").config.k == 3
        a.write(np.ones((2, 8)), metadata=[1, 2])
        assert db.drop_collection("a") is True
        assert db.drop_collection("a") is False
        assert db.collections() == ["b"]
        with pytest.raises(NotFound, match="dropped"):
            a.write(np.ones(8))
        with pytest.raises(NotFound):
            db.get_collection("a")
        fresh = db.collection("a")  # a new, empty one
        assert len(fresh) == 0 and fresh.documents.count() == 0
    with store_opener() as db:
        assert db.collections() == ["a", "b"]
        assert db.get_collection("b").config.mode == "plain"


def test_collection_config_must_match_when_given(store_opener):
    with store_opener(dim=8, k=5) as db:
        coll = db.collection("c", beta=9.0)
        assert coll.config.k == 5 and coll.config.beta == 9.0
        assert db.collection("c", beta=9.0) is coll
        with pytest.raises(IncompatibleStore, match=r"exists with beta=9\.0; requested beta=2\.0"):
            db.collection("c", beta=2.0)
        with pytest.raises(IncompatibleStore, match="dim=8"):
            db.collection("d", dim=4)


@pytest.mark.parametrize("name", ["", "a/b", "a\\b", ".", "..", "x" * 129, "tab\there",
                                  " lead", 7, None])
def test_bad_collection_names(store_opener, name):
    with store_opener(dim=4) as db:
        with pytest.raises(InvalidInput, match="collection name"):
            db.collection(name)


@pytest.mark.parametrize("name", ["ok", "a", "x" * 128, "with space", "ünïcode", "dots.in.name"])
def test_good_collection_names(store_opener, name):
    with store_opener(dim=4) as db:
        db.collection(name).write(np.ones(4))
    with store_opener() as db:
        assert db.collections() == [name]


def test_write_validation_writes_nothing(store_opener):
    with store_opener(dim=4) as db:
        coll = db.collection("c")
        with pytest.raises(DimensionMismatch):
            coll.write(np.ones((2, 5)))
        with pytest.raises(InvalidInput, match="finite"):
            coll.write([[1, 2, np.nan, 4]])
        with pytest.raises(InvalidInput, match="expected 2 values"):
            coll.write(np.ones((2, 4)), metadata=[1])
        with pytest.raises(InvalidInput, match="list of 2 JSON values"):
            coll.write(np.ones((2, 4)), metadata="ab")
        with pytest.raises(InvalidInput, match=r"metadata\[1\]: expected a JSON value"):
            coll.write(np.ones((2, 4)), metadata=[1, object()])
        with pytest.raises(InvalidInput, match="metadata"):
            coll.write(np.ones((2, 4)), metadata=[1, float("nan")])
        assert coll.seq == 0 and len(coll) == 0 and coll.documents.count() == 0
        empty = coll.write(np.zeros((0, 4)), metadata=[])
        assert empty.count == 0 and empty.ids == [] and coll.seq == 0


def test_write_results_and_single_vector_metadata(store_opener):
    with store_opener(dim=4) as db:
        coll = db.collection("c")
        assert coll.write(np.ones((3, 4))).ids is None
        res = coll.write(np.eye(4)[1], metadata=["a", "list", "is", "one value"])
        assert res.ids == [1] and res.count == 1
        assert coll.documents.get(1).metadata == ["a", "list", "is", "one value"]
        assert coll.write(np.eye(4)[:2], metadata=[None, {"k": [1, 2]}]).ids == [2, 3]
        assert coll.documents.get(2).metadata is None
        assert coll.stats().documents == 3 and coll.stats().writes == 6


def test_memory_api_is_delegated(store_opener):
    X = clustered(40, 8, rng=0, noise=0.15, centre_seed=99)
    mem = Memory(8)
    mem.write(X)
    with store_opener(dim=8) as db:
        coll = db.collection("c")
        with pytest.raises(hopmem.EmptyMemory):
            coll.read(X[0])
        assert coll.fingerprint() is None
        coll.write(X)
        q = X[:3] + 0.01
        assert np.array_equal(coll.read(q, "fast"), mem.read(q, "fast"))
        t1, t2 = coll.analyze(q[0]), mem.analyze(q[0])
        assert np.array_equal(t1.activated, t2.activated) and t1.fidelity == t2.fidelity
        a1, a2 = coll.attention(q[0], 2.0), mem.attention(q[0], 2.0)
        assert np.array_equal(a1.result, a2.result)
        assert np.array_equal(coll.fingerprint(), mem.fingerprint())
        for view in ("ids", "addresses", "counters", "weights", "patterns"):
            assert np.array_equal(getattr(coll, view), getattr(mem, view))
        assert len(coll) == len(mem) and coll.dim == 8 and coll.backend == "native"
        assert "Collection('c'" in repr(coll)
        assert not hasattr(coll, "restore")  # a collection's state is its journal


def test_centering_and_gate_are_persisted(store_opener):
    class Fake:
        def to_dict(self):
            return {"format": "x", "mean": [1.5, 2.5]}

    with store_opener(dim=4) as db:
        coll = db.collection("c")
        assert coll.centering is None and coll.gate is None
        coll.centering = Fake()
        coll.gate = {"tau": 0.4}
        with pytest.raises(InvalidInput, match="gate"):
            coll.gate = [1, 2]
        got = coll.centering
        got["mean"].append(9)  # a copy: the stored value is unchanged
        assert coll.centering == {"format": "x", "mean": [1.5, 2.5]}
    with store_opener() as db:
        coll = db.collection("c")
        assert coll.centering == {"format": "x", "mean": [1.5, 2.5]}
        assert coll.gate == {"tau": 0.4}
        coll.gate = None
    with store_opener() as db:
        assert db.collection("c").gate is None


def test_closed_database_and_readonly(path):
    db = hopmem.open(path, dim=4)
    coll = db.collection("c")
    coll.write(np.eye(4), metadata=list("abcd"))
    state = coll.snapshot()
    db.close()
    db.close()  # idempotent
    assert db.closed and "closed" in repr(db)
    with pytest.raises(StoreError, match="closed"):
        coll.read(np.ones(4))
    with pytest.raises(StoreError, match="closed"):
        db.collections()
    with hopmem.open(path, readonly=True) as ro:
        c = ro.get_collection("c")
        assert c.snapshot() == state
        assert [d.metadata for d in c.documents.list()] == list("abcd")
        assert c.resolve(np.eye(4)[2], limit=1, mode="indexed")[0].metadata == "c"
        with pytest.raises(StoreError, match="read-only"):
            c.write(np.ones(4))
        with pytest.raises(StoreError, match="read-only"):
            c.documents.delete(1)
        with pytest.raises(StoreError, match="read-only"):
            ro.collection("new")
    with pytest.raises(NotFound):
        hopmem.open(path + ".missing", readonly=True)


def test_open_arguments_are_validated(path):
    with pytest.raises(InvalidInput, match="synchronous"):
        hopmem.open(path, dim=4, synchronous="sometimes")
    with pytest.raises(InvalidInput, match="dim"):
        hopmem.open(path, dim=0)
    with pytest.raises(InvalidInput, match="checkpoint_every"):
        hopmem.open(path, dim=4, checkpoint_every=0)
    with pytest.raises(hopmem.InvalidConfig, match="beta"):
        hopmem.open(path, dim=4, beta=-1.0)
    with hopmem.open(path, dim=4, synchronous="full") as db:
        db.collection("c").write(np.ones(4))
        assert db._file._writer.execute("PRAGMA synchronous").fetchone()[0] == 2
        assert db._file._writer.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_checkpoint_policy_by_cost_keeps_state_exact(path):
    # replay_budget=0: a hard bound of zero seconds, so every write is followed by a checkpoint.
    with hopmem.open(path, dim=16, replay_budget=0.0) as db:
        coll = db.collection("c")
        for s in range(5):
            coll.write(clustered(20, 16, rng=s, noise=0.15, centre_seed=99))
        state = coll.snapshot()
        seq = db._file.reader().execute("SELECT seq FROM checkpoints").fetchone()[0]
        assert seq >= 1
    with hopmem.open(path) as db:
        assert db.collection("c").snapshot() == state


# -- the text layer's entry points, and deprecated names ------------------------------------------

class _Encoder:
    name, fingerprint = "fake-8", "f8"

    def __init__(self, new_protocol: bool = True) -> None:
        if new_protocol:
            self.dim = 8
        else:
            self.dimension = 8  # the 0.1 protocol's name

    def encode(self, texts):
        return np.ones((len(texts), 8), np.float32)


@pytest.fixture
def forwarded(monkeypatch):
    """What Collection.recall and Collection.calibrate pass to hopmem.text.TextCollection."""
    calls = {}

    def recall(self, text, limit=5, **options):
        calls["recall"] = (text, limit, options)

    def calibrate(self, related, unrelated, **options):
        calls["calibrate"] = (related, unrelated, options)

    monkeypatch.setattr(hopmem.text.TextCollection, "recall", recall)
    monkeypatch.setattr(hopmem.text.TextCollection, "calibrate", calibrate)
    return calls


def test_recall_and_calibrate_forward_the_new_names(path, forwarded):
    with hopmem.open(path, encoder=_Encoder()) as db:
        coll = db.collection("c")
        coll.recall("q", limit=3, pool=9)
        assert forwarded["recall"] == ("q", 3, {"pool": 9})
        coll.calibrate(["a", "b"], ["c", "d"], error_budget=0.1, holdout=0.2, seed=4, statistic="first_contact")
        assert forwarded["calibrate"] == (["a", "b"], ["c", "d"], {
            "error_budget": 0.1, "holdout": 0.2, "seed": 4, "statistic": "first_contact"})
        coll.calibrate(["a", "b"], ["c", "d"])
        assert forwarded["calibrate"][2] == {"error_budget": 0.0, "holdout": 0.3, "seed": 0,
                                             "statistic": "confidence"}


def test_recall_n_is_a_deprecated_name_of_limit(path, forwarded):
    with hopmem.open(path, encoder=_Encoder()) as db:
        coll = db.collection("c")
        with pytest.warns(DeprecationWarning, match=r"Collection\.recall\(n=\.\.\.\).*limit="):
            coll.recall("q", n=2)
        assert forwarded["recall"] == ("q", 2, {})


def test_calibrate_old_keywords_are_deprecated(path, forwarded):
    with hopmem.open(path, encoder=_Encoder()) as db:
        coll = db.collection("c")
        with pytest.warns(DeprecationWarning) as record:
            coll.calibrate(related_texts=["a", "b"], unrelated_texts=["c", "d"], holdout_fraction=0.5)
        messages = " ".join(str(w.message) for w in record)
        for old, new in (("related_texts", "related"), ("unrelated_texts", "unrelated"),
                         ("holdout_fraction", "holdout")):
            assert f"Collection.calibrate({old}=...) is deprecated" in messages
            assert f"use Collection.calibrate({new}=...)" in messages
        assert forwarded["calibrate"] == (["a", "b"], ["c", "d"], {
            "error_budget": 0.0, "holdout": 0.5, "seed": 0, "statistic": "confidence"})
        with pytest.raises(TypeError, match="holdout"):
            coll.calibrate(["a", "b"], ["c", "d"], holdout=0.2, holdout_fraction=0.5)


def test_calibrate_error_budget_by_position_is_deprecated(path, forwarded):
    with hopmem.open(path, encoder=_Encoder()) as db:
        coll = db.collection("c")
        with pytest.warns(DeprecationWarning, match="by position"):
            coll.calibrate(["a", "b"], ["c", "d"], 0.25)
        assert forwarded["calibrate"][2]["error_budget"] == 0.25
        with pytest.raises(TypeError, match="error_budget"):
            coll.calibrate(["a", "b"], ["c", "d"], 0.25, error_budget=0.1)


def test_encoder_info_dim_and_its_deprecated_names(path):
    with hopmem.open(path, encoder=_Encoder()) as db:
        assert db.encoder == hopmem.store.EncoderInfo("fake-8", 8, "f8")
        assert db.encoder.dim == db.dim == 8
        with pytest.warns(DeprecationWarning, match=r"EncoderInfo\.dimension.*EncoderInfo\.dim"):
            assert db.encoder.dimension == 8
        assert db.encoder.to_dict() == {"name": "fake-8", "dimension": 8, "fingerprint": "f8"}
    old = _Encoder(new_protocol=False)
    assert not hasattr(old, "dim")
    with pytest.warns(DeprecationWarning, match="'dimension' and no 'dim'"):
        db = hopmem.open(path, encoder=old)
    with db:
        assert db.encoder.dim == 8
