"""Text routes (remember, recall, calibrate) with a database's recorded encoder."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from hopmem.server.app import create_app  # noqa: E402

D = 128

FACTS = [
    "User is migrating the billing service off Stripe; the deadline is Q3.",
    "Decided against a queue in front of the webhook because retries suffice.",
    "The staging environment runs in eu-west with two replicas.",
    "Alice prefers dark mode in every editor she uses.",
    "The quarterly report is due on the first Monday of April.",
    "Our Postgres cluster was upgraded to version 16 last week.",
    "Bob is allergic to peanuts and avoids Thai restaurants.",
    "The mobile app crashes when the camera permission is denied.",
    "Kubernetes nodes autoscale between three and nine instances.",
    "The marketing site is built with Astro and deployed on Netlify.",
    "Invoices are generated nightly by a cron job at 02:00 UTC.",
    "The team retro happens every second Friday afternoon.",
    "Password resets expire after thirty minutes for security.",
    "The data warehouse refreshes from production every six hours.",
    "Carol owns the onboarding flow and its analytics events.",
    "We pinned numpy below version two because of a binary wheel issue.",
]


@pytest.fixture
def client(tmp_path):
    app = create_app(tmp_path / "data", D, encoder="hashing")
    with TestClient(app) as c:
        yield c


def test_remember_recall_calibrate(client):
    r = client.post("/collections/notes/remember", json={"texts": FACTS})
    assert r.status_code == 200, r.text
    ids = r.json()["ids"]
    assert len(ids) == len(FACTS) and len(set(ids)) == len(FACTS)
    # the texts are documents with their metadata
    doc = client.get(f"/collections/notes/documents/{ids[0]}").json()
    assert doc["metadata"]["text"] == FACTS[0]
    assert client.get("/collections/notes/stats").json()["documents"] == len(FACTS)

    more = client.post("/collections/notes/remember",
                       json={"texts": ["The office wifi password rotates monthly."],
                             "metadata": [{"source": "it"}]}).json()["ids"]
    assert len(more) == 1
    assert client.get(f"/collections/notes/documents/{more[0]}").json()["metadata"] == {
        "text": "The office wifi password rotates monthly.", "source": "it"}

    rec = client.post("/collections/notes/recall",
                      json={"text": "when is the Stripe billing migration deadline?", "n": 3})
    assert rec.status_code == 200, rec.text
    body = rec.json()
    assert {"fidelity", "first_contact", "hits", "abstained", "reason"} <= set(body)
    assert body["abstained"] is False and body["hits"]
    assert body["hits"][0]["text"] == FACTS[0]
    assert {"text", "id", "metadata", "confidence", "band"} <= set(body["hits"][0])

    cal = client.post("/collections/notes/calibrate", json={
        "related": ["Stripe billing migration deadline", "peanut allergy Bob",
                    "dark mode Alice editor", "Postgres upgrade version"],
        "unrelated": ["recipe for banana bread", "football world cup winner",
                      "how tall is mount everest", "best hiking boots"],
        "error_budget": 0.25})
    assert cal.status_code == 200, cal.text
    assert "gate" in cal.json()
    banded = client.post("/collections/notes/recall", json={"text": "Bob peanuts allergy"}).json()
    assert banded["abstained"] or banded["hits"][0]["band"] in ("vivid", "clear", "vague")


def test_text_route_errors(client):
    # the first batch learns the centering mean and needs enough texts
    assert client.post("/collections/c/remember", json={"texts": ["one"]}).status_code == 400
    assert client.post("/collections/c/remember", json={"texts": []}).status_code == 400
    assert client.post("/collections/c/remember", json={"texts": [1, 2]}).status_code == 400
    assert client.post("/collections/c/remember", json={"texts": FACTS,
                                                        "metadata": {"a": 1}}).status_code == 400
    assert client.post("/collections/c/remember", json={
        "texts": FACTS[:2] * 8, "metadata": [{"text": "x"}] * 16}).status_code == 400
    # recall of an empty collection abstains (a value, not an error)
    empty = client.post("/collections/c/recall", json={"text": "anything"}).json()
    assert empty["abstained"] is True and empty["hits"] == []
    assert client.post("/collections/c/recall", json={"text": 5}).status_code == 400
    assert client.post("/collections/c/recall", json={"text": "x", "n": 0}).status_code == 400
    assert client.post("/collections/ghost/calibrate", json={
        "related": ["a", "b"], "unrelated": ["c", "d"]}).status_code == 404
    # a collection holding plain vectors refuses text (another vector space)
    client.post("/collections/v/write", json={"vectors": [[1.0] + [0.0] * (D - 1)]})
    r = client.post("/collections/v/remember", json={"texts": FACTS})
    assert r.status_code in (400, 409) and "error" in r.json()


def test_database_created_with_encoder_over_http(client):
    r = client.post("/db", json={"name": "txt", "dimension": 64, "encoder": "hashing"})
    assert r.status_code == 200, r.text
    ok = client.post("/db/txt/collections/a/remember", json={"texts": FACTS})
    assert ok.status_code == 200, ok.text
    assert client.post("/db", json={"name": "bad", "dimension": 64,
                                    "encoder": "word2vec"}).status_code == 400
    client.post("/db", json={"name": "plain", "dimension": 64})
    msg = client.post("/db/plain/collections/a/recall", json={"text": "hi"}).json()["error"]
    assert "no encoder" in msg
