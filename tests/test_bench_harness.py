"""The benchmarks' own machinery: the rewinding harness, the tools' smoke runs, the shared data and report helpers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.asv.bench_engine import Rewinder
from benchmarks.report import markdown_table, write_csv
from benchmarks.vectors import cosines, perturb, random_patterns
from conftest import clustered
from hopmem import Memory


@pytest.mark.parametrize("backend", ["native", "reference"])
@pytest.mark.parametrize("config", [dict(mode="competitive"), dict(mode="plain"),
                                    dict(mode="competitive", max_locations=12)])
def test_rewind_gives_the_snapshot_back_bit_for_bit(backend, config):
    rng = np.random.default_rng(3)
    mem = Memory(16, seed=1, backend=backend, **config)
    mem.write(clustered(60, 16, rng=rng, unit=True))
    rw = Rewinder(mem, mem.snapshot())
    for x in clustered(12, 16, rng=rng, unit=True):
        rw.write(x)
        assert not rw.matches_snapshot()  # the write changed something...
        rw.rewind()
        assert rw.matches_snapshot()      # ...and the rewind undid all of it


@pytest.mark.subprocess
def test_the_store_bench_reopens_in_fresh_processes(tmp_path):
    # benchmarks/store_bench.py times a restart in a fresh interpreter: the child
    # must find the file's collection, read, query its documents and report.
    import hopmem
    from benchmarks.store_bench import fresh_reopen

    path = str(tmp_path / "small.hopmem")
    with hopmem.open(path, dim=16) as db:
        db.collection("big").write(clustered(40, 16, rng=5, unit=True),
                                   metadata=[{"i": i} for i in range(40)])
    times = fresh_reopen(path, "big", 16, runs=2)
    assert set(times) == {"reopen", "read", "query"}
    assert all(0.0 < t < 60.0 for t in times.values())


def test_the_kernel_ab_runs_a_build_against_itself(capsys):
    # benchmarks/ab_kernel.py imports another build of the kernel beside this
    # one; here the other build is this very file, so every result must agree.
    from benchmarks import ab_kernel
    from hopmem.engine import _kernel

    ab_kernel.main([_kernel.__file__, "--rounds", "1"])
    out = capsys.readouterr().out
    assert "write, batch of 100 (d 384, competitive)" in out
    assert "read, batch of 64 per call (d 128, plain)" in out


def test_the_ann_benchmark_runs_end_to_end(tmp_path):
    """benchmarks/ann.py --smoke: every figure it reports is there and in range."""
    pytest.importorskip("faiss")  # the bench extra
    pytest.importorskip("matplotlib")
    from benchmarks import ann
    out = tmp_path / "ann.json"
    assert ann.main(["--smoke", "--peers", "faiss-ivf", "--out", str(out),
                     "--plot", str(tmp_path / "ann.png")]) == 0
    (res,) = json.loads(out.read_text())
    assert res["n"] == 6000 and res["groups"] > 0 and res["write_s"] > 0
    assert res["memory_bytes"] > res["raw_bytes"]
    ours = res["curves"]["hopmem approximate"]
    assert [p["probe"] for p in ours] == [2, 4, 8]
    for p in ours:
        assert 0.0 < p["recall"] <= 1.0 and 0.0 < p["p50_ms"] <= p["p99_ms"]
        assert -1.0 <= p["cos_min"] <= p["cos_median"] <= 1.0 + 1e-9
    # more groups probed never loses a row: the probed rows only grow
    assert ours[0]["recall"] <= ours[1]["recall"] <= ours[2]["recall"]
    assert any(name.startswith("faiss IVF") for name in res["curves"])
    assert (tmp_path / "ann.png").stat().st_size > 0


def test_perturb_sets_the_exact_angle(rng):
    X = random_patterns(50, 32, rng)
    for deg in (0, 30, 60, 90):
        Q = perturb(X, math.radians(deg), rng)
        np.testing.assert_allclose(cosines(Q, X), math.cos(math.radians(deg)), atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(Q, axis=1), 1.0, atol=1e-5)


def test_csv_and_markdown(tmp_path):
    path = write_csv(tmp_path / "x.csv", [{"a": 1, "b": 0.5}, {"a": 2, "c": "z"}])
    assert path.read_text().splitlines()[0] == "a,b,c"
    assert "| a | b |" in markdown_table([{"a": 1, "b": float("inf")}])


def test_peers_exact_contenders_agree_and_plain_read_is_the_textbook_update():
    from benchmarks import peers

    contenders = [peers.Hopmem(), peers.NumPy()]
    for module, cls in (("faiss", peers.Faiss), ("apsw", peers.SqliteVec), ("sqlite_vec", None),
                        ("hnswlib", peers.Hnsw)):
        try:
            __import__(module)
        except ImportError:
            continue
        if cls is not None:
            contenders.append(cls())
    rows = peers.search_benchmark(500, 20, d=32, contenders=contenders, warmup=1, progress=False)
    for r in rows:
        assert r["queries"] == 20 and r["median_us"] > 0
        if r["exact"]:
            assert r["recall_at_10"] == 1.0, r["contender"]
    hop = peers.hopfield_benchmark(200, 5, d=32, beta=10.0, progress=False)
    assert all(r["max_abs_diff_vs_float64_textbook"] < 1e-5 for r in hop)
