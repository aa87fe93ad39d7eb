"""The names renamed in 0.2 (issue 25's vocabulary) still work for a release, with a warning.

One small test per deprecated name of the engine-side text stack: the old name
gives the same result as the new one and warns (``DeprecationWarning``).
"""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

import hopmem
from hopmem.engine import config
from hopmem.store import resolution
from hopmem.text import TextCollection, encoders, recall
from hopmem.text.encoders import HashingEncoder
from hopmem.text.recall import TEXT_COLLECTION_CONFIG, RecallHit, calibrate_gate, recall_vector

D = 128
ENC = HashingEncoder(D)
DATA = json.loads(resources.files("hopmem").joinpath("data/conversation.json").read_text())
STATEMENTS = [s["text"] for s in DATA["statements"]]
RELATED = [r["question"] for r in DATA["related"]][:12]
UNRELATED = DATA["unrelated"][:12]


def test_version_is_this_release():
    assert hopmem.__version__ == "0.2.0"


# -- module constants and classes -----------------------------------------------------------


def test_recall_hit_old_name():
    with pytest.warns(DeprecationWarning, match=r"hopmem\.text\.recall\.Hit"):
        assert recall.Hit is RecallHit
    with pytest.warns(DeprecationWarning, match="hopmem.Hit"):
        assert hopmem.Hit is RecallHit
    assert "Hit" not in hopmem.__all__ and "RecallHit" in hopmem.__all__


def test_memory_modes_old_name():
    with pytest.warns(DeprecationWarning, match="MEMORY_MODES"):
        assert config.MODES == config.MEMORY_MODES == ("competitive", "plain")


def test_resolve_modes_old_name():
    with pytest.warns(DeprecationWarning, match="RESOLVE_MODES"):
        assert resolution.MODES == resolution.RESOLVE_MODES == ("indexed", "exact")


def test_check_n_old_name():
    with pytest.warns(DeprecationWarning, match="check_limit"):
        check_n = resolution.check_n
    assert check_n(3) == resolution.check_limit(3) == 3
    with pytest.raises(hopmem.InvalidInput, match="n: expected"):
        check_n(0)


def test_unknown_module_attribute_is_still_an_attribute_error():
    with pytest.raises(AttributeError):
        resolution.NOPE  # noqa: B018


# -- dim ------------------------------------------------------------------------------------------


def test_encoder_dimension_old_name():
    with pytest.warns(DeprecationWarning, match="HashingEncoder.dim"):
        assert ENC.dimension == ENC.dim == D


class OldEncoder:
    """An encoder written against the 0.1 protocol: ``dimension``, no ``dim``."""

    def __init__(self) -> None:
        self.name = ENC.name
        self.dimension = D
        self.fingerprint = ENC.fingerprint

    def encode(self, texts):
        return ENC.encode(texts)


def test_encoder_with_only_dimension_is_accepted(tmp_path):
    with pytest.warns(DeprecationWarning, match="'dimension' and no 'dim'"):
        assert encoders.encoder_dim(OldEncoder()) == D
    with hopmem.open(tmp_path / "t.hopmem", dim=D, **TEXT_COLLECTION_CONFIG) as db:
        with pytest.warns(DeprecationWarning, match="'dimension' and no 'dim'"):
            tc = TextCollection(db.collection("c"), OldEncoder())
        tc.remember(STATEMENTS)
        assert tc.recall(STATEMENTS[3], limit=1).hits[0].id == 4


# -- limit ----------------------------------------------------------------------------------------


@pytest.fixture
def tc(tmp_path):
    with hopmem.open(tmp_path / "t.hopmem", dim=D, **TEXT_COLLECTION_CONFIG) as db:
        memory = TextCollection(db.collection("c"), ENC)
        memory.remember(STATEMENTS)
        yield memory


def test_text_recall_n(tc):
    with pytest.warns(DeprecationWarning, match=r"recall\(n=\.\.\.\)"):
        old = tc.recall(STATEMENTS[2], n=2)
    assert old == tc.recall(STATEMENTS[2], limit=2) and len(old.hits) == 2


def test_text_recall_prepared_n(tc):
    prepared = tc.prepare([STATEMENTS[2]])
    with pytest.warns(DeprecationWarning, match=r"recall_prepared\(n=\.\.\.\)"):
        old = tc.recall_prepared(prepared, n=2)
    assert old == tc.recall_prepared(prepared, limit=2)


def test_recall_vector_n(tc):
    vector = tc.prepare([STATEMENTS[5]]).vectors[0]
    with pytest.warns(DeprecationWarning, match=r"recall_vector\(n=\.\.\.\)"):
        old = recall_vector(tc._source, vector, n=3)
    assert old == recall_vector(tc._source, vector, limit=3)


def test_resolve_functions_n():
    index = resolution.VectorIndex(4)
    index.add(np.array([1, 2, 3]), np.eye(4, dtype=np.float32)[:3])
    q = np.array([1.0, 0.1, 0.0, 0.0], np.float32)
    with pytest.warns(DeprecationWarning, match=r"resolve_exact\(n=\.\.\.\)"):
        old = resolution.resolve_exact(index, q, n=2)
    new = resolution.resolve_exact(index, q, limit=2)
    np.testing.assert_array_equal(old[0], new[0])
    with pytest.warns(DeprecationWarning, match=r"VectorIndex.search\(n=\.\.\.\)"):
        ids, _ = index.search(q, n=1)
    assert ids.tolist() == [1]
    memory = hopmem.Memory(4)
    memory.write(np.eye(4, dtype=np.float32)[:3])
    with pytest.warns(DeprecationWarning, match=r"resolve_indexed\(n=\.\.\.\)"):
        old = resolution.resolve_indexed(memory, index, q, lambda locations: np.array([1, 2, 3]), n=2)
    new = resolution.resolve_indexed(memory, index, q, lambda locations: np.array([1, 2, 3]), limit=2)
    np.testing.assert_array_equal(old[0], new[0])


# -- calibrate ------------------------------------------------------------------------------------


def test_text_calibrate_old_names(tc):
    new = tc.calibrate(RELATED, UNRELATED, error_budget=0.1, holdout=0.25, seed=1)
    with pytest.warns(DeprecationWarning) as caught:
        old = tc.calibrate(related_texts=RELATED, unrelated_texts=UNRELATED, error_budget=0.1,
                           holdout_fraction=0.25, seed=1)
    assert old == new
    assert {"related_texts", "unrelated_texts", "holdout_fraction"} <= {
        name for w in caught for name in ("related_texts", "unrelated_texts", "holdout_fraction")
        if name in str(w.message)}
    with pytest.warns(DeprecationWarning, match="by position"):
        assert tc.calibrate(RELATED, UNRELATED, 0.1, holdout=0.25, seed=1) == new


def test_calibrate_gate_old_names(tc):
    rel, irr = tc.prepare(RELATED).vectors, tc.prepare(UNRELATED).vectors
    new = calibrate_gate(tc._source, rel, irr, error_budget=0.1, holdout=0.25)
    with pytest.warns(DeprecationWarning, match="holdout_fraction"):
        assert calibrate_gate(tc._source, rel, irr, error_budget=0.1, holdout_fraction=0.25) == new
    with pytest.warns(DeprecationWarning, match="by position"):
        assert calibrate_gate(tc._source, rel, irr, 0.1, holdout=0.25) == new


# -- server ---------------------------------------------------------------------------------------


def test_create_app_dimension_old_name(tmp_path):
    from starlette.testclient import TestClient

    from hopmem.server import create_app

    with pytest.warns(DeprecationWarning, match=r"create_app\(dimension=\.\.\.\)"):
        app = create_app(tmp_path / "data", dimension=8, auth="off")
    with TestClient(app) as client:
        assert client.get("/db/default").json()["dimension"] == 8
