"""API keys: storage, the keys CLI, 401/403, scopes, and when auth applies."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from hopmem.server.app import create_app  # noqa: E402
from hopmem.server.auth import KEYS_FILE, AuthPolicy, KeyStore, is_loopback  # noqa: E402
from hopmem.server.cli import main as cli_main  # noqa: E402

D = 8
VEC = {"vectors": [[1.0] + [0.0] * (D - 1)]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


def make_client(data_dir, **kw):
    return TestClient(create_app(data_dir, D, **kw))


# -- the key file ------------------------------------------------------------------------------

def test_keys_are_stored_hashed(data_dir):
    store = KeyStore(data_dir)
    info, token = store.create("default", "ci")
    assert token.startswith("hm_") and info.key_id in token
    raw = (data_dir / KEYS_FILE).read_bytes()
    assert token.encode() not in raw
    rows = sqlite3.connect(data_dir / KEYS_FILE).execute("SELECT hash FROM api_keys").fetchall()
    assert rows == [(hashlib.sha256(token.encode()).hexdigest(),)]
    assert store.verify(token) == "default"
    assert store.verify(token + "x") is None
    assert store.verify("hm_" + info.key_id + "_wrong") is None
    assert store.verify("garbage") is None
    assert [k.key_id for k in store.list()] == [info.key_id]
    assert store.revoke(info.key_id) is True
    assert store.revoke(info.key_id) is False
    assert store.verify(token) is None
    assert store.list() == [] and len(store.list(include_revoked=True)) == 1


def test_keys_cli(data_dir, capsys):
    assert cli_main(["keys", "--data-dir", str(data_dir), "create", "--all", "--label", "ops"]) == 0
    token = capsys.readouterr().out.strip()
    assert KeyStore(data_dir).verify(token) == "*"
    assert cli_main(["keys", "--data-dir", str(data_dir), "create", "--db", "agents"]) == 0
    scoped = capsys.readouterr().out.strip()
    assert KeyStore(data_dir).verify(scoped) == "agents"
    assert cli_main(["keys", "--data-dir", str(data_dir), "create", "--db", "Bad!"]) == 2
    capsys.readouterr()
    assert cli_main(["keys", "--data-dir", str(data_dir), "list"]) == 0
    listing = capsys.readouterr().out
    assert "agents" in listing and "*" in listing and token not in listing
    # revoke by the whole token works too
    assert cli_main(["keys", "revoke", scoped, "--data-dir", str(data_dir)]) == 0
    assert KeyStore(data_dir).verify(scoped) is None
    assert cli_main(["keys", "--data-dir", str(data_dir), "revoke", "nosuchkey"]) == 1
    with pytest.raises(SystemExit):
        cli_main(["keys", "--data-dir", str(data_dir), "create"])  # --db or --all required


# -- when auth applies ---------------------------------------------------------------------------

def test_loopback_without_keys_is_open(data_dir):
    with make_client(data_dir) as c:
        assert c.post("/collections/a/write", json=VEC).status_code == 200
        assert c.get("/db").status_code == 200


def test_creating_a_key_turns_auth_on_and_revoking_the_last_turns_it_off(data_dir):
    with make_client(data_dir) as c:
        assert c.get("/collections").status_code == 200
        info, token = KeyStore(data_dir).create("*")
        r = c.get("/collections")
        assert r.status_code == 401 and r.json() == {"error": "missing API key"}
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert c.get("/collections", headers=bearer(token)).status_code == 200
        assert c.get("/collections", headers={"X-API-Key": token}).status_code == 200
        assert c.get("/collections", headers=bearer("hm_nope_nope")).json() == {
            "error": "invalid API key"}
        assert c.get("/collections", headers={"Authorization": "Basic abc"}).status_code == 401
        # public routes stay public
        for path in ("/health", "/healthz", "/ready", "/readyz", "/openapi.json"):
            assert c.get(path).status_code == 200, path
        KeyStore(data_dir).revoke(info.key_id)
        assert c.get("/collections").status_code == 200


def test_auth_on_requires_keys_even_on_loopback(data_dir):
    with make_client(data_dir, auth="on") as c:
        assert c.get("/collections").status_code == 401
        assert c.get("/health").status_code == 200


def test_auth_off_ignores_keys_on_loopback(data_dir):
    KeyStore(data_dir).create("*")
    with make_client(data_dir, auth="off") as c:
        assert c.get("/collections").status_code == 200


def test_non_loopback_bind_requires_keys(data_dir):
    with pytest.raises(ValueError, match="loopback"):
        create_app(data_dir, D, auth="off", host="0.0.0.0")
    app = create_app(data_dir, D, host="0.0.0.0")
    assert app.state.hopmem.policy.always
    with TestClient(app) as c:
        assert c.get("/collections").status_code == 401
        _, token = KeyStore(data_dir).create("default")
        assert c.get("/collections", headers=bearer(token)).status_code == 200


@pytest.mark.parametrize("host, loop", [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                        ("127.0.0.2", True), ("0.0.0.0", False),
                                        ("::", False), ("10.1.2.3", False),
                                        ("example.com", False)])
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_policy_modes(data_dir):
    with pytest.raises(ValueError):
        AuthPolicy(KeyStore(data_dir), "maybe")
    assert AuthPolicy(KeyStore(data_dir), "auto", True).enabled() is False
    assert AuthPolicy(KeyStore(data_dir), "on", True).enabled() is True


# -- scopes ------------------------------------------------------------------------------------------

def test_scoped_keys(data_dir):
    keys = KeyStore(data_dir)
    _, admin = keys.create("*")
    _, agents = keys.create("agents")
    _, default = keys.create("default")
    with make_client(data_dir) as c:
        assert c.post("/db", json={"name": "agents", "dimension": D},
                      headers=bearer(admin)).status_code == 200
        assert c.post("/db", json={"name": "other", "dimension": D},
                      headers=bearer(admin)).status_code == 200

        # the agents key works on agents only
        ok = c.post("/db/agents/collections/c/write", json=VEC, headers=bearer(agents))
        assert ok.status_code == 200
        r = c.post("/db/other/collections/c/write", json=VEC, headers=bearer(agents))
        assert r.status_code == 403 and "agents" in r.json()["error"]
        # legacy routes are database "default"
        assert c.post("/collections/c/write", json=VEC, headers=bearer(agents)).status_code == 403
        assert c.post("/collections/c/write", json=VEC, headers=bearer(default)).status_code == 200
        assert c.get("/db/agents", headers=bearer(default)).status_code == 403
        assert c.get("/db/agents", headers=bearer(agents)).status_code == 200
        # a scoped key sees only its own database in the listing
        names = [d["name"] for d in c.get("/db", headers=bearer(agents)).json()["databases"]]
        assert names == ["agents"]
        names = {d["name"] for d in c.get("/db", headers=bearer(admin)).json()["databases"]}
        assert names == {"default", "agents", "other"}
        # managing databases needs a key for all of them
        assert c.post("/db", json={"name": "x", "dimension": D},
                      headers=bearer(agents)).status_code == 403
        assert c.delete("/db/agents", headers=bearer(agents)).status_code == 403
        assert c.delete("/db/other", headers=bearer(admin)).json() == {"dropped": True}
        # scope is checked before existence: no probing other tenants' names
        assert c.get("/db/ghost/collections", headers=bearer(agents)).status_code == 403
        # and the writes that were refused did not happen
        stats = c.get("/db/agents/collections/c/stats", headers=bearer(agents)).json()
        assert stats["writes"] == 1
        assert c.get("/collections/c/stats", headers=bearer(default)).json()["writes"] == 1


def test_401_comes_before_validation(data_dir):
    KeyStore(data_dir).create("*")
    with make_client(data_dir) as c:
        assert c.get("/db/BAD/collections").status_code == 401
        assert c.post("/collections/c/write", content=b"{").status_code == 401
