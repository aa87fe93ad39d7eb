"""``hopmem serve --ray local``: the HTTP server as a router over a local Ray cluster.

The same requests as the single-node live tests (the seed-002 recipe included)
against one ``serve --ray local`` process shared by the module, and Ctrl-C
(SIGINT to the process group) leaving no Ray process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import CLUSTER_SKIP, ray_installed

pytest.importorskip("uvicorn")
psutil = pytest.importorskip("psutil")
if not ray_installed():
    pytest.skip(CLUSTER_SKIP, allow_module_level=True)

from test_server_live import ROOT, LiveServer, _reader, _writer, free_port, run_recipe  # noqa: E402

pytestmark = pytest.mark.subprocess
RAY_ARGS = ("--ray", "local", "--hosts", "2")


@pytest.fixture(scope="module", params=[1, 2], ids=["r1", "r2"])
def ray_server(tmp_path_factory, request):
    """The server over a local cluster whose databases have one copy of each shard, then two
    (``--replicas 2``, reads from any in-sync copy)."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    replicas = ("--replicas", str(request.param), "--read-from",
                "any" if request.param > 1 else "leader")
    with LiveServer(tmp_path_factory.mktemp("serve-ray") / "data", 8, None, *RAY_ARGS,
                    *replicas) as srv:
        yield srv


def test_routes_answer_as_on_one_node(ray_server):
    srv = ray_server
    assert srv.call("GET", "/health") == (200, {"status": "ok"})
    assert srv.call("GET", "/ready") == (200, {"status": "ok"})
    status, body = srv.call("POST", "/collections/c/write",
                            {"vectors": np.eye(8)[:3].tolist(), "metadata": [1, 2, 3]})
    assert status == 200 and body == {"count": 3, "ids": [1, 2, 3]}
    status, body = srv.call("POST", "/db/default/collections/c/read", {"query": np.eye(8)[1].tolist()})
    assert status == 200 and len(body["result"]) == 8
    status, body = srv.call("POST", "/collections/c/batch_analyze",
                            {"queries": np.eye(8)[:3].tolist()})
    assert status == 200 and len(body["results"]) == 3
    assert srv.call("POST", "/collections/c/read", {"query": [1, 2]}) == (
        400, {"error": "dimension mismatch: expected 8, got 2"})
    assert srv.call("GET", "/collections/nope/stats")[0] == 404
    status, hits = srv.call("POST", "/collections/c/documents/query",
                            {"query": np.eye(8)[2].tolist(), "n": 1, "mode": "exact"})
    assert status == 200 and hits["results"][0]["metadata"] == 3, hits
    status, stats = srv.call("GET", "/collections/c/stats")
    assert stats["writes"] == 3 and stats["documents"] == 3
    assert srv.call("POST", "/db", {"name": "more", "dimension": 4})[0] == 200
    assert srv.call("DELETE", "/db/more")[0] == 200


def test_seed_002_recipe_over_ray(ray_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_recipe(ray_server)


def test_concurrent_readers_and_writers_over_ray(ray_server):
    d, writers, per_writer, readers = 8, 4, 15, 3
    srv = ray_server
    rng = np.random.default_rng(0)
    srv.call("POST", "/collections/conc/write", {"vectors": rng.standard_normal((4, d)).tolist()})
    acked: list[int] = []
    reads: list[int] = []
    errors: list[str] = []
    stop = threading.Event()
    threads = [threading.Thread(target=_writer, args=(
        srv.port, "/collections/conc/write", rng.standard_normal((per_writer, d)), acked,
        threading.Event(), errors)) for _ in range(writers)]
    rthreads = [threading.Thread(target=_reader, args=(
        srv.port, "/collections/conc/read", rng.standard_normal((16, d)), reads, stop, errors))
        for _ in range(readers)]
    for t in threads + rthreads:
        t.start()
    for t in threads:
        t.join(120)
    stop.set()
    for t in rthreads:
        t.join(60)
    assert not errors, errors[:3]
    assert len(acked) == writers * per_writer and reads
    stats = srv.call("GET", "/collections/conc/stats")[1]
    assert stats["writes"] == 4 + writers * per_writer
    assert stats["documents"] == writers * per_writer


def _ray_processes(pid: int) -> list[psutil.Process]:
    try:
        family = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return family


def test_ctrl_c_leaves_no_ray_process(tmp_path):
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONFAULTHANDLER="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")
    # As from a terminal: a suite started in the background of a script runs with SIGINT ignored, which
    # the server would inherit; a Python handler here is not inherited (exec resets it to the default).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hopmem.server", "serve", "--data-dir", str(tmp_path / "data"),
             "--dimension", "8", "--port", str(port), *RAY_ARGS],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT), start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        deadline = time.monotonic() + 60
        names: set[str] = set()
        while time.monotonic() < deadline and proc.poll() is None:
            names = {p.name() for p in _ray_processes(proc.pid) if p.is_running()}
            if {"raylet", "gcs_server"} <= names and (tmp_path / "data" / "catalog.sqlite").exists():
                break
            time.sleep(0.2)
        family = _ray_processes(proc.pid)
        assert {"raylet", "gcs_server"} <= {p.name() for p in family}, names
        temp_dirs = {a.split("=", 1)[1].split("/session_")[0] for p in family
                     for a in p.cmdline() if a.startswith("--log_dir=")}
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            # still running: SIGABRT makes faulthandler write every thread's stack to the log, then fail with it
            os.kill(proc.pid, signal.SIGABRT)
            proc.wait(30)
            pytest.fail("the server ignored Ctrl-C for 60 s; its log and stacks:\n"
                        + (tmp_path / "serve.log").read_text(errors="replace")[-20000:])
        gone, alive = psutil.wait_procs(family, timeout=20)
        assert not alive, [(p.pid, p.name()) for p in alive]
        assert temp_dirs and not any(os.path.exists(d) for d in temp_dirs), temp_dirs
    finally:
        # the whole group, so a failure (the server gone, its Ray processes not) leaves nothing running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
