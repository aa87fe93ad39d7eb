"""The benchmark harness puts a memory back exactly where it was between timed writes."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.asv.bench_engine import Rewinder
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
    from hopmem import _kernel

    ab_kernel.main([_kernel.__file__, "--rounds", "1"])
    out = capsys.readouterr().out
    assert "write, batch of 100 (d 384, competitive)" in out
    assert "read, batch of 64 per call (d 128, plain)" in out
