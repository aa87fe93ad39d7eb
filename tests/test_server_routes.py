"""Every route of the HTTP API (docs/http.md), in process: statuses, bodies, both route forms."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from hopmem.server.app import create_app  # noqa: E402
from hopmem.server.models import Limits  # noqa: E402
from hopmem.server.routes import ROUTES  # noqa: E402

D = 16


def unit_rows(n: int, seed: int = 0, d: int = D) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(params=["local", "cluster", "cluster-r2"])
def client(request, tmp_path):
    """The app over a data directory, then over a Ray cluster (``start_local``, emptied first),
    with one copy of each shard and with two."""
    datadir = None
    if request.param.startswith("cluster"):
        datadir = request.getfixturevalue("ray_cluster")
        for name in datadir.list():
            datadir.drop(name)
        (tmp_path / "data").mkdir()
        datadir.root = str(tmp_path / "data")
        datadir.default_replicas = 2 if request.param == "cluster-r2" else 1
    app = create_app(tmp_path / "data", D, limits=Limits(max_body_bytes=256 * 1024, max_batch=50),
                     datadir=datadir)
    try:
        with TestClient(app, raise_server_exceptions=True) as c:
            yield c
    finally:
        if datadir is not None:
            datadir.default_replicas = 1


# Both forms of every collection route: legacy (database "default") and scoped.
@pytest.fixture(params=["", "/db/default", "/db/other"])
def prefix(request, client):
    if request.param == "/db/other":
        r = client.post("/db", json={"name": "other", "dimension": D})
        assert r.status_code == 200, r.text
    return request.param


def error_of(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"]
    return body["error"]


# -- health, readiness, schema ---------------------------------------------------------------

@pytest.mark.parametrize("path", ["/health", "/healthz", "/ready", "/readyz",
                                  "/db/default/health", "/db/default/readyz"])
def test_health_and_ready(client, path):
    r = client.get(path)
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_scoped_health_of_missing_database_is_404(client):
    error_of(client.get("/db/nope/health"), 404)


def test_openapi_documents_every_route_in_both_forms(client):
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    for spec in ROUTES:
        forms = [spec.path] + (["/db/{db}" + spec.path] if spec.scoped else [])
        for path in forms:
            op = doc["paths"][path][spec.method.lower()]
            assert "200" in op["responses"]
            if spec.method == "POST" and spec.name not in ("compress",):
                assert op["requestBody"]["required"] is True
                assert "schema" in op["requestBody"]["content"]["application/json"]
    # Every documented operation is served (no 404 from the router for its path).
    assert client.get("/db/default/collections").status_code == 200


def test_unknown_route_and_method_are_json_errors(client):
    assert "no route" in error_of(client.get("/nope"), 404)
    assert "no route" in error_of(client.post("/collections/a/explode", json={}), 404)
    error_of(client.put("/health"), 405)


# -- databases --------------------------------------------------------------------------------

def test_database_lifecycle(client):
    dbs = client.get("/db").json()["databases"]
    assert [d["name"] for d in dbs] == ["default"]
    assert dbs[0]["dimension"] == D and "created_at" in dbs[0] and "collections" in dbs[0]

    r = client.post("/db", json={"name": "agents", "dimension": 8, "mode": "plain", "k": 4,
                                 "beta": 30.0})
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["name"] == "agents" and info["dimension"] == 8
    assert "already exists" in error_of(client.post("/db", json={"name": "agents",
                                                                 "dimension": 8}), 409)
    assert client.get("/db/agents").json()["dimension"] == 8
    assert {d["name"] for d in client.get("/db").json()["databases"]} == {"default", "agents"}

    # The database's config reaches its collections.
    w = client.post("/db/agents/collections/c/write", json={"vectors": unit_rows(3, d=8).tolist()})
    assert w.status_code == 200, w.text
    cfg = client.get("/db/agents/collections/c/config").json()["config"]
    assert cfg["mode"] == "plain" and cfg["k"] == 4 and cfg["beta"] == 30.0 and cfg["dim"] == 8

    assert client.delete("/db/agents").json() == {"dropped": True}
    assert client.delete("/db/agents").json() == {"dropped": False}
    error_of(client.get("/db/agents"), 404)
    error_of(client.post("/db/agents/collections/c/write",
                         json={"vectors": unit_rows(1, d=8).tolist()}), 404)
    assert "cannot be dropped" in error_of(client.delete("/db/default"), 403)


@pytest.mark.parametrize("body, fragment", [
    ({"dimension": 8}, "name"),
    ({"name": "Bad", "dimension": 8}, "database name"),
    ({"name": "x" * 64, "dimension": 8}, "database name"),
    ({"name": "ok", "dimension": 0}, "dimension"),
    ({"name": "ok", "dimension": "8"}, "dimension"),
    ({"name": "ok"}, "dimension"),
    ({"name": "ok", "dimension": 8, "k": 0}, "'k'"),
    ({"name": "ok", "dimension": 8, "mode": "weird"}, "mode"),
    ({"name": "ok", "dimension": 8, "wat": 1}, "unknown config"),
    ({"name": "ok", "dimension": 8, "tau_split": 0.99, "tau_merge": 0.5}, "tau_split"),
])
def test_create_database_rejects_bad_bodies(client, body, fragment):
    assert fragment in error_of(client.post("/db", json=body), 400)
    assert [d["name"] for d in client.get("/db").json()["databases"]] == ["default"]


@pytest.mark.parametrize("path", ["/db/UPPER", "/db/1abc", "/db/a.b", "/db/" + "a" * 64,
                                  "/db/a%20b/collections", "/db/_x/collections/c/stats"])
def test_bad_database_names_are_400(client, path):
    assert "database name" in error_of(client.get(path), 400)


def test_missing_database_is_404(client):
    error_of(client.get("/db/ghost"), 404)
    error_of(client.get("/db/ghost/collections"), 404)
    error_of(client.post("/db/ghost/collections/c/read", json={"query": [0.0] * D}), 404)


# -- collections ------------------------------------------------------------------------------

def test_collections_create_list_drop(client, prefix):
    assert client.get(f"{prefix}/collections").json() == {"collections": []}
    assert client.post(f"{prefix}/collections", json={"name": "a"}).json() == {
        "name": "a", "created": True}
    assert client.post(f"{prefix}/collections", json={"name": "a"}).json() == {
        "name": "a", "created": False}
    client.post(f"{prefix}/collections/b/write", json={"vectors": unit_rows(1).tolist()})
    assert client.get(f"{prefix}/collections").json() == {"collections": ["a", "b"]}
    assert client.delete(f"{prefix}/collections/a").json() == {"dropped": True}
    assert client.delete(f"{prefix}/collections/a").json() == {"dropped": False}
    assert client.get(f"{prefix}/collections").json() == {"collections": ["b"]}
    error_of(client.get(f"{prefix}/collections/a/stats"), 404)


@pytest.mark.parametrize("partitions", [0, -1, 2.0, "2", True])
def test_bad_partitions_are_400(client, partitions):
    error = error_of(client.post("/collections", json={"name": "p", "partitions": partitions}), 400)
    assert error.startswith("partitions: expected an integer >= 1")


def test_partitions_one_is_a_plain_collection_and_more_need_a_cluster(client):
    assert client.post("/collections", json={"name": "p", "partitions": 1}).json() == {
        "name": "p", "created": True}
    r = client.post("/collections", json={"name": "q", "partitions": 2})
    if client.app.state.hopmem.datadir.__class__.__name__ == "DataDir":
        assert "partitions: expected 1 on a single-node server" in error_of(r, 400)
    else:
        assert r.json() == {"name": "q", "created": True}


@pytest.mark.parametrize("name", ["", " x", "x ", ".", "..", "a\x01b", "c" * 129, 5, None])
def test_bad_collection_names_in_body_are_400(client, name):
    assert "name" in error_of(client.post("/collections", json={"name": name}), 400)


@pytest.mark.parametrize("raw", ["%01x", "%2E%2E", "%20x", "c" * 129, "a%5Cb"])
def test_bad_collection_names_in_path_are_400(client, raw):
    error_of(client.post(f"/collections/{raw}/write", json={"vectors": [[1.0] * D]}), 400)
    assert client.get("/collections").json() == {"collections": []}


def test_unicode_collection_names_work(client):
    name = "conv-é🙂 42"
    r = client.post(f"/collections/{name}/write", json={"vectors": unit_rows(1).tolist()})
    assert r.status_code == 200, r.text
    assert client.get("/collections").json() == {"collections": [name]}
    assert client.get(f"/collections/{name}/stats").json()["writes"] == 1


def test_collection_names_are_isolated_from_the_file_system(client, tmp_path):
    error_of(client.post("/collections/..%2F..%2Fetc/write", json={"vectors": [[1.0] * D]}),
             404)  # %2F decodes to "/" and no route matches
    assert not (tmp_path / "etc").exists()


# -- write, read, analyze, attention ---------------------------------------------------------

def test_write_read_analyze(client, prefix):
    X = unit_rows(5, seed=1)
    r = client.post(f"{prefix}/collections/c/write", json={"vectors": X.tolist()})
    assert r.status_code == 200, r.text
    assert r.json() == {"count": 5}

    r = client.post(f"{prefix}/collections/c/read", json={"query": X[2].tolist()})
    body = r.json()
    assert set(body) == {"result", "fidelity", "first_contact"}
    assert len(body["result"]) == D
    assert -1.0 <= body["fidelity"] <= 1.0 and -1.0 <= body["first_contact"] <= 1.0

    fast = client.post(f"{prefix}/collections/c/read",
                       json={"query": X[2].tolist(), "strategy": "fast"}).json()
    assert set(fast) == {"result", "fidelity", "first_contact"}

    a = client.post(f"{prefix}/collections/c/analyze", json={"query": X[2].tolist()}).json()
    assert set(a) == {"iterations", "converged", "activated_locations", "result", "fidelity",
                      "first_contact"}
    assert isinstance(a["iterations"], int) and isinstance(a["converged"], bool)
    assert a["activated_locations"] and set(a["activated_locations"][0]) == {
        "id", "similarity", "weight"}
    ids = [loc["id"] for loc in client.get(f"{prefix}/collections/c/locations").json()["locations"]]
    assert {x["id"] for x in a["activated_locations"]} <= set(ids)


def test_write_with_metadata_returns_document_ids(client, prefix):
    X = unit_rows(3, seed=2)
    meta = [{"text": "one"}, "two", None]
    r = client.post(f"{prefix}/collections/c/write", json={"vectors": X.tolist(),
                                                           "metadata": meta})
    body = r.json()
    assert body["count"] == 3 and len(body["ids"]) == 3 and len(set(body["ids"])) == 3
    stats = client.get(f"{prefix}/collections/c/stats").json()
    assert stats["writes"] == 3 and stats["documents"] == 3
    docs = client.get(f"{prefix}/collections/c/documents").json()["documents"]
    assert [d["metadata"] for d in docs] == meta and [d["id"] for d in docs] == body["ids"]


def test_batch_analyze(client, prefix):
    X = unit_rows(4, seed=3)
    client.post(f"{prefix}/collections/c/write", json={"vectors": X.tolist()})
    r = client.post(f"{prefix}/collections/c/batch_analyze",
                    json={"queries": X[:3].tolist(), "strategy": "fast"})
    results = r.json()["results"]
    assert len(results) == 3 and all("activated_locations" in t for t in results)
    error = error_of(client.post(f"{prefix}/collections/c/batch_analyze",
                                 json={"queries": [X[0].tolist()] * 51}), 400)
    assert "at most 50" in error


def test_attention(client, prefix):
    X = unit_rows(4, seed=4)
    client.post(f"{prefix}/collections/c/write", json={"vectors": X.tolist()})
    r = client.post(f"{prefix}/collections/c/attention", json={"query": X[1].tolist(),
                                                               "scale": 2.5}).json()
    assert set(r) == {"result", "beta", "contributors"} and r["beta"] == 2.5
    assert len(r["result"]) == D and set(r["contributors"][0]) == {"id", "similarity", "weight"}
    default_scale = client.post(f"{prefix}/collections/c/attention",
                                json={"query": X[1].tolist()}).json()
    assert default_scale["beta"] == 5.0  # the collection's beta
    error_of(client.post(f"{prefix}/collections/c/attention",
                         json={"query": X[1].tolist(), "scale": "big"}), 400)


def test_read_of_empty_memory_is_400_and_creates_collection(client, prefix):
    msg = error_of(client.post(f"{prefix}/collections/fresh/read", json={"query": [1.0] * D}), 400)
    assert "empty" in msg
    assert "fresh" in client.get(f"{prefix}/collections").json()["collections"]
    assert client.get(f"{prefix}/collections/fresh/stats").json()["num_locations"] == 0


@pytest.mark.parametrize("route", ["write", "read", "analyze", "batch_analyze",
                                   "documents/query"])
def test_auto_create_routes(client, prefix, route):
    body = {"write": {"vectors": [[1.0] + [0.0] * (D - 1)]},
            "batch_analyze": {"queries": [[1.0] * D]}}.get(route, {"query": [1.0] * D})
    r = client.post(f"{prefix}/collections/auto/{route}", json=body)
    assert r.status_code in (200, 400), r.text  # a read of the new, empty memory is 400
    assert client.get(f"{prefix}/collections/auto/stats").status_code == 200


@pytest.mark.parametrize("method, route", [
    ("GET", "stats"), ("GET", "config"), ("GET", "fingerprint"), ("GET", "locations"),
    ("POST", "compress"), ("GET", "documents"), ("GET", "documents/1"),
    ("DELETE", "documents/1")])
def test_non_creating_routes_404(client, prefix, method, route):
    r = client.request(method, f"{prefix}/collections/ghost/{route}")
    error_of(r, 404)
    assert "ghost" not in client.get(f"{prefix}/collections").json()["collections"]


# -- stats, config, fingerprint, locations, compress -----------------------------------------

def test_stats_config_fingerprint_locations(client, prefix):
    client.post(f"{prefix}/collections", json={"name": "c"})
    assert client.get(f"{prefix}/collections/c/fingerprint").json() == {"fingerprint": None}
    assert client.get(f"{prefix}/collections/c/locations").json() == {"locations": []}
    s0 = client.get(f"{prefix}/collections/c/stats").json()
    assert s0 == {"num_locations": 0, "total_writes": 0.0, "current_eta": s0["current_eta"],
                  "avg_write_count": 0.0, "max_write_count": 0.0, "writes": 0, "documents": 0}
    X = unit_rows(6, seed=5)
    client.post(f"{prefix}/collections/c/write", json={"vectors": X.tolist()})
    s = client.get(f"{prefix}/collections/c/stats").json()
    assert set(s) == {"num_locations", "total_writes", "current_eta", "avg_write_count",
                      "max_write_count", "writes", "documents"}
    assert s["writes"] == 6 and s["num_locations"] >= 1 and s["total_writes"] > 0
    cfg = client.get(f"{prefix}/collections/c/config").json()
    assert cfg["config"]["dim"] == D and cfg["config"]["mode"] == "competitive"
    fp = client.get(f"{prefix}/collections/c/fingerprint").json()["fingerprint"]
    assert len(fp) == D
    locs = client.get(f"{prefix}/collections/c/locations").json()["locations"]
    assert len(locs) == s["num_locations"] and set(locs[0]) == {"id", "write_count"}
    full = client.get(f"{prefix}/collections/c/locations?full=true").json()["locations"]
    assert set(full[0]) == {"id", "write_count", "address", "counter"}
    assert len(full[0]["address"]) == D and len(full[0]["counter"]) == D
    error_of(client.get(f"{prefix}/collections/c/locations?full=maybe"), 400)


def test_compress(client, prefix):
    X = unit_rows(8, seed=6)
    client.post(f"{prefix}/collections/c/write", json={"vectors": X.tolist()})
    before = client.get(f"{prefix}/collections/c/stats").json()["num_locations"]
    r = client.post(f"{prefix}/collections/c/compress", json={"max_locations": 2}).json()
    assert r["locations_before"] == before and r["locations_after"] <= 2
    assert r["merges"] == before - r["locations_after"]
    assert client.post(f"{prefix}/collections/c/compress").status_code == 200  # no body
    error_of(client.post(f"{prefix}/collections/c/compress", json={"max_locations": 0}), 400)
    error_of(client.post(f"{prefix}/collections/c/compress", json={"max_locations": "2"}), 400)


# -- documents ------------------------------------------------------------------------------------

def test_documents(client, prefix):
    X = unit_rows(4, seed=7)
    ids = client.post(f"{prefix}/collections/c/write",
                      json={"vectors": X.tolist(),
                            "metadata": [{"i": i} for i in range(4)]}).json()["ids"]
    assert client.get(f"{prefix}/collections/c/documents/{ids[1]}").json() == {
        "id": ids[1], "metadata": {"i": 1}}
    page = client.get(f"{prefix}/collections/c/documents?offset=1&limit=2").json()["documents"]
    assert [d["id"] for d in page] == ids[1:3]
    hits = client.post(f"{prefix}/collections/c/documents/query",
                       json={"query": X[2].tolist(), "n": 2, "mode": "exact"}).json()["results"]
    assert hits[0]["id"] == ids[2] and hits[0]["metadata"] == {"i": 2}
    assert set(hits[0]) == {"id", "similarity", "metadata"} and len(hits) == 2
    indexed = client.post(f"{prefix}/collections/c/documents/query",
                          json={"query": X[2].tolist()}).json()["results"]
    assert indexed and indexed[0]["id"] == ids[2]
    assert client.delete(f"{prefix}/collections/c/documents/{ids[2]}").json() == {"deleted": True}
    assert client.delete(f"{prefix}/collections/c/documents/{ids[2]}").json() == {"deleted": False}
    error_of(client.get(f"{prefix}/collections/c/documents/{ids[2]}"), 404)
    error_of(client.get(f"{prefix}/collections/c/documents/999999"), 404)
    error_of(client.get(f"{prefix}/collections/c/documents/abc"), 400)
    error_of(client.get(f"{prefix}/collections/c/documents?limit=0"), 400)
    error_of(client.get(f"{prefix}/collections/c/documents?limit=51"), 400)
    error_of(client.get(f"{prefix}/collections/c/documents?offset=-1"), 400)
    error_of(client.post(f"{prefix}/collections/c/documents/query",
                         json={"query": X[2].tolist(), "mode": "fuzzy"}), 400)
    error_of(client.post(f"{prefix}/collections/c/documents/query",
                         json={"query": X[2].tolist(), "n": 0}), 400)
    assert client.get(f"{prefix}/collections/c/stats").json()["documents"] == 3


def test_write_without_metadata_creates_no_document(client):
    client.post("/collections/c/write", json={"vectors": unit_rows(2).tolist()})
    assert client.get("/collections/c/documents").json() == {"documents": []}
    assert client.get("/collections/c/stats").json()["documents"] == 0


# -- malformed input never gets 500 and never loses a committed write ----------------------------

BAD_BODIES = [
    (b"", "empty body"),
    (b"{", "invalid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'"query"', "JSON object"),
    (b"null", "JSON object"),
    (b'{"query": NaN}', "invalid JSON"),
    (b'{"query": [NaN, 1]}', "invalid JSON"),
    (b'{"query": [Infinity]}', "invalid JSON"),
    (b'{"query": [-Infinity]}', "invalid JSON"),
    (b'{"query": [1e999]}', "invalid JSON"),
    (b'{"query": [1, 2, 3]}', f"dimension mismatch: expected {D}, got 3"),
    (b'{"query": []}', "non-empty"),
    (b'{"query": "abc"}', "array"),
    (b'{"query": {"a": 1}}', "array"),
    (b'{"query": null}', "query"),
    (b'{"nothing": 1}', "query"),
    (b'{"query": [' + b", ".join([b'"1"'] * D) + b"]}", "expected a number"),
    (b'{"query": [' + b", ".join([b"true"] * D) + b"]}", "boolean"),
    (b'{"query": [' + b", ".join([b"0.5"] * (D - 1) + [b"true"]) + b"]}",
     f"query[{D - 1}]: expected a number, got a boolean"),
    (b'{"query": [' + b", ".join([b"false"] + [b"0.5"] * (D - 1)) + b"]}",
     "query[0]: expected a number, got a boolean"),
    (b'{"query": [' + b", ".join([b"0.5"] * (D - 1) + [b'"0.5"']) + b"]}", "got a string"),
    (b'{"query": [' + b", ".join([b"null"] * D) + b"]}", "null"),
    (b'{"query": [' + b", ".join([b"[1]"] * D) + b"]}", "expected a number"),
    (b'{"query": [' + b", ".join([b"1e39"] * D) + b"]}", "finite"),
    (b'{"query": [' + b", ".join([b"1" + b"0" * 40] * D) + b"]}", "finite"),
    (b'{"query": [' + b", ".join([b"1"] * D) + b'], "strategy": "slow"}', "unknown strategy"),
    (b'{"query": [' + b", ".join([b"1"] * D) + b'], "strategy": 3}', "strategy"),
    (b"\xff\xfe", "invalid JSON"),
]


@pytest.mark.parametrize("raw, fragment", BAD_BODIES)
def test_malformed_read_bodies_are_400(client, raw, fragment):
    X = unit_rows(3, seed=8)
    client.post("/collections/c/write", json={"vectors": X.tolist()})
    r = client.post("/collections/c/read", content=raw,
                    headers={"content-type": "application/json"})
    assert fragment in error_of(r, 400)
    assert client.get("/collections/c/stats").json()["writes"] == 3


@pytest.mark.parametrize("body, fragment", [
    ({"vectors": []}, "at least one"),
    ({"vectors": [[1.0] * D] * 51}, "at most 50"),
    ({"vectors": [[1.0] * D, [1.0] * (D - 1)]}, f"dimension mismatch: expected {D}, got {D - 1}"),
    ({"vectors": [1.0] * D}, "vectors[0]"),
    ({"vectors": "x"}, "array"),
    ({"vectors": [[1.0] * D], "metadata": [1, 2]}, "metadata"),
    ({"vectors": [[1.0] * D], "metadata": {"a": 1}}, "metadata"),
    ({"vectors": [[1.0] * D, [1e39] * D]}, "finite"),
    ({"vectors": [[1.0] * D, [float(i) for i in range(D - 1)] + [True]]}, "boolean"),
])
def test_malformed_writes_are_400_and_atomic(client, body, fragment):
    X = unit_rows(2, seed=9)
    client.post("/collections/c/write", json={"vectors": X.tolist(), "metadata": [1, 2]})
    before = client.get("/collections/c/stats").json()
    assert fragment in error_of(client.post("/collections/c/write", json=body), 400)
    after = client.get("/collections/c/stats").json()
    assert after == before and after["writes"] == 2 and after["documents"] == 2


def test_malformed_write_does_not_create_the_collection(client):
    error_of(client.post("/collections/nc/write", json={"vectors": [[1.0, 2.0]]}), 400)
    assert client.get("/collections").json() == {"collections": []}


def test_body_too_large_is_413(client):
    big = b'{"vectors": [[' + b"0.1," * 70000 + b'0.1]]}'
    assert len(big) > 256 * 1024
    assert "too large" in error_of(client.post("/collections/c/write", content=big), 413)

    def chunks():  # no content-length: the streamed size is checked too
        for _ in range(70):
            yield b" " * 4096

    assert "too large" in error_of(client.post("/collections/c/write", content=chunks()), 413)


def test_content_length_garbage_is_400(client):
    r = client.post("/collections/c/write", content=b"{}",
                    headers={"content-length": "2"})
    error_of(r, 400)


@pytest.mark.parametrize("query", ["offset=x", "limit=1.5", "limit=99999999999999999999"])
def test_bad_query_strings_are_400(client, query):
    client.post("/collections/c/write", json={"vectors": [[1.0] * D], "metadata": [1]})
    error_of(client.get(f"/collections/c/documents?{query}"), 400)


def test_text_routes_need_an_encoder(client):
    client.post("/collections/t/write", json={"vectors": unit_rows(1).tolist()})
    for route, body in [("remember", {"texts": ["hello there"]}),
                        ("recall", {"text": "hello"}),
                        ("calibrate", {"related": ["a", "b"], "unrelated": ["c", "d"]})]:
        msg = error_of(client.post(f"/collections/t/{route}", json=body), 400)
        assert "encoder" in msg
    error_of(client.post("/collections/t/remember", json={"texts": 5}), 400)
    error_of(client.post("/collections/t/recall", json={"text": ["x"]}), 400)


# -- time limits -------------------------------------------------------------------------------------

def test_slow_reads_time_out_but_started_writes_finish(tmp_path):
    import threading
    import time

    app = create_app(tmp_path / "data", D, limits=Limits(request_timeout=0.3))
    with TestClient(app) as c:
        c.post("/collections/c/write", json={"vectors": unit_rows(2).tolist()})
        handle = app.state.hopmem.dbs["default"]
        coll = handle.collections["c"]
        real_read, real_write = coll.read_scored, coll.write
        release = threading.Event()

        def slow_read(*args, **kw):
            release.wait(5)
            return real_read(*args, **kw)

        def slow_write(*args, **kw):
            time.sleep(0.6)  # longer than the timeout: must still commit and answer 200
            return real_write(*args, **kw)

        try:
            coll.read_scored = slow_read
            r = c.post("/collections/c/read", json={"query": unit_rows(1)[0].tolist()})
            assert r.status_code == 503 and "timed out" in r.json()["error"]
            assert r.headers.get("retry-after") == "1"
            release.set()
            coll.write = slow_write
            r = c.post("/collections/c/write", json={"vectors": unit_rows(1).tolist()})
            assert r.status_code == 200, r.text
        finally:
            release.set()
            del coll.read_scored, coll.write
        assert c.get("/collections/c/stats").json()["writes"] == 3


def test_ready_is_503_when_storage_is_unusable(client):
    state = client.app.state.hopmem
    real = state.datadir.list

    def broken():
        raise OSError("disk on fire")

    state.datadir.list = broken
    try:
        r = client.get("/ready")
        assert r.status_code == 503 and "storage unusable" in r.json()["error"]
        assert client.get("/health").status_code == 200  # liveness is not readiness
    finally:
        state.datadir.list = real
    assert client.get("/readyz").status_code == 200


# -- grouped reads: the same numbers as Memory.analyze, fewer worker hops ---------------------

def _twin(X: np.ndarray):
    """An in-memory Memory with the default database config and the same writes."""
    from hopmem import Memory

    mem = Memory(D)
    mem.write(X)
    return mem


def _assert_same_trace(got, want) -> None:
    np.testing.assert_array_equal(got.result, want.result)
    np.testing.assert_array_equal(got.activated, want.activated)
    assert (got.fidelity, got.first_contact) == (want.fidelity, want.first_contact)
    assert (got.iterations, got.converged) == (want.iterations, want.converged)


class _CountingExecutor:
    """A thread pool that counts the calls handed to it."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(4)
        self.submitted = 0

    def submit(self, fn, *args):
        self.submitted += 1
        return self.pool.submit(fn, *args)


def _gather_reads(groups, calls):
    import asyncio

    async def main():
        return await asyncio.gather(*(groups.read(coll, "analyze", q, s, 30.0)
                                      for coll, q, s in calls),
                                    return_exceptions=True)

    return asyncio.run(main())


def test_read_groups_share_worker_hops_and_keep_each_reads_numbers():
    from hopmem.server.reads import ReadGroups

    X = unit_rows(30, seed=11)
    mem = _twin(X)
    queries = unit_rows(24, seed=12) + X[:24]
    strategies = ["iterative", "fast"] * 12
    executor = _CountingExecutor()
    traces = _gather_reads(ReadGroups(executor, parallel=1),
                           [(mem, q, s) for q, s in zip(queries, strategies)])
    executor.pool.shutdown()
    # The first read starts at once, alone; the 23 that queued meanwhile go as one group.
    assert executor.submitted == 2
    for q, s, t in zip(queries, strategies, traces):
        _assert_same_trace(t, mem.analyze(q, s))


class _BlockingColl:
    """A stand-in collection for ReadGroups: the query "block" waits for ``release``,
    "bad" raises; every read that ran is recorded in ``seen``."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.seen: list[str] = []

    def _run(self, query: str) -> str:
        if query == "block":
            self.release.wait(5)
        if query == "bad":
            raise ValueError("bad query")
        self.seen.append(query)
        return query

    def analyze(self, query, strategy):
        return self._run(query).upper()

    def read_scored(self, query, strategy):
        return self._run(query)


def _with_blocked_group(method, body, first_timeout=30.0):
    """Run ``body(read, first, coll)`` on a ReadGroups of one group at a time whose first
    read (the query "block", with ``first_timeout``) is running and waiting for
    ``coll.release``; ``read(query, timeout)`` queues another. Returns what body returns."""
    import asyncio

    from hopmem.server.reads import ReadGroups

    coll = _BlockingColl()
    executor = _CountingExecutor()

    async def main():
        groups = ReadGroups(executor, parallel=1)

        def read(query, timeout=30.0):
            return asyncio.ensure_future(groups.read(coll, method, query, "fast", timeout))

        first = read("block", first_timeout)
        await asyncio.sleep(0)  # the first group is running; the next reads wait
        return await body(read, first, coll)

    try:
        return asyncio.run(main()), coll
    finally:
        executor.pool.shutdown()


def test_read_groups_keep_errors_with_their_read_and_skip_cancelled_reads():
    import asyncio

    async def body(read, first, coll):
        waiting = [read(q) for q in ("a", "bad", "gone", "b")]
        await asyncio.sleep(0)
        waiting[2].cancel()  # timed out (or the client left) before its group started
        coll.release.set()
        return await asyncio.gather(first, *waiting, return_exceptions=True)

    (block, a, bad, gone, b), coll = _with_blocked_group("analyze", body)
    assert (block, a, b) == ("BLOCK", "A", "B")
    assert isinstance(bad, ValueError) and isinstance(gone, asyncio.CancelledError)
    assert coll.seen == ["block", "a", "b"]  # the cancelled read never ran


def test_read_groups_time_out_reads_and_skip_them_if_not_started():
    import asyncio

    from hopmem.server.reads import ReadTimeout

    async def body(read, first, coll):
        late, patient = read("late", 0.05), read("ok")
        done = await asyncio.gather(first, late, return_exceptions=True)
        coll.release.set()
        return done, await patient

    ((first, late), patient), coll = _with_blocked_group("read_scored", body, first_timeout=0.05)
    assert isinstance(first, ReadTimeout) and isinstance(late, ReadTimeout)
    assert patient == "ok"
    assert coll.seen == ["block", "ok"]  # the read that timed out while queued never ran


def test_read_and_analyze_routes_return_memory_analyze_numbers(client):
    from concurrent.futures import ThreadPoolExecutor

    X = unit_rows(40, seed=13)
    assert client.post("/collections/c/write", json={"vectors": X.tolist()}).status_code == 200
    mem = _twin(X)
    queries = np.vstack([unit_rows(30, seed=14) + 0.5 * X[:30],
                         np.eye(D)[:2]])  # exact 0s and 1s take the element-wise check
    calls = [(route, q, s) for q in queries for route in ("read", "analyze")
             for s in ("iterative", "fast")]

    def post(call):
        route, q, s = call
        query = [int(x) if x in (0, 1) else x for x in q.tolist()]  # ints are numbers too
        r = client.post(f"/collections/c/{route}", json={"query": query, "strategy": s})
        assert r.status_code == 200, r.text
        return r.json()

    with ThreadPoolExecutor(16) as pool:  # concurrent requests: reads go in groups
        answers = list(pool.map(post, calls))
    for (route, q, s), got in zip(calls, answers):
        want = mem.analyze(q, s)
        np.testing.assert_array_equal(np.float32(got["result"]), want.result)
        assert (got["fidelity"], got["first_contact"]) == (want.fidelity, want.first_contact)
        if route == "analyze":
            assert [a["id"] for a in got["activated_locations"]] == want.activated.tolist()
            assert (got["iterations"], got["converged"]) == (want.iterations, want.converged)


# -- the hot routes skip Starlette's router, and nothing else changes ------------------------

def test_hot_routes_answer_exactly_as_the_router_does(client):
    X = unit_rows(6, seed=15)
    client.post("/collections/c/write", json={"vectors": X.tolist()})
    router_only = TestClient(client.app.router)  # the same endpoints, without HotRoutes
    requests = [
        ("/collections/c/read", {"query": X[0].tolist()}),
        ("/db/default/collections/c/analyze", {"query": X[1].tolist(), "strategy": "fast"}),
        ("/collections/c/attention", {"query": X[2].tolist()}),
        ("/collections/c/batch_analyze", {"queries": X[:2].tolist()}),
        ("/collections/c/documents/query", {"query": X[0].tolist()}),
        ("/collections/c/read", {"query": [1.0, 2.0]}),          # 400
        ("/collections/c/read", {"query": [True] * D}),          # 400
        ("/db/Bad!/collections/c/read", {"query": X[0].tolist()}),  # 400
        ("/db/nope/collections/c/read", {"query": X[0].tolist()}),  # 404
    ]
    for path, body in requests:
        hot, routed = client.post(path, json=body), router_only.post(path, json=body)
        assert (hot.status_code, hot.content) == (routed.status_code, routed.content), path
    write = {"vectors": unit_rows(1, seed=16).tolist()}
    assert client.post("/collections/c/write", json=write).json() == {"count": 1}
    assert router_only.post("/collections/c/write", json=write).json() == {"count": 1}
    # A hot path with another method, or a near miss, is still the application's answer.
    assert "not allowed" in error_of(client.get("/collections/c/read"), 405)
    assert "no route" in error_of(client.post("/collections/c/read/extra", json={}), 404)
    assert "no route" in error_of(client.post("/read", json={}), 404)


def test_hot_routes_serve_the_hot_routes_and_pass_the_rest_on(client):
    import asyncio

    from hopmem.server.routes import HotRoutes

    client.post("/collections/c/write", json={"vectors": unit_rows(3, seed=17).tolist()})
    passed_on: list[str] = []

    async def app(scope, receive, send):
        passed_on.append(f"{scope['method']} {scope['path']}")

    def call(hot, method, path, body=b""):
        sent = []
        scope = {"type": "http", "method": method, "path": path, "root_path": "",
                 "query_string": b"", "headers": [(b"content-length", b"%d" % len(body))]}

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            sent.append(message)

        asyncio.run(hot(scope, receive, send))
        return sent

    hot = HotRoutes(app, client.app.routes)
    query = b'{"query": %s}' % str(unit_rows(1, seed=18)[0].tolist()).encode()
    sent = call(hot, "POST", "/db/default/collections/c/read", query)
    assert sent[0]["status"] == 200 and b'"fidelity"' in sent[1]["body"]
    for method, path in [("GET", "/collections/c/read"), ("GET", "/collections/c/stats"),
                         ("POST", "/collections/c/compress"), ("POST", "/nope/read")]:
        assert call(hot, method, path) == []
    assert passed_on == ["GET /collections/c/read", "GET /collections/c/stats",
                         "POST /collections/c/compress", "POST /nope/read"]


# -- one socket write per response ---------------------------------------------------------------

class _FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 1)}.get(name, default)


def test_coalescing_transport_writes_once_per_callback_in_order():
    import asyncio

    from hopmem.server.transport import CoalescingTransport

    async def main():
        raw = _FakeTransport()
        t = CoalescingTransport(raw, asyncio.get_running_loop())
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.write(b"{}")
        assert raw.writes == []  # not before the callback that wrote returns
        await asyncio.sleep(0)
        assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
        t.write(b"next")
        await asyncio.sleep(0)
        assert raw.writes[1:] == [b"next"]
        assert t.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest is the transport's
        t.write(b"last words")
        t.close()  # what is pending goes out first
        assert raw.writes[2:] == [b"last words"] and raw.closed
        t.write(b"too late")
        await asyncio.sleep(0)
        assert raw.writes[3:] == []  # a closed connection takes nothing more

    asyncio.run(main())


def test_coalescing_protocol_class_wraps_each_connection_transport():
    import asyncio

    from hopmem.server.transport import CoalescingTransport, coalescing

    class Protocol(asyncio.Protocol):  # stands for uvicorn's HTTP protocol classes
        def connection_made(self, transport):
            self.transport = transport

    async def main():
        protocol = coalescing(Protocol)()
        raw = _FakeTransport()
        protocol.connection_made(raw)
        assert isinstance(protocol.transport, CoalescingTransport)
        protocol.transport.write(b"head")
        protocol.transport.write(b"body")
        await asyncio.sleep(0)
        return raw.writes

    assert asyncio.run(main()) == [b"headbody"]
    assert coalescing(Protocol).__name__ == "CoalescingProtocol"
