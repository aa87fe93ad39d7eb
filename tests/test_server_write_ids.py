"""The optional "write_id" of the HTTP write routes: a retried request is applied once."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from hopmem.server.app import create_app  # noqa: E402
from hopmem.server.models import Limits  # noqa: E402

D = 16


@pytest.fixture
def client(tmp_path):
    app = create_app(tmp_path / "data", D, limits=Limits(max_body_bytes=256 * 1024, max_batch=50))
    with TestClient(app, raise_server_exceptions=True) as c:
        yield c


def _rows(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, D)).tolist()


def test_write_with_an_id_is_applied_once(client):
    body = {"vectors": _rows(3), "metadata": [1, 2, 3], "write_id": "req-1"}
    first = client.post("/collections/c/write", json=body)
    assert first.status_code == 200 and first.json() == {"count": 3, "ids": [1, 2, 3]}
    again = client.post("/collections/c/write", json=body)
    assert again.json() == first.json()
    assert client.get("/collections/c/stats").json()["writes"] == 3
    other = client.post("/collections/c/write", json={**body, "metadata": [1, 2, 4]})
    assert other.status_code == 400 and other.json()["error"].startswith("write_id: expected")
    bad = client.post("/collections/c/write", json={**body, "write_id": 5})
    assert bad.status_code == 400 and "write_id: expected a non-empty string" in bad.json()["error"]
    plain = client.post("/db/default/collections/c/write", json={"vectors": _rows(1, 1)})
    assert plain.json() == {"count": 1}


def test_delete_and_compress_with_ids(client):
    client.post("/collections/c/write", json={"vectors": _rows(20), "metadata": list(range(20))})
    for _ in range(2):
        r = client.delete("/collections/c/documents/4", params={"write_id": "del-4"})
        assert r.status_code == 200 and r.json() == {"deleted": True}
    assert client.delete("/collections/c/documents/4").json() == {"deleted": False}
    first = client.post("/collections/c/compress", json={"max_locations": 3, "write_id": "cmp"})
    assert first.status_code == 200
    assert client.post("/collections/c/compress",
                       json={"max_locations": 3, "write_id": "cmp"}).json() == first.json()


def test_remember_with_an_id(tmp_path):
    app = create_app(tmp_path / "data", 64, encoder="hashing")
    with TestClient(app) as c:
        body = {"texts": [f"fact {i} about item {i % 5}" for i in range(40)], "write_id": "r"}
        first = c.post("/collections/notes/remember", json=body)
        assert first.status_code == 200, first.text
        assert c.post("/collections/notes/remember", json=body).json() == first.json()
        assert c.get("/collections/notes/stats").json()["documents"] == 40
