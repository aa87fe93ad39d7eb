"""The real server process: start, talk, SIGTERM; the seed-002 recipe; concurrency.

Each test starts ``python -m hopmem.server serve`` on a loopback port with its
own data directory, waits for /health, and stops it with SIGTERM.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

pytestmark = pytest.mark.subprocess  # every test starts `python -m hopmem.server`

ROOT = Path(__file__).resolve().parent.parent
RECIPE_PORT = 6380  # what the recipe hard-codes


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """``python -m hopmem.server serve`` in a subprocess."""

    def __init__(self, data_dir: Path, dimension: int, port: int | None = None,
                 *extra: str) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        for var in [v for v in env if v.startswith("HOPMEM_")]:
            del env[var]
        self.log = open(data_dir.parent / f"server-{self.port}.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hopmem.server", "serve", "--data-dir", str(data_dir),
             "--dimension", str(dimension), "--port", str(self.port), "--log-level", "info",
             *extra],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=str(ROOT))
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()  # closes the log too: a server that never came up leaks no file
            raise

    def _wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: "
                                   + self.output()[-2000:])
            try:
                status, _ = self.call("GET", "/health")
                if status == 200:
                    time.sleep(0.05)  # a bind failure exits at once: make sure it is ours
                    if self.proc.poll() is None:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("server did not become healthy: " + self.output()[-2000:])

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.data_dir.parent / f"server-{self.port}.log").read_text(errors="replace")

    def call(self, method: str, path: str, body: object = None,
             headers: dict[str, str] | None = None) -> tuple[int, object]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=data,
                         headers={"Content-Type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
        finally:
            conn.close()

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def test_serve_talk_sigterm_and_restart(tmp_path):
    data = tmp_path / "data"
    with LiveServer(data, 8) as srv:
        assert srv.call("GET", "/health") == (200, {"status": "ok"})
        assert srv.call("GET", "/ready") == (200, {"status": "ok"})
        status, body = srv.call("POST", "/collections/c/write",
                                {"vectors": np.eye(8)[:3].tolist(), "metadata": [1, 2, 3]})
        assert status == 200 and body["count"] == 3 and len(body["ids"]) == 3
        status, body = srv.call("POST", "/db/default/collections/c/read",
                                {"query": np.eye(8)[1].tolist()})
        assert status == 200 and len(body["result"]) == 8
        assert srv.call("GET", "/nope")[0] == 404
        assert srv.call("POST", "/collections/c/read", {"query": [1, 2]}) == (
            400, {"error": "dimension mismatch: expected 8, got 2"})
        code = srv.stop()
        assert code == 0, srv.output()
        assert "hopmem server stopped" in srv.output()
    # the data survives the restart; dimension may be omitted once 'default' exists
    with LiveServer(data, 8) as srv:
        status, stats = srv.call("GET", "/collections/c/stats")
        assert status == 200 and stats["writes"] == 3 and stats["documents"] == 3
    with pytest.raises(RuntimeError, match="dimension"):
        LiveServer(data, 16)  # refuses a different dimension for 'default'


def test_non_loopback_bind_refuses_to_start_without_keys(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "hopmem.server", "serve", "--data-dir",
                        str(tmp_path / "d"), "--dimension", "8", "--host", "0.0.0.0",
                        "--port", str(free_port())],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "keys" in r.stderr


def test_live_auth(tmp_path):
    data = tmp_path / "data"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "hopmem.server", "keys", "--data-dir", str(data),
                          "create", "--db", "default"], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    token = out.stdout.strip()
    with LiveServer(data, 8) as srv:
        assert srv.call("GET", "/collections")[0] == 401
        assert srv.call("GET", "/collections",
                        headers={"Authorization": f"Bearer {token}"}) == (200, {"collections": []})
        assert srv.call("GET", "/db/other/collections",
                        headers={"Authorization": f"Bearer {token}"})[0] == 403
        assert srv.call("GET", "/health")[0] == 200


# -- writes in flight at SIGTERM finish; concurrent readers and writers lose nothing -----------

def _writer(port: int, path: str, vectors: np.ndarray, acked: list[int], stop: threading.Event,
            errors: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for v in vectors:
        if stop.is_set():
            break
        try:
            conn.request("POST", path, body=json.dumps({"vectors": [v.tolist()],
                                                        "metadata": [{"x": 1}]}),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException):
            break  # the server went away (shutdown): this write was not acknowledged
        if resp.status == 200:
            acked.append(1)
        elif resp.status == 503:
            break  # refused while shutting down
        else:
            errors.append(f"{resp.status} {raw[:200]!r}")
            break
    conn.close()


def _reader(port: int, path: str, queries: np.ndarray, counts: list[int],
            stop: threading.Event, errors: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    i = 0
    while not stop.is_set():
        q = queries[i % len(queries)]
        i += 1
        try:
            conn.request("POST", path, body=json.dumps({"query": q.tolist()}),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException):
            break
        if resp.status != 200:
            errors.append(f"{resp.status} {raw[:200]!r}")
            break
        counts.append(1)
    conn.close()


def test_concurrent_readers_and_writers_lose_nothing(tmp_path):
    d, writers, per_writer, readers = 32, 6, 40, 4
    rng = np.random.default_rng(0)
    with LiveServer(tmp_path / "data", d) as srv:
        srv.call("POST", "/collections/c/write", {"vectors": rng.standard_normal((4, d)).tolist()})
        acked: list[int] = []
        reads: list[int] = []
        errors: list[str] = []
        stop = threading.Event()
        threads = [threading.Thread(target=_writer, args=(
            srv.port, "/collections/c/write", rng.standard_normal((per_writer, d)), acked,
            threading.Event(), errors)) for _ in range(writers)]
        rthreads = [threading.Thread(target=_reader, args=(
            srv.port, "/db/default/collections/c/read", rng.standard_normal((16, d)), reads,
            stop, errors)) for _ in range(readers)]
        for t in threads + rthreads:
            t.start()
        for t in threads:
            t.join(120)
        stop.set()
        for t in rthreads:
            t.join(60)
        assert not errors, errors[:3]
        assert len(acked) == writers * per_writer and reads
        status, stats = srv.call("GET", "/collections/c/stats")
        assert stats["writes"] == 4 + writers * per_writer
        assert stats["documents"] == writers * per_writer
        status, docs = srv.call("GET", "/collections/c/documents?limit=1000")
        assert len({doc["id"] for doc in docs["documents"]}) == writers * per_writer


def test_sigterm_finishes_in_flight_writes(tmp_path):
    d, writers = 32, 8
    data = tmp_path / "data"
    rng = np.random.default_rng(1)
    srv = LiveServer(data, d)
    acked: list[int] = []
    errors: list[str] = []
    threads = [threading.Thread(target=_writer, args=(
        srv.port, "/collections/c/write", rng.standard_normal((10_000, d)), acked,
        threading.Event(), errors)) for _ in range(writers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    code = srv.stop()
    for t in threads:
        t.join(60)
    assert code == 0, srv.output()[-2000:]
    assert not errors, errors[:3]
    assert len(acked) >= 50
    with LiveServer(data, d) as again:
        stats = again.call("GET", "/collections/c/stats")[1]
    # every acknowledged write is there; at most the few unacknowledged in flight besides
    assert len(acked) <= stats["writes"] <= len(acked) + writers
    assert stats["documents"] == stats["writes"]


# -- the recipe of seeds/002, unchanged, against a live server -----------------------------------

# Verbatim from seeds/002_785c22d0c18ac385.txt (the code blocks, in order). Only the URL
# constant is patched, and only when port 6380 is taken on this machine.
RECIPE = r'''
import json, sqlite3, struct, urllib.request
import numpy as np

DB = "agents"

def call(method, path, body=None):
    req = urllib.request.Request(
        "http://localhost:6380" + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))

def cos(a, b):
    a, b = np.asarray(a), np.asarray(b)
    n = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / n) if n else 0.0

side = sqlite3.connect("memory.db")
side.execute("CREATE TABLE IF NOT EXISTS turns (conv TEXT, ts REAL, "
             "text TEXT, vec BLOB)")

def remember(conv, text, ts):
    """Write one turn to its conversation's collection and to the sidecar.

    The metadata rides along so the turn is retrievable as a document; the
    sidecar copy holds the exact vector, which is what resolution scores
    against. Storing a re-encoded vector later would resolve to noise."""
    v = embed(text)                                   # centered, unit-length
    call("POST", f"/db/{DB}/collections/{conv}/write",
         {"vectors": [list(v)], "metadata": [{"text": text, "ts": ts}]})
    side.execute("INSERT INTO turns VALUES (?,?,?,?)",
                 (conv, ts, text, struct.pack(f"{len(v)}f", *v)))
    side.commit()

def recall(conv, message, n=5):
    """Returns (fidelity, [(text, confidence), ...]).

    Fidelity is cos(query, reconstruction): how far the state had to travel
    from what was asked to what the memory settled on. High means the topic
    already has a basin here; low means this is new ground."""
    q = embed(message)
    r = call("POST", f"/db/{DB}/collections/{conv}/read",
             {"query": list(q), "strategy": "iterative"})["result"]
    f = cos(q, r)

    # Resolve the RECONSTRUCTION. The query's nearest turns are the ones
    # this message already resembles — which the agent has in front of it.
    # The reconstruction's nearest turns are what the memory concluded,
    # including turns that are not top-1 similar to the message itself.
    rows = side.execute("SELECT text, vec FROM turns WHERE conv=?", (conv,))
    scored = []
    for text, blob in rows:
        cv = np.array(struct.unpack(f"{len(blob)//4}f", blob))
        scored.append((cos(r, cv), text))
    scored.sort(reverse=True)
    return f, [(t, s) for s, t in scored[:n]]

def band(s):
    """Confidence label for one recalled turn. Cut points are illustrative:
    derive them on your own collection — see calibrate-a-gate.md."""
    return "vivid" if s >= 0.85 else "clear" if s >= 0.70 else "vague"

def build_context(conv, message):
    f, mems = recall(conv, message)

    if f < TAU:                      # TAU derived from held-out messages
        # Abstain. Handing the model an empty context and a question it
        # will answer anyway is how a memory system produces confident
        # fabrication; returning "nothing recalled" is an answer.
        return None, f

    # Strong recall is specific: a few turns carry it. Weak recall is
    # diffuse: widen the window and downgrade the framing around it.
    k = 3 if f >= 0.70 else 8
    lines = "\n".join("- [%s] %s" % (band(s), t) for t, s in mems[:k]
                      if s >= 0.50)
    return lines, f
'''

EMBED_DIM = 256
TURNS = [
    "User is migrating the billing service off Stripe; deadline is Q3.",
    "Decided against a queue in front of the webhook, retries suffice.",
    "User mentioned a staging environment in eu-west.",
    "The team picked Postgres over MySQL for the new ledger.",
    "Alice will own the incident runbook from next sprint.",
]
_WORDS = sorted({w for t in TURNS for w in t.lower().replace(";", " ").replace(",", " ")
                 .replace(".", " ").split()})


def _raw(text: str) -> np.ndarray:
    """A seeded random projection of the hashed words of ``text`` (deterministic)."""
    out = np.zeros(EMBED_DIM)
    for word in text.lower().replace(";", " ").replace(",", " ").replace(".", " ")\
            .replace("?", " ").split():
        seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        out += np.random.default_rng(seed).standard_normal(EMBED_DIM)
    return out


_MEAN = np.mean([_raw(t) for t in TURNS + ["what", "is", "the", "a", "of", "new"]], axis=0)


def embed(text: str) -> np.ndarray:
    """Centered and unit length, float64 (so ``list(v)`` is JSON-serialisable)."""
    v = _raw(text) - _MEAN
    return v / np.linalg.norm(v)


def test_seed_002_recipe_runs_unchanged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the recipe's sidecar memory.db lands here
    port = RECIPE_PORT if port_is_free(RECIPE_PORT) else None
    try:
        srv = LiveServer(tmp_path / "data", 8, port)
    except RuntimeError:
        if port is None:
            raise
        srv = LiveServer(tmp_path / "data", 8)  # 6380 was taken meanwhile
    with srv:
        run_recipe(srv)


def run_recipe(srv) -> None:
    """The seed-002 recipe, unchanged but for its URL, against the live server ``srv``
    (the working directory receives the recipe's sidecar file)."""
    source = RECIPE
    if srv.port != RECIPE_PORT:  # the one change allowed: the URL constant
        source = source.replace('"http://localhost:6380"', f'"http://localhost:{srv.port}"')
    # The recipe assumes its database exists.
    assert srv.call("POST", "/db", {"name": "agents", "dimension": EMBED_DIM})[0] == 200
    # TAU from held-out messages for this embedding: related ones score >= 0.4,
    # unrelated ones <= 0.15 (fidelity of an iterative read).
    ns: dict[str, object] = {"embed": embed, "TAU": 0.3}
    exec(compile(source, "seed_002_recipe", "exec"), ns)  # noqa: S102 - runs the recipe unchanged, as users do
    remember, recall, build_context = ns["remember"], ns["recall"], ns["build_context"]
    for i, text in enumerate(TURNS):
        remember("conv-1", text, 1000.0 + i)

    stats = srv.call("GET", "/db/agents/collections/conv-1/stats")[1]
    assert stats["writes"] == len(TURNS) and stats["documents"] == len(TURNS)

    for text in TURNS:
        f, mems = recall("conv-1", text)
        assert mems[0][0] == text, (text, mems[:2], f)
        assert f >= 0.3
    # a paraphrase lands on its turn
    f, mems = recall("conv-1", "billing service Stripe migration deadline")
    assert mems[0][0] == TURNS[0]

    lines, f = build_context("conv-1", "who owns the incident runbook, Alice?")
    assert lines is not None and TURNS[4] in lines and lines.startswith("- ["), (lines, f)
    assert f >= ns["TAU"]
    # a topic the conversation never touched abstains
    lines, f = build_context("conv-1", "recipe for banana bread")
    assert lines is None and f < ns["TAU"]
    # the documents the recipe's writes created carry its metadata
    docs = srv.call("GET", "/db/agents/collections/conv-1/documents")[1]["documents"]
    assert [d["metadata"]["text"] for d in docs] == TURNS
    # "verify the collection is the one you think": stats 404 for a typo
    assert srv.call("GET", "/db/agents/collections/conv-l/stats")[0] == 404


def test_load_client_reads_whole_responses_and_stops_on_an_error(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("http_load", ROOT / "benchmarks" / "http_load.py")
    http_load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(http_load)
    queries = [json.dumps({"query": row.tolist()}).encode() for row in np.eye(8)]
    with LiveServer(tmp_path / "data", 8) as srv:
        srv.call("POST", "/collections/c/write", {"vectors": np.eye(8).tolist()})
        r = http_load.run_phase_raw("127.0.0.1", srv.port, None, "POST", "/collections/c/read",
                                    queries, 4, 300, 60)
        assert r["requests"] == 300 and r["p50_ms"] > 0
        batch = [json.dumps({"queries": np.eye(8)[[i % 8 for i in range(500)]].tolist()}).encode()]
        assert len(srv.call("POST", "/collections/c/batch_analyze", json.loads(batch[0]))[1][
            "results"]) == 500  # an answer of many TCP segments
        r = http_load.run_phase_raw("127.0.0.1", srv.port, None, "POST",
                                    "/collections/c/batch_analyze", batch, 2, 10, 60)
        assert r["requests"] == 10
        with pytest.raises(SystemExit, match="400"):  # an empty memory cannot be read
            http_load.run_phase_raw("127.0.0.1", srv.port, None, "POST",
                                    "/collections/empty/read", queries, 2, 10, 60)
